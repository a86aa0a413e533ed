# Medusa heads: training on a synthetic mapping, the file, bad input
# (test_medusa), and `inferx medusa-train` end to end on the bundled model
# with a text of the repository.
ix_add_test(test_medusa SOURCES test_medusa.c LIBS ix_medusa m)
if(TARGET inferx)
  add_test(NAME cli_medusa_train COMMAND inferx medusa-train -f ${INFERX_SOURCE_DIR}/README.md --prompts 8 --prompt 24
    --gen 12 --epochs 2 -t 2 -o ${CMAKE_BINARY_DIR}/medusa-cli.gguf)
  set_tests_properties(cli_medusa_train PROPERTIES TIMEOUT 300 PASS_REGULAR_EXPRESSION "\"chain_acceptance\": [0-9.]+")
endif()
