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
