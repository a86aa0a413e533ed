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
