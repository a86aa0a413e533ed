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
# The disk tier under the prefix cache: evict to disk, reload, tenants,
# fingerprints, a corrupted block, the cost decision, persist and reopen.
ix_add_test(test_kv_disk SOURCES test_kv_disk.c LIBS ix_engine ix_kv ix_kvstore)
if(TARGET inferx)
  add_test(NAME cli_serve_disk COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli_serve_disk_test.sh $<TARGET_FILE:inferx>)
  set_tests_properties(cli_serve_disk PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
# Sessions and stored responses across a SIGTERM restart of inferx serve.
if(TARGET inferx)
  add_test(NAME cli_sessions COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli_sessions_test.sh $<TARGET_FILE:inferx>)
  set_tests_properties(cli_sessions PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
