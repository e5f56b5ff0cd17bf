# engine.cmake - tests of the engine layer (src/engine/): registry, loop
# and cpu engines bit-identical to the CPU kernels op by op and over a toy
# model's prefill, ordering (with the broken nowait hook), window, probe;
# with TS_OPENCL, the OpenCL engine on whatever ICD the machine has (PoCL
# here) against the CPU reference with stated NMSE bounds, and clean
# failures without an ICD or without the loader.
ts_add_c_test(test_engine ${CMAKE_CURRENT_LIST_DIR}/test_engine.c)
# The same bit-identity with the CPU's low-precision (8-bit activation)
# matmul path and with the scalar kernels: the loop device must follow
# whatever the CPU runs.
add_test(NAME test_engine_act_q8 COMMAND test_engine)
set_tests_properties(test_engine_act_q8 PROPERTIES ENVIRONMENT "TS_ACT=q8")
add_test(NAME test_engine_scalar COMMAND test_engine)
set_tests_properties(test_engine_scalar PROPERTIES ENVIRONMENT "TS_CPU_LEVEL=scalar")

if(TS_OPENCL)
  ts_add_c_test(test_engine_opencl ${CMAKE_CURRENT_LIST_DIR}/test_engine_opencl.c)
  # PoCL compiles kernels on first use and caches them (POCL_KERNEL_CACHE,
  # on by default, under $HOME/.cache/pocl): later runs are fast.
  set_tests_properties(test_engine_opencl PROPERTIES TIMEOUT 300)
  # No ICD: the loader finds no vendor in an empty directory.
  file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/engine_empty_icd_dir)
  add_test(NAME test_engine_opencl_no_icd COMMAND test_engine_opencl --expect-unavailable "no OpenCL platform")
  set_tests_properties(test_engine_opencl_no_icd PROPERTIES
                       ENVIRONMENT "OCL_ICD_VENDORS=${CMAKE_BINARY_DIR}/engine_empty_icd_dir")
  # No loader at all.
  add_test(NAME test_engine_opencl_no_loader COMMAND test_engine_opencl --expect-unavailable "cannot load")
  set_tests_properties(test_engine_opencl_no_loader PROPERTIES
                       ENVIRONMENT "TS_OPENCL_LIB=${CMAKE_BINARY_DIR}/engine_empty_icd_dir/libOpenCL-missing.so")
else()
  add_test(NAME test_engine_opencl_off COMMAND test_engine --expect-opencl-off)
endif()

