pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
ix_add_test(test_tokenizer SOURCES test_tokenizer.c LIBS ix_tokenizer PkgConfig::JANSSON)
