# video_umt5.cmake - the umT5 text encoder of the Wan2.1 pipeline
# (src/video/umt5.c) against transformers, and its attention op.

# The relative-position attention: the scalar reference against a double
# formula, and the engine op (cpu, loop) against the reference, masks included.
ts_add_c_test(test_relattn ${CMAKE_CURRENT_SOURCE_DIR}/test_relattn.c)

# Helper exposing the encoder to the Python oracle (not a test by itself).
add_executable(umt5_tool ${CMAKE_CURRENT_SOURCE_DIR}/umt5_tool.c)
target_include_directories(umt5_tool PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_definitions(umt5_tool PRIVATE _GNU_SOURCE)
target_link_libraries(umt5_tool PRIVATE tessera_core)

# Oracle: a tiny random transformers UMT5EncoderModel written to GGUF with
# llama.cpp's names (tools/gen_umt5.py), encoded unmasked, masked and as the
# Wan pipeline pads it, at f32 and Q8_0; the buckets; broken files. Skips
# (77) without torch or transformers.
add_test(NAME test_umt5_oracle
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_umt5_oracle.py
                 $<TARGET_FILE:umt5_tool> ${CMAKE_CURRENT_BINARY_DIR}/umt5_models)
set_tests_properties(test_umt5_oracle PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)

# Tokenizer oracle: the SentencePiece unigram tokenizer ("t5", src/text/ugm.c)
# of the same tiny vocabulary (trained by sentencepiece, nmt_nfkc charsmap)
# against HF tokenizers as transformers' T5Tokenizer builds it; broken
# charsmaps. Skips (77) without transformers, tokenizers or sentencepiece.
add_test(NAME test_umt5_tokenizer
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_umt5_tokenizer.py
                 $<TARGET_FILE:umt5_tool> ${CMAKE_CURRENT_BINARY_DIR}/umt5_tok
                 ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_corpus.json)
set_tests_properties(test_umt5_tokenizer PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
