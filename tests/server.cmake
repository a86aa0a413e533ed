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
  # Sessions (session_id, /v1/sessions) and stored responses (store, previous_response_id), two tenants.
  ix_add_test(test_sessions SOURCES test_sessions.c LIBS ix_server PkgConfig::JANSSON_T TIMEOUT 180)
  # Per-key policy: keys file, rate limits, budgets and their state file, /v1/usage, timeouts.
  ix_add_test(test_server_policy SOURCES test_server_policy.c LIBS ix_server PkgConfig::JANSSON_T PkgConfig::MHD_T TIMEOUT 180)
  # Hardening: deadlines, connection limits, framing, half-close, admission,
  # bounded work, TLS (raw sockets; curl and openssl for TLS, else skipped).
  ix_add_test(test_server_net SOURCES test_server_net.c LIBS ix_server PkgConfig::JANSSON_T PkgConfig::MHD_T TIMEOUT 240)
  # Its deadlines are seconds and its exchanges race libmicrohttpd's own closes:
  # alone, not beside another suite's load (a sanitizer CI run failed it once in
  # test_framing with two suites at once).
  set_tests_properties(test_server_net PROPERTIES RUN_SERIAL TRUE)
  # Tool calling without a model: the answer parsers and the forced-call grammar.
  ix_add_test(test_tools SOURCES test_tools.c LIBS ix_server PkgConfig::JANSSON_T PkgConfig::MHD_T)
  # The HTTP front and the request parsers under the fuzzer (fuzz_http.c):
  # raw bytes, and JSON bodies for each generation / tokenize route.
  ix_add_fuzz(http SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_http.c LIBS ix_server DEFINES IX_FUZZ_RAW
    INSTRUMENT ix_server TIMEOUT 600)
  ix_add_fuzz(request SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_http.c LIBS ix_server
    INSTRUMENT ix_server ix_template ix_grammar TIMEOUT 600)
  # Allocation failures injected on the model, engine and server paths.
  ix_add_test(test_faults SOURCES test_faults.c LIBS ix_server PkgConfig::JANSSON_T TIMEOUT 900)
  # Tracing without a collector: traceparent, sampling, a refused export.
  ix_add_test(test_trace SOURCES test_trace.c LIBS ix_server PkgConfig::JANSSON_T PkgConfig::MHD_T)
  # Chat prompts without HTTP: the model-template conformance table through the server's path.
  ix_add_test(test_chat SOURCES test_chat.c LIBS ix_server PkgConfig::JANSSON_T PkgConfig::MHD_T)
  if(TARGET inferx)
    add_dependencies(test_server inferx)
    target_compile_definitions(test_server PRIVATE IX_INFERX_BIN="$<TARGET_FILE:inferx>")
    add_test(NAME server_openai_sdk
      COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/js/run_sdk_test.sh $<TARGET_FILE:inferx> ${CMAKE_CURRENT_LIST_DIR}/js)
    set_tests_properties(server_openai_sdk PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77)
    # OpenTelemetry: spans decoded by a collector built on the official OTLP
    # definitions (tests/js/otlp_test.mjs); skips without node or the module.
    add_test(NAME server_otlp
      COMMAND sh -c "command -v node >/dev/null 2>&1 || { echo 'skip: node is not installed'; exit 77; }; exec node \"$0\" \"$1\""
              ${CMAKE_CURRENT_LIST_DIR}/js/otlp_test.mjs $<TARGET_FILE:inferx>)
    set_tests_properties(server_otlp PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
    # A short soak (bench/soak.py): streams, disconnects, overload and a
    # rate-limited key for 20 s, then no KV block referenced, memory flat,
    # every stream well formed, every refusal with Retry-After.
    find_program(IX_SOAK_PYTHON3 NAMES python3)
    if(IX_SOAK_PYTHON3)
      # Under a sanitizer the allocator keeps freed memory in quarantine:
      # resident memory grows by design there, so only the other checks count.
      set(_ix_soak_rss "")
      if(INFERX_SANITIZE OR INFERX_TSAN)
        set(_ix_soak_rss --rss-tolerance 100)
      endif()
      add_test(NAME server_soak COMMAND ${IX_SOAK_PYTHON3} ${INFERX_SOURCE_DIR}/bench/soak.py $<TARGET_FILE:inferx>
        --seconds 20 --streams 48 --max-waiting 8 --with-limited-key ${_ix_soak_rss} -- -t 2)
      set_tests_properties(server_soak PROPERTIES TIMEOUT 300)
    endif()
  endif()
endif()
