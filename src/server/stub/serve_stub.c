/* serve_stub.c - `tessera serve` in a build configured with -DTS_SERVER=OFF
 * (cmake/server.cmake): the CLI links against this instead of src/server,
 * and the command says why it is missing rather than failing to link. */
#include <stdio.h>

#include "serve.h"

tsrv_config tsrv_default_config(void) {
    tsrv_config c = {.host = "127.0.0.1", .port = 8080, .parallel = 1};
    return c;
}

int tsrv_run(const tsrv_config *cfg) {
    (void)cfg;
    fprintf(stderr, "tessera: this build has no HTTP server (configured with -DTS_SERVER=OFF; "
                    "install libmicrohttpd-dev and libjansson-dev and reconfigure)\n");
    return 1;
}

char *tsrv_json_schema_text_gbnf(const char *text, char *err, size_t cap) {
    (void)text;
    snprintf(err, cap, "this build cannot convert JSON schemas (configured with -DTS_SERVER=OFF: no jansson); "
                       "pass a GBNF grammar with --grammar-file instead");
    return NULL;
}
