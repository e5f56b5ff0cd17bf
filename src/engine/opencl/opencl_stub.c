/* opencl_stub.c - stands in for the OpenCL engine in a build configured
 * with TS_OPENCL=OFF (cmake/engine.cmake), so that opening "opencl" is an
 * ordinary, clean error and the listing says why. */
#include <stdio.h>
#include <string.h>

#include "engine/engine_impl.h"

static ts_engine *stub_open(const ts_eng_opts *o, ts_err *err) {
    (void)o;
    ts_err_set(err, "opencl: not in this build (configured with TS_OPENCL=OFF)");
    return NULL;
}

static int stub_list(ts_eng_info *out, int cap) {
    if (cap >= 1) {
        memset(out, 0, sizeof *out);
        snprintf(out->name, sizeof out->name, "opencl");
        snprintf(out->reason, sizeof out->reason, "not in this build (configured with TS_OPENCL=OFF)");
    }
    return 1;
}

static int stub_any_variant(const char *variant, ts_err *err) {
    (void)variant, (void)err;
    return 0; /* opening says why there is no device N */
}

const ts_eng_backend ts_eng_backend_opencl = {
    .name = "opencl",
    .names_help = "opencl, opencl:N",
    .check_variant = stub_any_variant,
    .open = stub_open,
    .list = stub_list,
};
