# gguf tests: unit tests, corruption/fault-injection tests, the fuzz target's
# corpus replayed as an ordinary test, and (with -DINFERX_FUZZ=ON, clang) the
# libFuzzer target itself.
ix_add_test(test_gguf SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gguf.c LIBS ix_gguf)
ix_add_test(test_gguf_corrupt SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gguf_corrupt.c LIBS ix_gguf TIMEOUT 900)
ix_add_test(test_gguf_corpus
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/corpus_replay.c ${CMAKE_CURRENT_LIST_DIR}/fuzz_gguf.c
  LIBS ix_gguf)
target_compile_definitions(test_gguf_corpus PRIVATE IX_CORPUS="gguf")

# Regenerates tests/corpus/gguf/ (see the README there); not built by default.
add_executable(gen_gguf_corpus EXCLUDE_FROM_ALL ${CMAKE_CURRENT_LIST_DIR}/gen_gguf_corpus.c)
target_link_libraries(gen_gguf_corpus PRIVATE ix_gguf)

option(INFERX_FUZZ "Build libFuzzer targets (clang only)" OFF)
if(INFERX_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "INFERX_FUZZ=ON needs clang (-DCMAKE_C_COMPILER=clang)")
  endif()
  # Coverage feedback from the library under test; sanitizers on unless the
  # whole build already has them.
  set(_ix_fuzz_san "")
  if(NOT INFERX_SANITIZE)
    set(_ix_fuzz_san -fsanitize=address,undefined -fno-sanitize-recover=all)
    target_compile_options(ix_core PRIVATE ${_ix_fuzz_san})
  endif()
  target_compile_options(ix_gguf PRIVATE -fsanitize=fuzzer-no-link ${_ix_fuzz_san})
  add_executable(fuzz_gguf ${CMAKE_CURRENT_LIST_DIR}/fuzz_gguf.c)
  target_include_directories(fuzz_gguf PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  target_compile_options(fuzz_gguf PRIVATE -fsanitize=fuzzer ${_ix_fuzz_san})
  target_link_options(fuzz_gguf PRIVATE -fsanitize=fuzzer ${_ix_fuzz_san})
  target_link_libraries(fuzz_gguf PRIVATE ix_gguf)
endif()
