ix_add_test(test_sample SOURCES test_sample.c LIBS ix_sample m)
