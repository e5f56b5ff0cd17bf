# Generation front end: sampler, chat templates, and the run/chat/perplexity CLI.
ts_add_c_test(test_sampler ${CMAKE_CURRENT_SOURCE_DIR}/test_sampler.c)
ts_add_c_test(test_chat ${CMAKE_CURRENT_SOURCE_DIR}/test_chat.c)

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
