ix_add_test(test_engine SOURCES test_engine.c LIBS ix_engine TIMEOUT 600)
