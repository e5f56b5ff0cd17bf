/* utf8.h - small UTF-8 helpers shared by the tokenizers and the detokenizer.
 *
 * Invalid input is handled the way Unicode recommends ("maximal subpart"
 * substitution, which is also what Python's bytes.decode('utf-8', 'replace')
 * does): a lead byte followed by a valid but truncated continuation is one
 * error; any other bad byte is an error of its own. Each error becomes U+FFFD.
 */
#ifndef TS_TEXT_UTF8_H
#define TS_TEXT_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Looks at the sequence starting at s[0] (n >= 1 bytes available).
 * Returns its length (1..4) and sets *cp when it is a complete valid sequence.
 * Returns 0 when s holds only a valid but incomplete prefix running into the
 * end of the buffer (*bad is set to that prefix length), and -k when the first
 * k bytes are an invalid maximal subpart (to be replaced by one U+FFFD). */
int ts_utf8_next(const uint8_t *s, size_t n, uint32_t *cp, int *bad);

/* Encodes cp (<= 0x10FFFF) into out (4 bytes room); returns the length. */
int ts_utf8_put(uint32_t cp, char *out);

/* Number of code points in a valid UTF-8 string (counts lead bytes). */
size_t ts_utf8_count(const char *s, size_t n);

/* Returns 1 if s[0..n) is entirely valid UTF-8. */
int ts_utf8_valid(const char *s, size_t n);

/* Copies s[0..n) to a new malloc'ed buffer with each invalid maximal subpart
 * (including a truncated sequence at the very end) replaced by U+FFFD.
 * *out_len receives the length; NULL on allocation failure. */
char *ts_utf8_sanitize(const char *s, size_t n, size_t *out_len);

#endif
