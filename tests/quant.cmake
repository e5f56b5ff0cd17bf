# quant.cmake - tests of src/quant (f16/bf16, dequant/quant kernels), the GGUF
# writer and `tessera quantize`.

# C unit tests: conversions, error bounds, edge cases.
ts_add_c_test(test_quant ${CMAKE_CURRENT_SOURCE_DIR}/test_quant.c)

# Helper exposing the kernels to the Python oracle (not a test by itself).
add_executable(ts_quant_tool ${CMAKE_CURRENT_SOURCE_DIR}/quant_tool.c)
target_include_directories(ts_quant_tool PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_definitions(ts_quant_tool PRIVATE _GNU_SOURCE)
target_link_libraries(ts_quant_tool PRIVATE tessera_core)

# Oracle: our kernels vs gguf.quants (real models' tensors, generated blocks,
# quantization bytes).
add_test(NAME test_quant_oracle
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_quant_oracle.py
                 $<TARGET_FILE:ts_quant_tool> ${TS_MODELS_DIR} ${CMAKE_CURRENT_BINARY_DIR}/quant_oracle)

# GGUF writer: identity rewrite of both real models (byte-identical), synthetic
# round trip of every value type, error cases.
add_executable(test_gguf_write ${CMAKE_CURRENT_SOURCE_DIR}/test_gguf_write.c)
target_include_directories(test_gguf_write PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_definitions(test_gguf_write PRIVATE _GNU_SOURCE)
target_link_libraries(test_gguf_write PRIVATE tessera_core)
file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/gguf_write)
add_test(NAME test_gguf_write
         COMMAND test_gguf_write ${TS_MODELS_DIR} ${CMAKE_CURRENT_BINARY_DIR}/gguf_write)

# `tessera quantize` on SmolLM2 to Q8_0 and Q4_0, checked with gguf-py.
add_test(NAME test_quantize_cli
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_quantize_cli.py
                 $<TARGET_FILE:tessera> ${TS_MODELS_DIR} ${CMAKE_CURRENT_BINARY_DIR}/quantize_cli)
