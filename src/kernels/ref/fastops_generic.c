/* fastops_generic.c - the portable copy of the fast attention block and
 * SwiGLU (kernels/fastops_impl.h), built without ISA flags: the fallback of
 * every level without its own copy. */
#define FASTOPS_NAME(x) ts_##x##_generic
#include "kernels/fastops_impl.h"
