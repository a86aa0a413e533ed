# KV cache manager: unit tests (incl. out-of-memory paths) and the randomized stress test.
ix_add_test(test_kv SOURCES test_kv.c LIBS ix_kv)
ix_add_test(test_kv_stress SOURCES test_kv_stress.c LIBS ix_kv TIMEOUT 120)
