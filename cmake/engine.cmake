# engine.cmake - build options of the engine layer (src/engine/). Included
# once by the top CMakeLists.txt, after TS_LIB_SOURCES is globbed and before
# the library target is made.
#
# TS_OPENCL (default ON when the OpenCL headers are found): builds the
# OpenCL engine (src/engine/opencl/opencl_*.c). It needs only the headers at
# build time: libOpenCL (the ICD loader) is opened at run time, so a binary
# built with it still starts, and falls back cleanly, on a machine without
# OpenCL. With TS_OPENCL=OFF, opencl_stub.c takes its place and opening
# "opencl" says it is not in this build; everything else is unchanged.
find_path(TS_OPENCL_INCLUDE_DIR CL/cl.h)
if(TS_OPENCL_INCLUDE_DIR)
  set(_ts_opencl_default ON)
else()
  set(_ts_opencl_default OFF)
endif()
option(TS_OPENCL "Build the OpenCL engine (headers needed; libOpenCL loaded at run time)" ${_ts_opencl_default})
if(TS_OPENCL AND NOT TS_OPENCL_INCLUDE_DIR)
  message(FATAL_ERROR "TS_OPENCL=ON but CL/cl.h was not found (install opencl-headers or set TS_OPENCL_INCLUDE_DIR)")
endif()

list(FILTER TS_LIB_SOURCES EXCLUDE REGEX "/src/engine/opencl/")
if(TS_OPENCL)
  file(GLOB _ts_ocl_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/engine/opencl/opencl_*.c)
  list(FILTER _ts_ocl_sources EXCLUDE REGEX "/opencl_stub\\.c$")
  set_source_files_properties(${_ts_ocl_sources} PROPERTIES INCLUDE_DIRECTORIES ${TS_OPENCL_INCLUDE_DIR})
  list(APPEND TS_LIB_SOURCES ${_ts_ocl_sources})
  message(STATUS "tessera: OpenCL engine ON (headers in ${TS_OPENCL_INCLUDE_DIR}; libOpenCL loaded at run time)")
else()
  list(APPEND TS_LIB_SOURCES ${CMAKE_SOURCE_DIR}/src/engine/opencl/opencl_stub.c)
  message(STATUS "tessera: OpenCL engine OFF")
endif()

# dlopen/dlsym (in libc on current glibc; libdl on older ones). Deferred:
# the library target does not exist yet where this file is included.
if(TS_OPENCL AND CMAKE_DL_LIBS)
  cmake_language(DEFER CALL target_link_libraries tessera_core PRIVATE ${CMAKE_DL_LIBS})
endif()
