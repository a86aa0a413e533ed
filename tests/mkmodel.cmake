# The model against a naive reference forward pass (loader features; every
# architecture); inferx mkmodel and bench end to end.
ix_add_test(test_model_ref SOURCES test_model_ref.c model_ref.c LIBS ix_model m TIMEOUT 300)
ix_add_test(test_arch_ref SOURCES test_arch_ref.c model_ref.c LIBS ix_model m TIMEOUT 300)

if(TARGET inferx)
  if(NOT TARGET PkgConfig::JANSSON)
    pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
  endif()
  add_executable(bench_json_check bench_json_check.c)
  target_link_libraries(bench_json_check PRIVATE PkgConfig::JANSSON)
  add_test(NAME cli_mkmodel
    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/cli_mkmodel_test.sh $<TARGET_FILE:inferx>
            ${INFERX_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR})
  add_test(NAME cli_bench
    COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/cli_bench_test.sh $<TARGET_FILE:inferx>
            $<TARGET_FILE:bench_json_check> ${INFERX_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(cli_mkmodel cli_bench PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77)
endif()
