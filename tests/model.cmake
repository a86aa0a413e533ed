pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
ix_add_test(test_model SOURCES test_model.c LIBS ix_model PkgConfig::JANSSON m TIMEOUT 1500)
ix_add_test(test_arch SOURCES test_arch.c LIBS ix_model PkgConfig::JANSSON m TIMEOUT 900)
ix_add_test(test_quant SOURCES test_quant.c LIBS ix_model PkgConfig::JANSSON m TIMEOUT 900)
