/* types.c - the table of tensor element types (block size, bytes per block).
 * Sizes follow the block structs of the GGUF/ggml format; can_dequant /
 * can_quant say what quant.c implements. */
#include <strings.h>

#include "quant/quant.h"

#define T(id, nm, b, s, dq, q) [id] = {.name = nm, .blck = b, .size = s, .can_dequant = dq, .can_quant = q}

static const ts_type_traits traits[TS_TYPE_COUNT] = {
    T(TS_TYPE_F32, "F32", 1, 4, true, true),
    T(TS_TYPE_F16, "F16", 1, 2, true, true),
    T(TS_TYPE_Q4_0, "Q4_0", 32, 18, true, true),
    T(TS_TYPE_Q4_1, "Q4_1", 32, 20, true, true),
    T(TS_TYPE_Q5_0, "Q5_0", 32, 22, true, false),
    T(TS_TYPE_Q5_1, "Q5_1", 32, 24, true, false),
    T(TS_TYPE_Q8_0, "Q8_0", 32, 34, true, true),
    T(TS_TYPE_Q8_1, "Q8_1", 32, 36, false, false),
    T(TS_TYPE_Q2_K, "Q2_K", 256, 84, true, false),
    T(TS_TYPE_Q3_K, "Q3_K", 256, 110, true, false),
    T(TS_TYPE_Q4_K, "Q4_K", 256, 144, true, false),
    T(TS_TYPE_Q5_K, "Q5_K", 256, 176, true, false),
    T(TS_TYPE_Q6_K, "Q6_K", 256, 210, true, false),
    T(TS_TYPE_Q8_K, "Q8_K", 256, 292, false, false),
    T(TS_TYPE_IQ2_XXS, "IQ2_XXS", 256, 66, false, false),
    T(TS_TYPE_IQ2_XS, "IQ2_XS", 256, 74, false, false),
    T(TS_TYPE_IQ3_XXS, "IQ3_XXS", 256, 98, false, false),
    T(TS_TYPE_IQ1_S, "IQ1_S", 256, 50, false, false),
    T(TS_TYPE_IQ4_NL, "IQ4_NL", 32, 18, false, false),
    T(TS_TYPE_IQ3_S, "IQ3_S", 256, 110, false, false),
    T(TS_TYPE_IQ2_S, "IQ2_S", 256, 82, false, false),
    T(TS_TYPE_IQ4_XS, "IQ4_XS", 256, 136, false, false),
    T(TS_TYPE_I8, "I8", 1, 1, false, false),
    T(TS_TYPE_I16, "I16", 1, 2, false, false),
    T(TS_TYPE_I32, "I32", 1, 4, false, false),
    T(TS_TYPE_I64, "I64", 1, 8, false, false),
    T(TS_TYPE_F64, "F64", 1, 8, false, false),
    T(TS_TYPE_IQ1_M, "IQ1_M", 256, 56, false, false),
    T(TS_TYPE_BF16, "BF16", 1, 2, true, true),
    T(TS_TYPE_TQ1_0, "TQ1_0", 256, 54, false, false),
    T(TS_TYPE_TQ2_0, "TQ2_0", 256, 66, false, false),
    T(TS_TYPE_MXFP4, "MXFP4", 32, 17, false, false),
};

const ts_type_traits *ts_type_info(uint32_t type) {
    if (type >= TS_TYPE_COUNT || traits[type].name == NULL) return NULL;
    return &traits[type];
}

int ts_type_from_name(const char *name) {
    for (int i = 0; i < TS_TYPE_COUNT; i++)
        if (traits[i].name && !strcasecmp(traits[i].name, name)) return i;
    return -1;
}

size_t ts_row_size(uint32_t type, int64_t n) {
    const ts_type_traits *t = ts_type_info(type);
    if (!t || n < 0 || n % t->blck) return 0;
    return (size_t)(n / t->blck) * t->size;
}
