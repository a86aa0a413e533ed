# inferx command-line tests: run the real binary (when src/cli is built).
if(TARGET inferx)
  add_test(NAME cli_info
    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/cli_info_test.sh $<TARGET_FILE:inferx>
            ${INFERX_SOURCE_DIR} ${INFERX_SHARED_DIR} ${CMAKE_CURRENT_BINARY_DIR})
  add_test(NAME cli_info_vocab
    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/cli_info_test.sh $<TARGET_FILE:inferx>
            ${INFERX_SOURCE_DIR} ${INFERX_SHARED_DIR} ${CMAKE_CURRENT_BINARY_DIR} --vocab)
  set_tests_properties(cli_info cli_info_vocab PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
endif()
# inferx bench --serve against a real inferx serve on a loopback port.
if(TARGET inferx)
  add_test(NAME cli_bench_serve
    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/cli_bench_serve_test.sh $<TARGET_FILE:inferx> ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(cli_bench_serve PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
endif()
# inferx perplexity: options, --json, KL divergence against itself, bad input;
# and (cli_perplexity_ref, needs ../shared) llama.cpp's figure on the held-out text.
if(TARGET inferx)
  if(NOT TARGET PkgConfig::JANSSON)
    pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
  endif()
  add_executable(json_get json_get.c)
  target_link_libraries(json_get PRIVATE PkgConfig::JANSSON)
  add_test(NAME cli_perplexity
    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/cli_perplexity_test.sh $<TARGET_FILE:inferx> $<TARGET_FILE:json_get>
            ${INFERX_SOURCE_DIR} ${INFERX_SHARED_DIR} ${CMAKE_CURRENT_BINARY_DIR})
  add_test(NAME cli_perplexity_ref
    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/cli_perplexity_test.sh $<TARGET_FILE:inferx> $<TARGET_FILE:json_get>
            ${INFERX_SOURCE_DIR} ${INFERX_SHARED_DIR} ${CMAKE_CURRENT_BINARY_DIR} --reference)
  set_tests_properties(cli_perplexity cli_perplexity_ref PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
# inferx run: the completion on stdout is the engine's (greedy = the reference).
if(TARGET inferx)
  add_test(NAME cli_run
    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/cli_run_test.sh $<TARGET_FILE:inferx> ${INFERX_SOURCE_DIR}
            ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(cli_run PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
endif()
# inferx quantize / imatrix: types and mixes reloaded and run, overrides, calibration,
# bad input; and (cli_quantize_ref, needs ../shared) llama.cpp's tensor types per mix.
if(TARGET inferx)
  add_test(NAME cli_quantize
    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/cli_quantize_test.sh $<TARGET_FILE:inferx> $<TARGET_FILE:json_get>
            ${INFERX_SOURCE_DIR} ${INFERX_SHARED_DIR} ${CMAKE_CURRENT_BINARY_DIR})
  add_test(NAME cli_quantize_ref
    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/cli_quantize_test.sh $<TARGET_FILE:inferx> $<TARGET_FILE:json_get>
            ${INFERX_SOURCE_DIR} ${INFERX_SHARED_DIR} ${CMAKE_CURRENT_BINARY_DIR} --reference)
  set_tests_properties(cli_quantize cli_quantize_ref PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77)
endif()
