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
