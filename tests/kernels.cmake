# kernels: every ISA path against the generic reference, conversions, pool.
ix_add_test(test_kernels SOURCES test_kernels.c LIBS ix_kernels)
