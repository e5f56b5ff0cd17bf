#include "tessera.h"

#define TS_STR2(x) #x
#define TS_STR(x) TS_STR2(x)

const char *ts_version(void) {
    return TS_STR(TS_VERSION_MAJOR) "." TS_STR(TS_VERSION_MINOR) "." TS_STR(TS_VERSION_PATCH);
}
