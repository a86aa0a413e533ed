# kernels: every ISA path against the generic reference, conversions, pool.
ix_add_test(test_kernels SOURCES test_kernels.c LIBS ix_kernels)
# decode's lockstep tiles prefetch into L1 or L2 by CPU (INFERX_PREFETCH
# overrides; avx512.c): both forms against the reference on every host
foreach(pf l1 l2)
  add_test(NAME test_kernels_prefetch_${pf} COMMAND test_kernels)
  set_tests_properties(test_kernels_prefetch_${pf} PROPERTIES TIMEOUT 300 ENVIRONMENT INFERX_PREFETCH=${pf})
endforeach()
