# video.cmake - the video diffusion family (issue #18): the Wan2.1 DiT
# against diffusers.

# Helper exposing one DiT forward to the Python oracle (not a test by itself).
add_executable(wan_tool ${CMAKE_CURRENT_SOURCE_DIR}/wan_tool.c)
target_include_directories(wan_tool PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_definitions(wan_tool PRIVATE _GNU_SOURCE)
target_link_libraries(wan_tool PRIVATE tessera_core)

# Oracle: a tiny random diffusers WanTransformer3DModel written to GGUF with
# the original tensor names (tools/gen_wan_models.py), one forward against
# diffusers' at f32 and Q8_0. Skips (77) without diffusers.
add_test(NAME test_wan_oracle
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_wan_oracle.py
                 $<TARGET_FILE:wan_tool> ${CMAKE_CURRENT_BINARY_DIR}/wan_models)
set_tests_properties(test_wan_oracle PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)

# `tessera video` step for step against diffusers' WanPipeline (UniPC, and
# Euler with classifier-free guidance) and DCM's fixed timesteps; the CLI's
# refusals. Skips (77) without diffusers.
add_test(NAME test_wan_pipeline
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_wan_pipeline.py
                 $<TARGET_FILE:tessera> ${CMAKE_CURRENT_BINARY_DIR}/wan_pipeline)
set_tests_properties(test_wan_pipeline PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)

# The Wan VAE decoder against diffusers' AutoencoderKLWan (a tiny random
# Wan2.1-structured one from tools/gen_wan_vae.py). Skips (77) without diffusers.
add_executable(wan_vae_tool ${CMAKE_CURRENT_SOURCE_DIR}/wan_vae_tool.c)
target_include_directories(wan_vae_tool PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_definitions(wan_vae_tool PRIVATE _GNU_SOURCE)
target_link_libraries(wan_vae_tool PRIVATE tessera_core)
add_test(NAME test_wan_vae_oracle
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_wan_vae_oracle.py
                 $<TARGET_FILE:wan_vae_tool> ${CMAKE_CURRENT_BINARY_DIR}/wan_vae)
set_tests_properties(test_wan_vae_oracle PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
