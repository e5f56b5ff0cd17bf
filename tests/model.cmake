# model.cmake - tests of the model loader and forward pass (src/model,
# src/kernels/ref, src/core/threadpool).

# Unit tests of the reference kernels and the thread pool.
ts_add_c_test(test_model_ops ${CMAKE_CURRENT_SOURCE_DIR}/test_model_ops.c)

# Helper exposing the forward pass to the Python tests (not a test by itself).
add_executable(ts_model_tool ${CMAKE_CURRENT_SOURCE_DIR}/model_tool.c)
target_include_directories(ts_model_tool PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_definitions(ts_model_tool PRIVATE _GNU_SOURCE)
target_link_libraries(ts_model_tool PRIVATE tessera_core)

# Oracle: tiny random models of every architecture variant, generated at test
# time into the build dir, run through tessera and HF transformers (float32).
add_test(NAME test_tiny_oracle
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_tiny_oracle.py
                 $<TARGET_FILE:ts_model_tool> ${TS_MODELS_DIR} ${CMAKE_CURRENT_BINARY_DIR}/tiny_models)

# Load errors: broken tiny files must be refused with a message naming the field.
add_test(NAME test_model_load_errors
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_model_load_errors.py
                 $<TARGET_FILE:ts_model_tool> ${TS_MODELS_DIR} ${CMAKE_CURRENT_BINARY_DIR}/broken_models)

# Real models: greedy continuations and prompt top-1 ids pinned from runs that
# matched the transformers oracle (tools/oracle_real.py, docs/FIDELITY.md).
add_test(NAME test_real_pinned
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_real_pinned.py
                 $<TARGET_FILE:ts_model_tool> ${TS_MODELS_DIR})

# The heavy oracle on the real models (not in CTest): `ninja oracle`.
add_custom_target(oracle
                  COMMAND ${TS_PYTHON} ${CMAKE_SOURCE_DIR}/tools/oracle_real.py
                          $<TARGET_FILE:ts_model_tool> ${TS_MODELS_DIR} ${CMAKE_SOURCE_DIR}/docs/FIDELITY.md
                  DEPENDS ts_model_tool
                  USES_TERMINAL
                  COMMENT "Comparing tessera with HF transformers on the real models")

# A memory budget (tests/test_stream.c; docs/MOE.md "Memory budget"): the
# layers beyond it stream from the file through two slots; bit-identical to
# the model in memory (several budgets, a slowed loader, the page cache, two
# contexts); a skipped fill refused at the pacing point; an EIO, a short
# read and a truncated file fail the request and the next one is served.
add_executable(test_stream ${CMAKE_CURRENT_SOURCE_DIR}/test_stream.c)
target_include_directories(test_stream PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_compile_definitions(test_stream PRIVATE _GNU_SOURCE)
target_link_libraries(test_stream PRIVATE tessera_core)
# gate: the budgets with prefill on loop; stream_dev_*: prefill on every
# other device kind (amx through its emulator and, where the CPU has AMX, the
# real unit; loop:npu and opencl convert or pack each streamed layer as they
# upload it), a test each so each fits its limit under ASan (the emulated amx
# alone took 205 s there with the others); opencl, whose engine tests do not
# run under the sanitizers, left out there. A device the model in memory does
# not prefill on either is reported as skipped.
set(st_args_gate loop)
foreach(st_mode gate break-skip faults)
  add_test(NAME stream_${st_mode}_SmolLM2 COMMAND test_stream ${st_mode} ${TS_MODELS_DIR}/SmolLM2-135M-Instruct.Q4_1.gguf ${st_args_${st_mode}})
  set_tests_properties(stream_${st_mode}_SmolLM2 PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
set(st_devs "amx_emu=amx,emulate=1" "amx_hw=amx,min_width=32" "loop_npu=loop:npu")
if(NOT TS_SANITIZE)
  list(APPEND st_devs "opencl=opencl")
endif()
foreach(st_dev ${st_devs})
  string(REGEX REPLACE "=.*" "" st_name "${st_dev}")
  string(REGEX REPLACE "^[^=]*=" "" st_spec "${st_dev}")
  add_test(NAME stream_dev_${st_name}_SmolLM2
           COMMAND test_stream devices ${TS_MODELS_DIR}/SmolLM2-135M-Instruct.Q4_1.gguf ${st_spec})
  set_tests_properties(stream_dev_${st_name}_SmolLM2 PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
# the MoE families (expert arrays read one expert per read), on the tiny
# generated models of the oracle, with 7 layers (more than the slots); and
# qwen3moe with Q8_0 experts (repacked into panels at load, and as they
# stream in: ts_moe_linear)
add_test(NAME stream_gate_moe
         COMMAND sh -c "${TS_PYTHON} ${CMAKE_SOURCE_DIR}/tools/gen_tiny_models.py --models-dir ${TS_MODELS_DIR} --only qwen3moe,mixtral --n-layer 7 ${CMAKE_CURRENT_BINARY_DIR}/stream_models >/dev/null && $<TARGET_FILE:test_stream> gate ${CMAKE_CURRENT_BINARY_DIR}/stream_models/qwen3moe.gguf loop amx,emulate=1 && $<TARGET_FILE:test_stream> gate ${CMAKE_CURRENT_BINARY_DIR}/stream_models/mixtral.gguf loop amx,emulate=1 && ${TS_PYTHON} ${CMAKE_SOURCE_DIR}/tools/gen_tiny_models.py --models-dir ${TS_MODELS_DIR} --only qwen3moe --n-layer 7 --quant-experts ${CMAKE_CURRENT_BINARY_DIR}/stream_models_q8 >/dev/null && $<TARGET_FILE:test_stream> gate ${CMAKE_CURRENT_BINARY_DIR}/stream_models_q8/qwen3moe.gguf loop amx,emulate=1")
set_tests_properties(stream_gate_moe PROPERTIES TIMEOUT 300 FIXTURES_SETUP stream_moe)
add_test(NAME stream_break-demand_moe
         COMMAND test_stream break-demand ${CMAKE_CURRENT_BINARY_DIR}/stream_models/qwen3moe.gguf)
set_tests_properties(stream_break-demand_moe PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 FIXTURES_REQUIRED stream_moe)
# perplexity: the same under the budget (routed and whole layers), changed
# by skip_demand=1 (micro-batches of 2: a batch routes to a subset)
add_test(NAME stream_ppl_moe
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_stream_ppl.py $<TARGET_FILE:tessera>
                 ${CMAKE_CURRENT_BINARY_DIR}/stream_models_q8/qwen3moe.gguf)
set_tests_properties(stream_ppl_moe PROPERTIES TIMEOUT 300 FIXTURES_REQUIRED stream_moe)
