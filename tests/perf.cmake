# perf.cmake - tests of the performance layer: thread pool grain mode, the
# repacked panel GEMM and the matmul driver (tests/test_perf_kernels.c).
ts_add_c_test(test_perf_kernels ${CMAKE_CURRENT_SOURCE_DIR}/test_perf_kernels.c)

# The fast path on a real model: one resident copy after repacking, in-place
# = separate buffer, decode = prefill, closeness to TS_KERNELS=ref.
add_executable(test_perf_model ${CMAKE_CURRENT_SOURCE_DIR}/test_perf_model.c)
target_include_directories(test_perf_model PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
target_compile_definitions(test_perf_model PRIVATE _GNU_SOURCE)
target_link_libraries(test_perf_model PRIVATE tessera_core m)
add_test(NAME test_perf_model COMMAND test_perf_model ${TS_MODELS_DIR})
