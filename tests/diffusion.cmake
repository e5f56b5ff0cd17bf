# diffusion.cmake - tests of the diffusion decoders (src/diffusion,
# ts_context_diffuse, `tessera diffuse`).

# Commit logic over the scripted denoiser; malloc is wrapped to count the
# allocations of a call (none may happen per step).
ts_add_c_test(test_diffusion ${CMAKE_CURRENT_SOURCE_DIR}/test_diffusion.c)
target_link_options(test_diffusion PRIVATE -Wl,--wrap=malloc)

# Helper: window-forward server for the numpy references, the library's
# decoder on a real model, and the scripted forward-count predictions.
add_executable(diffusion_tool ${CMAKE_CURRENT_SOURCE_DIR}/diffusion_tool.c)
target_include_directories(diffusion_tool PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_definitions(diffusion_tool PRIVATE _GNU_SOURCE)
target_link_libraries(diffusion_tool PRIVATE tessera_core)

# The decoders against numpy references (LLaDA's generate(); block-wise
# threshold decoding with no / prefix / dual cache) on the tiny random llada
# and dream models, token for token; prints how often the cached decoders
# agree with --no-cache and how their logits differ.
add_test(NAME test_diffusion_ref
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/diffusion_ref.py $<TARGET_FILE:diffusion_tool>
                 ${CMAKE_SOURCE_DIR}/tools/gen_dllm_models.py ${TS_MODELS_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/diffusion_models)
set_tests_properties(test_diffusion_ref PROPERTIES TIMEOUT 300)

# `tessera diffuse` (and ts_context_diffuse under it) = the library decoder.
add_test(NAME test_diffusion_cli
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_diffusion_cli.py $<TARGET_FILE:tessera>
                 $<TARGET_FILE:tessera-shared-check> $<TARGET_FILE:diffusion_tool>
                 ${CMAKE_SOURCE_DIR}/tools/gen_dllm_models.py ${TS_MODELS_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/diffusion_cli_models)
set_tests_properties(test_diffusion_cli PROPERTIES TIMEOUT 300)

# Issue #6's proof: the vanilla decoder and the block decoder with --no-cache
# (f32 KV cache) = the numpy references of diffusion_ref.py over the logits
# of HF transformers (Llama / Qwen2, all-visible mask), token for token, on
# the tiny llada and dream models; a differing token passes only as a true
# near-tie (both sides' confidence margin < 1e-4 relative).
add_test(NAME test_diffusion_hf
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_diffusion_hf.py $<TARGET_FILE:diffusion_tool>
                 ${CMAKE_SOURCE_DIR}/tools/gen_dllm_models.py ${TS_MODELS_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/diffusion_hf_models)
set_tests_properties(test_diffusion_hf PROPERTIES TIMEOUT 300)
