# kernels: every ISA path against the generic reference, conversions, pool.
ix_add_test(test_kernels SOURCES test_kernels.c LIBS ix_kernels)
# decode's lockstep tiles prefetch into L1 or L2 by CPU (INFERX_PREFETCH
# overrides; avx512.c): both forms against the reference on every host. Not
# in the sanitizer builds: the two forms differ only in their prefetch
# instructions, which the sanitizers do not check, and test_kernels there
# already runs the form this CPU picks (~75 s of ASan time saved).
if(NOT INFERX_SANITIZE AND NOT INFERX_TSAN)
  foreach(pf l1 l2)
    add_test(NAME test_kernels_prefetch_${pf} COMMAND test_kernels)
    set_tests_properties(test_kernels_prefetch_${pf} PROPERTIES TIMEOUT 300 ENVIRONMENT INFERX_PREFETCH=${pf})
  endforeach()
endif()
# Under ThreadSanitizer only the tests that run the worker pool (test_kernels.c).
if(INFERX_TSAN)
  set_tests_properties(test_kernels PROPERTIES ENVIRONMENT IX_TEST_THREADED_ONLY=1)
endif()
