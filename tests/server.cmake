# server.cmake - tests of `tessera serve` (src/server, docs/SERVER.md): real
# HTTP on a loopback port chosen by the server (--port 0), SmolLM2-135M.
#   test_server       every endpoint streaming and not, bad input (4xx), cancel
#                     on disconnect, concurrent clients on --parallel 2, KV
#                     prefix reuse, API key (401), clean SIGTERM exit
#   test_server_openai  the openai client: logprobs, n > 1, /tokenize, JSON mode
#   test_server_tools   the openai client: tool calls (forced, streamed, Qwen2.5's prompt)
#   test_server_load  bench/serve_load.py for ~20 s: 4 clients, every answer
#                     checked against its prompt, VmRSS flat
#   test_server_ui    the chat page at / in headless Chromium (selenium);
#                     screenshot in tests/server_work/server_ui.png
#   test_server_diffusion  tiny llada / dream (tools/gen_dllm_models.py) served
#                     through ts_context_diffuse: replies equal `tessera diffuse`,
#                     decoder fields and their 400s, cancel; SmolLM2 rejects them
if(NOT TS_SERVER)
  return()
endif()
set(TS_SERVER_WORK ${CMAKE_CURRENT_BINARY_DIR}/server_work)
file(MAKE_DIRECTORY ${TS_SERVER_WORK})
add_test(NAME test_server COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_server.py $<TARGET_FILE:tessera>
                                  ${TS_MODELS_DIR} ${TS_SERVER_WORK})
# Under ASan freed memory sits in the allocator's quarantine (RSS grows
# without a leak): there the gate on leaks is LeakSanitizer at the server's
# exit (the test requires exit status 0), and the RSS slack is wider.
set(TS_SERVER_RSS_SLACK 8)
if(TS_SANITIZE)
  set(TS_SERVER_RSS_SLACK 96)
endif()
# the official openai client (tools/requirements.txt): logprobs against
# `tessera run --logits-out`, n > 1 with seeds, streaming by choice, /tokenize
# (100 samples per constrained-output case; 10 under the sanitizers, ~5x slower)
set(TS_SERVER_SAMPLES 100)
if(TS_SANITIZE)
  set(TS_SERVER_SAMPLES 10)
endif()
add_test(NAME test_server_openai COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_openai.py
                                         $<TARGET_FILE:tessera> ${TS_MODELS_DIR} ${TS_SERVER_WORK}
                                         --samples ${TS_SERVER_SAMPLES})
# tools: forced calls validate against their schema (50 at temperature 1;
# 10 under the sanitizers), streaming deltas, Qwen2.5's prompt against its
# own template (when the optional Qwen2.5-Coder-1.5B is in MODELS_DIR)
set(TS_TOOL_SAMPLES 50)
if(TS_SANITIZE)
  set(TS_TOOL_SAMPLES 10)
endif()
add_test(NAME test_server_tools COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_tools.py
                                        $<TARGET_FILE:tessera> ${TS_MODELS_DIR} ${TS_SERVER_WORK}
                                        --samples ${TS_TOOL_SAMPLES})
add_test(NAME test_server_load
         COMMAND ${TS_PYTHON} ${CMAKE_SOURCE_DIR}/bench/serve_load.py --tessera $<TARGET_FILE:tessera>
                 --model ${TS_MODELS_DIR}/SmolLM2-135M-Instruct.Q4_1.gguf --clients 4 --seconds 16 --parallel 2
                 --rss-slack-mib ${TS_SERVER_RSS_SLACK} --log ${TS_SERVER_WORK}/load.log)
add_test(NAME test_server_ui COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_ui.py
                                     $<TARGET_FILE:tessera> ${TS_MODELS_DIR} ${TS_SERVER_WORK})
add_test(NAME test_server_diffusion
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_diffusion.py $<TARGET_FILE:tessera>
                 ${CMAKE_SOURCE_DIR}/tools/gen_dllm_models.py ${TS_MODELS_DIR} ${TS_SERVER_WORK})
set_tests_properties(test_server test_server_load test_server_ui test_server_diffusion PROPERTIES TIMEOUT 300)
# the openai-client tests run 100 and 50 sampled replies (~80 s and ~40 s;
# under ASan with 10 each, 156 s and 78 s measured on an AMD EPYC)
set_tests_properties(test_server_openai test_server_tools PROPERTIES TIMEOUT 600)
