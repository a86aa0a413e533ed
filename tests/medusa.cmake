# Medusa heads: training on a synthetic mapping, the file, bad input
# (test_medusa), `inferx medusa-train` end to end on the bundled model
# with a text of the repository, and `inferx run --medusa` with its heads.
ix_add_test(test_medusa SOURCES test_medusa.c LIBS ix_medusa m)
if(TARGET inferx)
  add_test(NAME cli_medusa_train COMMAND inferx medusa-train -f ${INFERX_SOURCE_DIR}/README.md --prompts 8 --prompt 24
    --gen 12 --epochs 2 -t 2 -o ${CMAKE_BINARY_DIR}/medusa-cli.gguf)
  set_tests_properties(cli_medusa_train PROPERTIES TIMEOUT 300 PASS_REGULAR_EXPRESSION "\"chain_acceptance\": [0-9.]+"
    FIXTURES_SETUP medusa_heads)
  # the heads just trained, guessing for `inferx run --medusa` (greedy: the
  # adaptive k may turn speculation down, so only the report is checked)
  add_test(NAME cli_run_medusa COMMAND inferx run -p "It was on this point that she had" -n 24 --temp 0 -t 2
    --medusa ${CMAKE_BINARY_DIR}/medusa-cli.gguf)
  set_tests_properties(cli_run_medusa PROPERTIES TIMEOUT 120 FIXTURES_REQUIRED medusa_heads
    PASS_REGULAR_EXPRESSION "speculation \\(medusa\\): [0-9]+ of [0-9]+ guessed tokens accepted")
endif()