# Prefill on a device, decode on the CPU, through the public API on the two
# real models (tests/test_prefill_device.c): Gate 1 (loop, resident and
# streamed weights, bit-identical to the CPU), Gate 2 (loop:npu in a 16 MiB
# window against the CPU computing with the same converted weights), and
# the two broken-on-purpose orderings that must be noticed.
# (built like ts_add_c_test's programs, but it needs a mode: the entries below)
add_executable(test_prefill_device ${CMAKE_CURRENT_LIST_DIR}/test_prefill_device.c)
target_include_directories(test_prefill_device PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
target_compile_definitions(test_prefill_device PRIVATE _GNU_SOURCE)
target_link_libraries(test_prefill_device PRIVATE tessera_core)
foreach(pf_model SmolLM2-135M-Instruct.Q4_1 gemma-3-270m-q4_k_m)
  string(REGEX REPLACE "[-.].*" "" pf_short ${pf_model})
  foreach(pf_mode gate1 gate2)
    add_test(NAME prefill_${pf_mode}_${pf_short} COMMAND test_prefill_device ${pf_mode} ${TS_MODELS_DIR}/${pf_model}.gguf)
    set_tests_properties(prefill_${pf_mode}_${pf_short} PROPERTIES TIMEOUT 300)
  endforeach()
endforeach()
foreach(pf_mode break-upload break-drain)
  add_test(NAME prefill_${pf_mode}_SmolLM2 COMMAND test_prefill_device ${pf_mode}
           ${TS_MODELS_DIR}/SmolLM2-135M-Instruct.Q4_1.gguf)
  # 77: skipped in a build without TS_TEST_HOOKS (the breaks are not there)
  set_tests_properties(prefill_${pf_mode}_SmolLM2 PROPERTIES SKIP_RETURN_CODE 77)
endforeach()
# Out-of-order prefill (sched=ooo, seed 003): several chunks in flight give
# the in-order bits on loop, loop:npu and amx (emulated without AMX), on
# both models; ooo_nowait=1 (a chunk's attention not waiting for the
# previous chunk's K/V rows) must change them.
foreach(pf_model SmolLM2-135M-Instruct.Q4_1 gemma-3-270m-q4_k_m)
  string(REGEX REPLACE "[-.].*" "" pf_short ${pf_model})
  add_test(NAME prefill_gate_ooo_${pf_short} COMMAND test_prefill_device gate-ooo ${TS_MODELS_DIR}/${pf_model}.gguf)
  set_tests_properties(prefill_gate_ooo_${pf_short} PROPERTIES TIMEOUT 600)
  add_test(NAME prefill_break_ooo_${pf_short} COMMAND test_prefill_device break-ooo ${TS_MODELS_DIR}/${pf_model}.gguf)
  set_tests_properties(prefill_break_ooo_${pf_short} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
endforeach()
# The same gates on the amx engine (src/engine/amx) through its tile
# emulator, and on the real unit where the machine has AMX (the test says
# which it ran): act=exact against the CPU, act=q8 against the CPU's own
# 8-bit activations (TS_ACT=q8), and the two breaks. Under the sanitizers
# only act=exact on SmolLM2, resident on the emulator (the emulator is slow
# under ASan: ~2.5 min for both cases; the other cases run the same engine
# code, and the runtime's break tests run on loop).
foreach(pf_model SmolLM2-135M-Instruct.Q4_1 gemma-3-270m-q4_k_m)
  string(REGEX REPLACE "[-.].*" "" pf_short ${pf_model})
  if(TS_SANITIZE AND NOT pf_short STREQUAL "SmolLM2")
    continue()
  endif()
  add_test(NAME prefill_gate1_amx_${pf_short} COMMAND test_prefill_device gate1-amx ${TS_MODELS_DIR}/${pf_model}.gguf)
  set_tests_properties(prefill_gate1_amx_${pf_short} PROPERTIES TIMEOUT 600)
  if(TS_SANITIZE)
    # resident only on the emulator there (streamed: the plain build's run)
    set_tests_properties(prefill_gate1_amx_${pf_short} PROPERTIES ENVIRONMENT "TS_GATE_QUICK=1")
  else()
    add_test(NAME prefill_gate1_amx_q8_${pf_short}
             COMMAND test_prefill_device gate1-amx-q8 ${TS_MODELS_DIR}/${pf_model}.gguf)
    set_tests_properties(prefill_gate1_amx_q8_${pf_short} PROPERTIES TIMEOUT 600 ENVIRONMENT "TS_ACT=q8")
    if(pf_short STREQUAL "gemma") # K-quant calls at arbitrary per-32 scales too (lo256 off)
      add_test(NAME prefill_gate1_amx_q8k32_${pf_short}
               COMMAND test_prefill_device gate1-amx-q8 ${TS_MODELS_DIR}/${pf_model}.gguf)
      set_tests_properties(prefill_gate1_amx_q8k32_${pf_short} PROPERTIES TIMEOUT 600
                           ENVIRONMENT "TS_ACT=q8;TS_ACT_K256=0")
    endif()
  endif()
endforeach()
set(pf_amx_breaks)
if(NOT TS_SANITIZE)
  set(pf_amx_breaks break-drain-amx break-upload-amx)
endif()
foreach(pf_mode ${pf_amx_breaks})
  add_test(NAME prefill_${pf_mode}_SmolLM2 COMMAND test_prefill_device ${pf_mode}
           ${TS_MODELS_DIR}/SmolLM2-135M-Instruct.Q4_1.gguf)
  set_tests_properties(prefill_${pf_mode}_SmolLM2 PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
endforeach()
# Calibrated per-tensor INT8 with shadow outliers on the CPU (seed 003;
# tests/test_calib.c): calibrate on GPL-2 through ts_calib_*, evaluate on
# GPL-3 on the amx tile emulator against the exact CPU, the emptied profile
# and prune=1 bit-identities, and the refusals (gemma 3: another model).
# TS_CALIB_BREAK=1 shows the gate failing. Under the sanitizers too: the
# sidecar reader parses an untrusted file.
if(TRUE)
  add_executable(test_calib ${CMAKE_CURRENT_LIST_DIR}/test_calib.c)
  target_include_directories(test_calib PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
  target_compile_definitions(test_calib PRIVATE _GNU_SOURCE)
  target_link_libraries(test_calib PRIVATE tessera_core)
  add_test(NAME test_calib COMMAND test_calib ${TS_MODELS_DIR}/SmolLM2-135M-Instruct.Q4_1.gguf
           /usr/share/common-licenses/GPL-2 /usr/share/common-licenses/GPL-3
           ${TS_MODELS_DIR}/gemma-3-270m-q4_k_m.gguf)
  set_tests_properties(test_calib PROPERTIES TIMEOUT 600)
endif()
# The CLI side (tests/test_prefill_cli.py): flags and --stats json keys on
# run/chat/perplexity/bench, the one fallback line (unknown device; OpenCL
# without an ICD), and OpenCL on PoCL against the CPU (perplexity, greedy).
foreach(pf_case fallback_nosuch fallback_no_icd commands_loop auto_min calibrate)
  add_test(NAME prefill_cli_${pf_case}
           COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_prefill_cli.py ${pf_case} $<TARGET_FILE:tessera>
                   ${TS_MODELS_DIR})
endforeach()
# the vnni engine against amx,act=int8 bit for bit (77: no AVX-512 VNNI)
add_test(NAME prefill_cli_vnni
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_prefill_cli.py vnni $<TARGET_FILE:tessera> ${TS_MODELS_DIR})
set_tests_properties(prefill_cli_vnni PROPERTIES SKIP_RETURN_CODE 77)
# Not under the sanitizers: these are numeric comparisons (minutes under ASan
# with PoCL); the OpenCL engine's own code runs under ASan in
# test_engine_opencl, test_engine_window_opencl and diffusion_device_opencl_*.
if(TS_OPENCL AND NOT TS_SANITIZE)
  foreach(pf_case opencl_smollm opencl_gemma)
    add_test(NAME prefill_cli_${pf_case}
             COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_prefill_cli.py ${pf_case} $<TARGET_FILE:tessera>
                     ${TS_MODELS_DIR})
    # PoCL runs on this machine's CPU with the untiled f32 kernels: slow
    set_tests_properties(prefill_cli_${pf_case} PROPERTIES TIMEOUT 400)
  endforeach()
endif()
# Gate 1 under the CPU's other kernel paths: the device must follow them.
# (Numeric variants, not under the sanitizers, where the same code paths run
# in test_engine_act_q8 / test_engine_scalar and the scalar gate alone takes
# four minutes.)
if(NOT TS_SANITIZE)
  add_test(NAME prefill_gate1_SmolLM2_act_q8 COMMAND test_prefill_device gate1
         ${TS_MODELS_DIR}/SmolLM2-135M-Instruct.Q4_1.gguf)
set_tests_properties(prefill_gate1_SmolLM2_act_q8 PROPERTIES ENVIRONMENT "TS_ACT=q8")
add_test(NAME prefill_gate1_SmolLM2_scalar COMMAND test_prefill_device gate1
         ${TS_MODELS_DIR}/SmolLM2-135M-Instruct.Q4_1.gguf)
set_tests_properties(prefill_gate1_SmolLM2_scalar PROPERTIES ENVIRONMENT "TS_CPU_LEVEL=scalar")
endif()

# The graph ops of the coming families (MoE, diffusion transformers) on cpu
# and loop: bit-identical to kernels/block_ops.h called directly, and the
# expert-array binding checks (tests/test_graph_ops.c).
ts_add_c_test(test_graph_ops ${CMAKE_CURRENT_LIST_DIR}/test_graph_ops.c)

# A MoE block (runtime/block.c's TS_BLOCK_MOE, expert arrays in the layer's
# weight table) on the CPU, loop and loop:npu against the reference
# composition of kernels/block_ops.h (tests/test_block_moe.c).
ts_add_c_test(test_block_moe ${CMAKE_CURRENT_LIST_DIR}/test_block_moe.c)

# The row ranges of a KV cache a device holds (runtime/kvrange.h) against a
# bitmap (tests/test_kvrange.c).
ts_add_c_test(test_kvrange ${CMAKE_CURRENT_LIST_DIR}/test_kvrange.c)
