# Model shards against the whole model, the ranks being threads joined by a
# transport of the test's own (no MPI needed; runs under the sanitizers).
ix_add_test(test_tp SOURCES test_tp.c LIBS ix_model Threads::Threads TIMEOUT 600)
# Tensor parallelism over MPI (docs/distributed.md): 2 and 3 ranks give one
# process's greedy output on the bundled and the ../shared/arch models; a
# killed rank ends the job. Skipped (77) when mpirun is missing.
if(TARGET inferx AND INFERX_MPI)
  add_test(NAME tp_run
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/tp_test.sh $<TARGET_FILE:inferx> ${INFERX_SOURCE_DIR} ${INFERX_SHARED_DIR}
            ${CMAKE_CURRENT_BINARY_DIR} run)
  add_test(NAME tp_fail
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/tp_test.sh $<TARGET_FILE:inferx> ${INFERX_SOURCE_DIR} ${INFERX_SHARED_DIR}
            ${CMAKE_CURRENT_BINARY_DIR} fail)
  set_tests_properties(tp_run PROPERTIES TIMEOUT 1500 SKIP_RETURN_CODE 77)
  set_tests_properties(tp_fail PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
