# tokenizer.cmake - tests of src/text/tokenizer* and `tessera tokenize`.

# C unit tests: streaming detok, invalid UTF-8, specials, threads, long words,
# load errors on synthetic files (needs the real models for most checks).
ts_add_c_test(test_tokenizer ${CMAKE_CURRENT_SOURCE_DIR}/test_tokenizer.c)
target_compile_definitions(test_tokenizer PRIVATE TS_MODELS_DIR="${TS_MODELS_DIR}")

# Helper for the oracle: tokenizes a whole corpus in one process.
add_executable(tok_corpus_dump ${CMAKE_CURRENT_SOURCE_DIR}/tok_corpus_dump.c)
target_include_directories(tok_corpus_dump PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_definitions(tok_corpus_dump PRIVATE _GNU_SOURCE)
target_link_libraries(tok_corpus_dump PRIVATE tessera_core)

# Oracle: ids and decoding vs HF tokenizers built by transformers from the same
# GGUF files, over tests/tokenizer_corpus.json (HF tokenizers cached in the build dir).
add_test(NAME test_tokenizer_oracle
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_tokenizer_oracle.py
                 $<TARGET_FILE:tok_corpus_dump> $<TARGET_FILE:tessera> ${TS_MODELS_DIR}
                 ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_corpus.json ${CMAKE_CURRENT_BINARY_DIR}/tokenizer_oracle_cache)
set_tests_properties(test_tokenizer_oracle PROPERTIES TIMEOUT 300)
