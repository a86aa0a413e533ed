# OpenAI-compatible server: in-process HTTP tests on the bundled model (they
# include server_int.h for the chat templates, hence libmicrohttpd's headers;
# one runs the inferx binary, when built, for its key file and access log),
# test_server_api for /v1/models/{id}, /v1/embeddings and /v1/responses, and
# end-to-end tests with the real client libraries -- the official OpenAI Node
# SDK, the Vercel AI SDK, LangChain JS -- against one `inferx serve` (skips
# without node or without tests/js/node_modules; `npm ci --prefix tests/js`
# installs them).
if(TARGET ix_server)
  pkg_check_modules(JANSSON_T REQUIRED IMPORTED_TARGET jansson)
  pkg_check_modules(MHD_T REQUIRED IMPORTED_TARGET libmicrohttpd)
  ix_add_test(test_server SOURCES test_server.c LIBS ix_server PkgConfig::JANSSON_T PkgConfig::MHD_T TIMEOUT 180)
  ix_add_test(test_server_api SOURCES test_server_api.c LIBS ix_server PkgConfig::JANSSON_T TIMEOUT 180)
  # Hardening: deadlines, connection limits, framing, half-close, admission,
  # bounded work, TLS (raw sockets; curl and openssl for TLS, else skipped).
  ix_add_test(test_server_net SOURCES test_server_net.c LIBS ix_server PkgConfig::JANSSON_T PkgConfig::MHD_T TIMEOUT 240)
  # Tool calling without a model: the answer parsers and the forced-call grammar.
  ix_add_test(test_tools SOURCES test_tools.c LIBS ix_server PkgConfig::JANSSON_T PkgConfig::MHD_T)
  # Chat prompts without HTTP: the model-template conformance table through the server's path.
  ix_add_test(test_chat SOURCES test_chat.c LIBS ix_server PkgConfig::JANSSON_T PkgConfig::MHD_T)
  if(TARGET inferx)
    add_dependencies(test_server inferx)
    target_compile_definitions(test_server PRIVATE IX_INFERX_BIN="$<TARGET_FILE:inferx>")
    add_test(NAME server_openai_sdk
      COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/js/run_sdk_test.sh $<TARGET_FILE:inferx> ${CMAKE_CURRENT_LIST_DIR}/js)
    set_tests_properties(server_openai_sdk PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77)
  endif()
endif()
