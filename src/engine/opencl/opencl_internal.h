/* opencl_internal.h - shared by the opencl engine's files: the OpenCL API
 * as a table of function pointers loaded at run time (opencl_engine.c) and
 * the kernel source (opencl_kernels.c). */
#ifndef TS_ENGINE_OPENCL_INTERNAL_H
#define TS_ENGINE_OPENCL_INTERNAL_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

extern const char ts_ocl_source[];

#endif
