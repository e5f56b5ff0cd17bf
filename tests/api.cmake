# api.cmake - tests of the public C API (include/tessera.h, src/api) and of
# its packaging: the shared library's exports, the CLI as a client of the API
# only, install + pkg-config + examples/simple.c.

# The API as an application uses it: tessera.h only, linked against libtessera.so.
add_executable(test_api ${CMAKE_CURRENT_SOURCE_DIR}/test_api.c)
target_include_directories(test_api PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}) # check.h; no src/
target_compile_definitions(test_api PRIVATE _GNU_SOURCE)
target_link_libraries(test_api PRIVATE tessera_shared Threads::Threads)
file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/api_work)
add_test(NAME test_api COMMAND test_api ${TS_MODELS_DIR} ${CMAKE_CURRENT_BINARY_DIR}/api_work)
set_tests_properties(test_api PROPERTIES TIMEOUT 600)

# libtessera.so exports exactly the TS_API functions of tessera.h (nm -D --defined-only).
add_test(NAME test_api_exports
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_api_packaging.py exports
                 $<TARGET_FILE:tessera_shared> ${CMAKE_SOURCE_DIR}/include/tessera.h)

# src/cli includes nothing from src/ (the CLI target also has no src/ include
# path, and tessera-shared-check links the CLI against the shared library).
add_test(NAME test_api_cli_includes
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_api_packaging.py cli_includes
                 ${CMAKE_SOURCE_DIR}/src/cli)
add_test(NAME test_api_cli_shared COMMAND tessera-shared-check inspect --no-tensors
                                          ${TS_MODELS_DIR}/SmolLM2-135M-Instruct.Q4_1.gguf)
set_tests_properties(test_api_cli_shared PROPERTIES PASS_REGULAR_EXPRESSION "general.architecture +STRING += \"llama\"")

# cmake --install into a temporary prefix, then build and run examples/simple.c
# with pkg-config (sanitizer builds need the sanitizer runtime in the example).
set(TS_API_EXAMPLE_FLAGS "")
if(TS_SANITIZE)
  set(TS_API_EXAMPLE_FLAGS -fsanitize=address,undefined)
endif()
add_test(NAME test_api_install
         COMMAND ${TS_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_api_packaging.py install ${CMAKE_BINARY_DIR}
                 ${CMAKE_SOURCE_DIR} ${TS_MODELS_DIR} ${CMAKE_C_COMPILER} ${TS_API_EXAMPLE_FLAGS})
set_tests_properties(test_api_install PROPERTIES TIMEOUT 300)
