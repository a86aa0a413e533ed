# Model shards against the whole model, the ranks being threads joined by a
# transport of the test's own (no MPI needed; runs under the sanitizers).
ix_add_test(test_tp SOURCES test_tp.c LIBS ix_model ix_engine Threads::Threads TIMEOUT 600)
# Tensor and pipeline parallelism over MPI (docs/distributed.md): 2 and 3
# ranks (--tp), 2 and 3 stages (--pp) and 2 x 2 (--tp 2 --pp 2) give one
# process's greedy output on the bundled and the ../shared/arch models, and
# a served batch with chunked prefill and preemption the same texts; a killed
# rank ends the job. Skipped (77) when mpirun is missing.
if(TARGET inferx AND INFERX_MPI)
  # test name, tp_test.sh part, timeout
  foreach(t "tp_run;run;1500" "tp_fail;fail;400" "pp_run;pp;1500" "pp_fail;ppfail;400")
    list(GET t 0 name)
    list(GET t 1 part)
    list(GET t 2 limit)
    add_test(NAME ${name}
      COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/tp_test.sh $<TARGET_FILE:inferx> ${INFERX_SOURCE_DIR} ${INFERX_SHARED_DIR}
              ${CMAKE_CURRENT_BINARY_DIR} ${part})
    # one MPI job at a time: the fail parts kill -9 a rank, and a 4-rank job
    # on 2 cores beside another once died before its first line (ctest -j2)
    set_tests_properties(${name} PROPERTIES TIMEOUT ${limit} SKIP_RETURN_CODE 77 RESOURCE_LOCK mpi)
  endforeach()
endif()
