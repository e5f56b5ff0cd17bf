# Generation front end: sampler, chat templates, and the run/chat/perplexity CLI.
ts_add_c_test(test_sampler ${CMAKE_CURRENT_SOURCE_DIR}/test_sampler.c)
ts_add_c_test(test_chat ${CMAKE_CURRENT_SOURCE_DIR}/test_chat.c)
ts_add_c_test(test_grammar ${CMAKE_CURRENT_SOURCE_DIR}/test_grammar.c)

add_executable(chat_render_tool ${CMAKE_CURRENT_SOURCE_DIR}/chat_render_tool.c)
target_include_directories(chat_render_tool PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_definitions(chat_render_tool PRIVATE _GNU_SOURCE)
target_link_libraries(chat_render_tool PRIVATE tessera_core)
add_test(NAME test_chat_template_oracle
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_chat_template_oracle.py
                 $<TARGET_FILE:chat_render_tool> ${TS_MODELS_DIR})

# CLI smoke tests on the real models (each a separate entry; all small).
foreach(case smollm_paris gemma_paris stats_length seed_repeatable logits_out chat_two_turns
             chat_reset_and_gemma perplexity mem_budget errors help)
  add_test(NAME gen_cli_${case}
           COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_gen_cli.py ${case}
                   $<TARGET_FILE:tessera> ${TS_MODELS_DIR})
  set_tests_properties(gen_cli_${case} PROPERTIES TIMEOUT 300)
endforeach()

# KL divergence in llama-perplexity's file format (docs/FIDELITY.md "Two
# modes"): the exact mode reads back as itself, --act q8 differs from it
# within a bound, bad files are refused; and, where tools/build_llamacpp.sh
# has built llama-perplexity, each tool reads the other's file (else skipped).
foreach(case self errors llamacpp)
  add_test(NAME kld_${case}_SmolLM2
           COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_kld_cli.py $<TARGET_FILE:tessera>
                   ${TS_MODELS_DIR}/SmolLM2-135M-Instruct.Q4_1.gguf ${CMAKE_CURRENT_BINARY_DIR}/kld_${case} ${case}
                   ${TS_MODELS_DIR}/gemma-3-270m-q4_k_m.gguf)
  set_tests_properties(kld_${case}_SmolLM2 PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
