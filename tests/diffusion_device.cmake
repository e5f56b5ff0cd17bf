# diffusion_device.cmake - diffusion window forwards on the prefill device:
# the attention node's window mode (ts_eng_enqueue_graph_window) against the
# CPU kernels, and ts_context_diffuse with prefill_device on the tiny llada
# and dream models (generated here by tools/gen_dllm_models.py).

# (without an argument it tests `loop`; `cpu` is the same code on the caller's thread)
ts_add_c_test(test_engine_window ${CMAKE_CURRENT_LIST_DIR}/test_engine_window.c)
add_test(NAME test_engine_window_cpu COMMAND test_engine_window cpu)
if(TS_OPENCL)
  add_test(NAME test_engine_window_opencl COMMAND test_engine_window opencl)
  set_tests_properties(test_engine_window_opencl PROPERTIES TIMEOUT 300)
endif()

# the tiny models, once per build (a fixture the tests below need), and a
# deeper llada whose streamed weights can show the nowait break
set(TS_DD_MODELS ${CMAKE_CURRENT_BINARY_DIR}/diffusion_device_models)
add_test(NAME diffusion_device_models
         COMMAND ${TS_PYTHON} ${CMAKE_SOURCE_DIR}/tools/gen_dllm_models.py ${TS_DD_MODELS} --models-dir ${TS_MODELS_DIR})
add_test(NAME diffusion_device_deep_model
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/gen_deep_dllm.py ${TS_DD_MODELS}/deep ${TS_MODELS_DIR})
set_tests_properties(diffusion_device_models diffusion_device_deep_model PROPERTIES FIXTURES_SETUP dd_models
                     TIMEOUT 120)

add_executable(test_diffusion_device ${CMAKE_CURRENT_LIST_DIR}/test_diffusion_device.c)
target_include_directories(test_diffusion_device PRIVATE ${CMAKE_SOURCE_DIR}/include)
target_link_libraries(test_diffusion_device PRIVATE tessera_core)
set(TS_DD_DEEP ${TS_DD_MODELS}/deep/llada_deep.gguf)
foreach(dd_model llada dream)
  add_test(NAME diffusion_device_gate_${dd_model} COMMAND test_diffusion_device gate ${TS_DD_MODELS}/${dd_model}.gguf)
  add_test(NAME diffusion_device_break_${dd_model} COMMAND test_diffusion_device break ${TS_DD_MODELS}/${dd_model}.gguf)
  # loop:npu requires widths (32/64 here): the windows, all narrower, run padded to 64
  add_test(NAME diffusion_device_gate_npu_${dd_model}
           COMMAND test_diffusion_device gate ${TS_DD_MODELS}/${dd_model}.gguf loop:npu)
  set_tests_properties(diffusion_device_gate_${dd_model} diffusion_device_break_${dd_model}
                       diffusion_device_gate_npu_${dd_model} PROPERTIES
                       FIXTURES_REQUIRED dd_models TIMEOUT 120)
  set_tests_properties(diffusion_device_break_${dd_model} PROPERTIES SKIP_RETURN_CODE 77) # no TS_TEST_HOOKS
  if(TS_OPENCL)
    # opencl on this machine's ICD (PoCL): the CPU's tokens (f32 weights, NMSE ~1e-13)
    add_test(NAME diffusion_device_opencl_${dd_model}
             COMMAND test_diffusion_device compare ${TS_DD_MODELS}/${dd_model}.gguf opencl)
    set_tests_properties(diffusion_device_opencl_${dd_model} PROPERTIES FIXTURES_REQUIRED dd_models TIMEOUT 300)
  endif()
endforeach()
# the deep model: streamed weights (12 MiB window, ~21 MiB of weights) are
# still bit-identical; with nowait=1 they must not be
add_test(NAME diffusion_device_gate_stream COMMAND test_diffusion_device gate ${TS_DD_DEEP} loop,window=12M)
# the same under the swap-optimized memory runtime (part resident, packed;
# the rest streamed through slots kept across forwards) and per-use staging
add_test(NAME diffusion_device_gate_somr COMMAND test_diffusion_device gate ${TS_DD_DEEP} loop,window=12M,place=somr)
add_test(NAME diffusion_device_gate_peruse
         COMMAND test_diffusion_device gate ${TS_DD_DEEP} loop,window=12M,place=peruse)
add_test(NAME diffusion_device_break_nowait
         COMMAND test_diffusion_device break ${TS_DD_DEEP} loop,nowait=1,window=12M)
set_tests_properties(diffusion_device_gate_stream diffusion_device_gate_somr diffusion_device_gate_peruse
                     diffusion_device_break_nowait PROPERTIES
                     FIXTURES_REQUIRED dd_models TIMEOUT 120)
set_tests_properties(diffusion_device_break_nowait PROPERTIES SKIP_RETURN_CODE 77) # no TS_TEST_HOOKS

# `tessera diffuse --prefill-device`: flags, JSON keys, text = the CPU's, fallback line
add_test(NAME diffusion_device_cli
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_diffusion_device_cli.py $<TARGET_FILE:tessera> ${TS_DD_MODELS})
set_tests_properties(diffusion_device_cli PROPERTIES FIXTURES_REQUIRED dd_models TIMEOUT 120)

# the window forward in two halves (submit, then wait) on a slow loop device:
# the host runs while the device computes, the logits are the CPU's bits
add_executable(test_window_async ${CMAKE_CURRENT_LIST_DIR}/test_window_async.c)
target_include_directories(test_window_async PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
target_compile_definitions(test_window_async PRIVATE _GNU_SOURCE)
target_link_libraries(test_window_async PRIVATE tessera_core)
add_test(NAME test_window_async COMMAND test_window_async ${TS_DD_MODELS}/llada.gguf)
set_tests_properties(test_window_async PROPERTIES FIXTURES_REQUIRED dd_models TIMEOUT 120)
