# Pre-tokenizer tests. They link a library of just pretok.c and unicode.c so
# that they build and run while the rest of the tokenizer is in progress.
if(NOT TARGET PkgConfig::UTF8PROC)
  pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
endif()

add_library(ix_pretok_only STATIC
  ${INFERX_SOURCE_DIR}/src/tokenizer/pretok.c
  ${INFERX_SOURCE_DIR}/src/tokenizer/unicode.c)
target_include_directories(ix_pretok_only PUBLIC ${INFERX_SOURCE_DIR}/src)
target_link_libraries(ix_pretok_only PUBLIC ix_core PkgConfig::UTF8PROC)

ix_add_test(test_pretok SOURCES test_pretok.c LIBS ix_pretok_only)
