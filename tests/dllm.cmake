# dllm.cmake - diffusion LLMs (issue #6, models part): the non-causal
# attention mode of the kernels, and the llada / dream models' bidirectional
# window forward (ts_forward_window) against HF transformers.

# Kernels: non-causal attention (ts_attn_params.n_kv > 0), reference and fast
# at every CPU level, against a double-precision reference.
ts_add_c_test(test_attn_window ${CMAKE_CURRENT_SOURCE_DIR}/test_attn_window.c)

# Helper exposing ts_forward_window to the Python oracle (not a test by itself).
add_executable(dllm_tool ${CMAKE_CURRENT_SOURCE_DIR}/dllm_tool.c)
target_include_directories(dllm_tool PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_definitions(dllm_tool PRIVATE _GNU_SOURCE)
target_link_libraries(dllm_tool PRIVATE tessera_core)

# Oracle: tiny random llada / dream models (tools/gen_dllm_models.py),
# generated at test time into the build dir; ts_forward_window against HF
# transformers (Llama / Qwen2 with an all-visible 4-D attention mask).
add_test(NAME test_dllm_oracle
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_dllm_oracle.py
                 $<TARGET_FILE:dllm_tool> ${TS_MODELS_DIR} ${CMAKE_CURRENT_BINARY_DIR}/dllm_models)

# The trained diffusion LLM (tools/train_tiny_dllm.py: SmolLM2-135M adapted to
# the masked objective; the committed delta is merged into the base GGUF at
# test time when models/dllm/smollm2-dllm.gguf is missing or stale) against a
# PyTorch forward of the same f16 weights. Skips (77) without the delta.
add_test(NAME test_trained_dllm
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_trained_dllm.py
                 $<TARGET_FILE:dllm_tool> ${TS_MODELS_DIR} ${CMAKE_CURRENT_BINARY_DIR}/trained_dllm
                 $<TARGET_FILE:tessera>)
set_tests_properties(test_trained_dllm PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
