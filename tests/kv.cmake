# KV cache manager: unit tests (incl. out-of-memory paths) and the randomized stress test.
ix_add_test(test_kv SOURCES test_kv.c LIBS ix_kv)
ix_add_test(test_kv_stress SOURCES test_kv_stress.c LIBS ix_kv TIMEOUT 120)
# KV blocks on disk (the disk tier's store): checks, LRU, reopen, a writer
# killed mid-write, the lock, offline verify and clear.
ix_add_test(test_kvstore SOURCES test_kvstore.c LIBS ix_kvstore)
if(TARGET inferx)
  add_test(NAME cli_kvstore COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli_kvstore_test.sh $<TARGET_FILE:inferx>
    ${CMAKE_BINARY_DIR})
endif()
