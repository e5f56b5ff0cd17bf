/* opencl_stub.c - stands in for the OpenCL engine in a build configured
 * with TS_OPENCL=OFF (cmake/engine.cmake), so that opening "opencl" is an
 * ordinary, clean error and the listing says why. */
#include <stdio.h>
#include <string.h>

#include "engine/engine_impl.h"

ts_engine *ts_eng_opencl_open(const ts_eng_opts *o, ts_err *err) {
    (void)o;
    ts_err_set(err, "opencl: not in this build (configured with TS_OPENCL=OFF)");
    return NULL;
}

int ts_eng_opencl_list(ts_eng_info *out, int cap) {
    if (cap >= 1) {
        memset(out, 0, sizeof *out);
        snprintf(out->name, sizeof out->name, "opencl");
        snprintf(out->reason, sizeof out->reason, "not in this build (configured with TS_OPENCL=OFF)");
    }
    return 1;
}
