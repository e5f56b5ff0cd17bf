/* utf8.c - UTF-8 decoding with maximal-subpart error handling (see utf8.h). */
#include "text/utf8.h"

#include <stdlib.h>
#include <string.h>

int ts_utf8_next(const uint8_t *s, size_t n, uint32_t *cp, int *bad) {
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;      /* no overlong forms */
        else if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        v = c & 0x07;
        if (c == 0xF0) lo = 0x90;      /* no overlong forms */
        else if (c == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        return -1; /* stray continuation byte, C0, C1 or F5..FF */
    }
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) {
            if (bad) *bad = i;
            return 0;
        }
        uint8_t b = s[i];
        uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) return -i;
        v = (v << 6) | (b & 0x3F);
    }
    *cp = v;
    return len;
}

int ts_utf8_put(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t ts_utf8_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

int ts_utf8_valid(const char *s, size_t n) {
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) { /* ASCII fast path */
            i++;
            continue;
        }
        uint32_t cp;
        int r = ts_utf8_next(p + i, n - i, &cp, NULL);
        if (r <= 0) return 0;
        i += (size_t)r;
    }
    return 1;
}

char *ts_utf8_sanitize(const char *s, size_t n, size_t *out_len) {
    /* Worst case: every byte becomes 3 bytes of U+FFFD. */
    if (n > (SIZE_MAX - 1) / 3) return NULL;
    char *out = malloc(n * 3 + 1);
    if (!out) return NULL;
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        int bad = 0;
        int r = ts_utf8_next(p + i, n - i, &cp, &bad);
        if (r > 0) {
            memcpy(out + o, s + i, (size_t)r);
            o += (size_t)r;
            i += (size_t)r;
            continue;
        }
        size_t skip = r < 0 ? (size_t)-r : (size_t)bad;
        o += (size_t)ts_utf8_put(0xFFFD, out + o);
        i += skip;
    }
    out[o] = 0;
    *out_len = o;
    return out;
}
