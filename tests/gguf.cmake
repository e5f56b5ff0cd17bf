# gguf.cmake - tests of the GGUF reader (src/gguf) and `tessera inspect`.

# Malformed files (one per failure kind) and a valid every-type file, built in memory.
ts_add_c_test(test_gguf_malformed ${CMAKE_CURRENT_SOURCE_DIR}/test_gguf_malformed.c)

# `tessera inspect --json` vs gguf.GGUFReader on a GGUFWriter file and on both real models.
add_test(NAME test_gguf_oracle
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_gguf_oracle.py $<TARGET_FILE:tessera> ${TS_MODELS_DIR})

# Fuzzing (TS_FUZZ=ON, clang): libFuzzer on ts_gguf_open_mem. The top-level
# CMakeLists turns TS_SANITIZE on with TS_FUZZ, so the library has ASan+UBSan;
# here it also gets coverage instrumentation so the fuzzer sees the parser.
if(TS_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TS_FUZZ=ON needs clang (libFuzzer): configure with CC=clang")
  endif()
  target_compile_options(tessera_core PRIVATE -fsanitize=fuzzer-no-link)

  add_executable(fuzz_gguf ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_gguf.c)
  target_include_directories(fuzz_gguf PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_compile_definitions(fuzz_gguf PRIVATE _GNU_SOURCE)
  target_compile_options(fuzz_gguf PRIVATE -fsanitize=fuzzer)
  target_link_options(fuzz_gguf PRIVATE -fsanitize=fuzzer)
  target_link_libraries(fuzz_gguf PRIVATE tessera_core)

  # Seed corpus generated at build time by the malformed-file test's builder.
  set(TS_GGUF_SEEDS ${CMAKE_CURRENT_BINARY_DIR}/fuzz_gguf_seeds)
  add_custom_command(OUTPUT ${TS_GGUF_SEEDS}/valid_full.gguf
                     COMMAND test_gguf_malformed --write-seeds ${TS_GGUF_SEEDS}
                     DEPENDS test_gguf_malformed
                     COMMENT "Writing the fuzz_gguf seed corpus")
  add_custom_target(fuzz_gguf_seeds ALL DEPENDS ${TS_GGUF_SEEDS}/valid_full.gguf)
  add_dependencies(fuzz_gguf fuzz_gguf_seeds)

  # New inputs go to a work corpus (the seeds stay as generated); crashes land in fuzz_gguf_artifacts/.
  set(TS_GGUF_CORPUS ${CMAKE_CURRENT_BINARY_DIR}/fuzz_gguf_corpus)
  set(TS_GGUF_ARTIFACTS ${CMAKE_CURRENT_BINARY_DIR}/fuzz_gguf_artifacts)
  file(MAKE_DIRECTORY ${TS_GGUF_CORPUS} ${TS_GGUF_ARTIFACTS})
  add_test(NAME fuzz_gguf
           COMMAND fuzz_gguf -max_total_time=60 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
                   -dict=${CMAKE_CURRENT_SOURCE_DIR}/fuzz_gguf.dict -artifact_prefix=${TS_GGUF_ARTIFACTS}/
                   ${TS_GGUF_CORPUS} ${TS_GGUF_SEEDS})
  set_tests_properties(fuzz_gguf PROPERTIES TIMEOUT 180)
endif()
