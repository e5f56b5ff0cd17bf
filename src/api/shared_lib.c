/* shared_lib.c - the one source file of the libtessera.so target (CMake wants
 * one). The library's code is the whole core archive, linked in entirely;
 * this file only checks that the header the .so is built from is the public
 * one, with symbol visibility in effect. */
#include "tessera.h"

#if !defined(__GNUC__) && !defined(__clang__)
#error "libtessera.so relies on GCC/Clang symbol visibility (TS_API)"
#endif
