# The two-engine stream pipeline (src/pipe, seed 002): the scheduler and
# the cut's arithmetic on a synthetic trajectory (test_pipe.c), and the
# video family through the CLI (test_pipe_video.py: every cut bit-identical
# to one engine's run where both engines compute alike, one weight copy,
# the refusals).
ts_add_c_test(test_pipe ${CMAKE_CURRENT_LIST_DIR}/test_pipe.c)
set_tests_properties(test_pipe PROPERTIES TIMEOUT 120)
add_test(NAME test_pipe_video
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_pipe_video.py $<TARGET_FILE:tessera>
                 ${CMAKE_CURRENT_BINARY_DIR}/pipe_video)
set_tests_properties(test_pipe_video PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
# The prompt stream (chunks x layers, ts_prompt_pipe): every cut through
# loop + cpu bit-identical to the CPU's prefill (a sample of cuts for cpu +
# loop); vnni + the amx int8 tiles (emulated: any machine) bit-identical to
# the amx engine's prefill; vnni (int8 activations) + cpu (exact) within
# NMSE 5e-2 of the CPU's (vnni alone, every layer in int8: 3.9e-2 on the
# worst of these prompts). Under the sanitizers: samples, no emulator.
add_executable(test_pipe_prompt ${CMAKE_CURRENT_LIST_DIR}/test_pipe_prompt.c)
target_include_directories(test_pipe_prompt PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(test_pipe_prompt PRIVATE tessera_core)
set(pp_model ${TS_MODELS_DIR}/SmolLM2-135M-Instruct.Q4_1.gguf)
if(TS_SANITIZE)
  set(pp_all quick)
else()
  set(pp_all "")
endif()
add_test(NAME pipe_prompt_loop_cpu COMMAND test_pipe_prompt ${pp_model} loop cpu none same ${pp_all})
add_test(NAME pipe_prompt_cpu_loop COMMAND test_pipe_prompt ${pp_model} cpu loop none same quick)
add_test(NAME pipe_prompt_vnni_cpu COMMAND test_pipe_prompt ${pp_model} vnni cpu none nmse 5e-2 quick)
set(pp_tests pipe_prompt_loop_cpu pipe_prompt_cpu_loop pipe_prompt_vnni_cpu)
if(NOT TS_SANITIZE)
  add_test(NAME pipe_prompt_vnni_amx COMMAND test_pipe_prompt ${pp_model} vnni amx,act=int8,emulate=1
                                             amx,act=int8,emulate=1 same quick one-copy)
  list(APPEND pp_tests pipe_prompt_vnni_amx)
endif()
# the AMX tiles themselves + vnni, on a machine with AMX (skips elsewhere)
add_test(NAME pipe_prompt_amx_vnni_hw COMMAND test_pipe_prompt ${pp_model} amx,act=int8 vnni amx,act=int8 same quick one-copy)
list(APPEND pp_tests pipe_prompt_amx_vnni_hw)
set_tests_properties(${pp_tests} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)

# A diffusion LLM's stream (steps x layers, the vanilla decoder on a thread
# per request): every cut's tokens = ts_context_diffuse's on one engine, on
# the tiny llada and dream models (the diffusion_device_models fixture).
set(pd_models ${CMAKE_CURRENT_BINARY_DIR}/diffusion_device_models)
set(pd_tests "")
foreach(pd_model llada dream)
  add_test(NAME pipe_diffuse_loop_cpu_${pd_model}
           COMMAND test_pipe_prompt ${pd_models}/${pd_model}.gguf loop cpu none diffuse)
  list(APPEND pd_tests pipe_diffuse_loop_cpu_${pd_model})
endforeach()
add_test(NAME pipe_diffuse_vnni_amx COMMAND test_pipe_prompt ${pd_models}/llada.gguf vnni amx,act=int8,emulate=1
                                            amx,act=int8,emulate=1 diffuse)
list(APPEND pd_tests pipe_diffuse_vnni_amx)
set_tests_properties(${pd_tests} PROPERTIES FIXTURES_REQUIRED dd_models SKIP_RETURN_CODE 77 TIMEOUT 300)
# The random tiny models' tokens hardly depend on their inputs (a layer run
# twice at the cut went unnoticed there); the trained dLLM's do (the same
# break: 481 of 980 decodes differ): its own copy, built from the committed
# delta (tools/train_tiny_dllm.py), and a sample of the cuts (a decode takes
# ~1 s on one core).
set(pd_trained ${CMAKE_CURRENT_BINARY_DIR}/pipe_dllm/smollm2-dllm.gguf)
add_test(NAME pipe_dllm_model
         COMMAND ${TS_PYTHON} ${CMAKE_SOURCE_DIR}/tools/train_tiny_dllm.py build -o ${pd_trained})
set_tests_properties(pipe_dllm_model PROPERTIES FIXTURES_SETUP pipe_dllm TIMEOUT 300)
if(NOT TS_SANITIZE) # 220 s there; the tiny models above run the same code under the sanitizers
  add_test(NAME pipe_diffuse_trained_loop_cpu COMMAND test_pipe_prompt ${pd_trained} loop cpu none diffuse quick)
  set_tests_properties(pipe_diffuse_trained_loop_cpu PROPERTIES FIXTURES_REQUIRED pipe_dllm TIMEOUT 600)
endif()
