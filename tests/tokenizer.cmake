pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
ix_add_test(test_tokenizer SOURCES test_tokenizer.c LIBS ix_tokenizer PkgConfig::JANSSON)
# Tokenizers under the fuzzer: encode/decode round trips, the incremental
# detokenizer against whole decodes (fuzz_tokenizer.c).
ix_add_fuzz(tokenizer SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_tokenizer.c LIBS ix_tokenizer INSTRUMENT ix_tokenizer)
