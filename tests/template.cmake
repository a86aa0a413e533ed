# Chat templates: the Jinja feature table, error and limit cases, the
# conformance table of real model templates, the fuzz corpus replayed, and
# (with -DINFERX_FUZZ=ON, clang) the libFuzzer target.
if(TARGET ix_template)
  pkg_check_modules(JANSSON_TPL REQUIRED IMPORTED_TARGET jansson)
  # Renders a template file with a JSON context (tests/template_ref.py compares it with jinja2).
  add_executable(template_render EXCLUDE_FROM_ALL ${CMAKE_CURRENT_LIST_DIR}/template_render.c)
  target_link_libraries(template_render PRIVATE ix_template PkgConfig::JANSSON_TPL)

  ix_add_test(test_template SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_template.c
    LIBS ix_template PkgConfig::JANSSON_TPL Threads::Threads TIMEOUT 120)
  ix_add_test(test_template_models SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_template_models.c
    LIBS ix_template ix_gguf PkgConfig::JANSSON_TPL)
  ix_add_test(test_template_corpus
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/corpus_replay.c ${CMAKE_CURRENT_LIST_DIR}/fuzz_template.c
    LIBS ix_template ix_gguf PkgConfig::JANSSON_TPL)
  target_compile_definitions(test_template_corpus PRIVATE IX_CORPUS="template")

  if(INFERX_FUZZ) # the option and the compiler check are in gguf.cmake
    set(_ix_tpl_fuzz_san "")
    if(NOT INFERX_SANITIZE)
      set(_ix_tpl_fuzz_san -fsanitize=address,undefined -fno-sanitize-recover=all)
    endif()
    target_compile_options(ix_template PRIVATE -fsanitize=fuzzer-no-link ${_ix_tpl_fuzz_san})
    add_executable(fuzz_template ${CMAKE_CURRENT_LIST_DIR}/fuzz_template.c)
    target_compile_options(fuzz_template PRIVATE -fsanitize=fuzzer ${_ix_tpl_fuzz_san})
    target_link_options(fuzz_template PRIVATE -fsanitize=fuzzer ${_ix_tpl_fuzz_san})
    target_link_libraries(fuzz_template PRIVATE ix_template PkgConfig::JANSSON_TPL)
  endif()
endif()
