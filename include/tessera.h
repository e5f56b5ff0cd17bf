/* tessera.h - public C API of the tessera inference engine.
 *
 * (The full embeddable API - models, contexts, streaming - lands with the
 * C API issue; for now this header carries the version.)
 */
#ifndef TESSERA_H
#define TESSERA_H

#ifdef __cplusplus
extern "C" {
#endif

#define TS_VERSION_MAJOR 0
#define TS_VERSION_MINOR 1
#define TS_VERSION_PATCH 0

/* "MAJOR.MINOR.PATCH"; thread-safe. */
const char *ts_version(void);

#ifdef __cplusplus
}
#endif

#endif
