# Speculative decoding: proposers, the choice of k, and output identity on the engine.
ix_add_test(test_spec SOURCES test_spec.c LIBS ix_engine m TIMEOUT 900)
