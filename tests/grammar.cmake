# grammar tests: the parser and matcher (synthetic vocabularies), JSON Schema
# with random walks over real vocabularies (skipped without ../shared), the
# fuzz target's corpus replayed as an ordinary test, and (with
# -DINFERX_FUZZ=ON, clang) the libFuzzer target itself.
if(NOT TARGET PkgConfig::JANSSON)
  pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
endif()
ix_add_test(test_grammar SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_grammar.c LIBS ix_grammar)
ix_add_test(test_grammar_schema SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_grammar_schema.c
  LIBS ix_grammar PkgConfig::JANSSON TIMEOUT 600)
ix_add_test(test_grammar_corpus
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/corpus_replay.c ${CMAKE_CURRENT_LIST_DIR}/fuzz_grammar.c
  LIBS ix_grammar)
target_compile_definitions(test_grammar_corpus PRIVATE IX_CORPUS="grammar")

if(INFERX_FUZZ)
  # gguf.cmake checked the compiler and set _ix_fuzz_san.
  target_compile_options(ix_grammar PRIVATE -fsanitize=fuzzer-no-link ${_ix_fuzz_san})
  add_executable(fuzz_grammar ${CMAKE_CURRENT_LIST_DIR}/fuzz_grammar.c)
  target_compile_options(fuzz_grammar PRIVATE -fsanitize=fuzzer ${_ix_fuzz_san})
  target_link_options(fuzz_grammar PRIVATE -fsanitize=fuzzer ${_ix_fuzz_san})
  target_link_libraries(fuzz_grammar PRIVATE ix_grammar)
endif()
