if(NOT TARGET PkgConfig::JANSSON)
  pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
endif()
ix_add_test(test_engine SOURCES test_engine.c LIBS ix_engine PkgConfig::JANSSON TIMEOUT 600)
