/* model.c - loading a transformer model from GGUF: the architecture family,
 * its hyper-parameters (read from `{arch}.*` keys, checked for range and
 * consistency), and the binding of every weight tensor by name with its
 * shape checked against those hyper-parameters. Matrices stay in the file
 * map in their stored type; small vectors (norms, biases) are used in place
 * when stored as F32 and converted once otherwise.
 *
 * Family differences handled here (the forward pass reads the result):
 *   llama   RoPE on adjacent pairs (the GGUF converter permuted Q/K), SwiGLU,
 *           optional rope_freqs tensor / llama3 or linear rope scaling;
 *   qwen2   NeoX RoPE, Q/K/V biases;
 *   qwen3   NeoX RoPE, per-head Q/K RMSNorm;
 *   gemma3  NeoX RoPE, Q/K norms, post-attention and post-FFN norms, GeGLU
 *           (tanh GELU), embeddings scaled by sqrt(n_embd), interleaved
 *           sliding-window layers with their own rope base (10000). Gemma's
 *           (1 + w) norm weights are stored already incremented by the
 *           converter, so they are used as stored;
 *   llada   diffusion LLM (LLaDA): the llama forward (Q/K permuted by the
 *           converter as for llama, adjacent-pair RoPE, optional Q/K/V
 *           biases), bidirectional attention;
 *   dream   diffusion LLM (Dream): the qwen2 forward (NeoX RoPE, Q/K/V
 *           biases), bidirectional attention;
 *   qwen3moe the qwen3 attention, every FFN routed experts: softmax over the
 *           experts, the top k renormalized;
 *   olmoe   NeoX RoPE, Q/K RMSNorm over the whole projection (not per
 *           head), routed experts: the top k of the softmax as they are;
 *   llama with {arch}.expert_count > 0 (Mixtral): routed experts, softmax
 *           over the k largest router logits.
 * Experts as llama.cpp's converter writes them: the router
 * blk.N.ffn_gate_inp [n_embd, n_expert] and the 3-D expert arrays
 * blk.N.ffn_{gate,up}_exps [n_embd, n_ff_exp, n_expert], ffn_down_exps
 * [n_ff_exp, n_embd, n_expert]; expert_count, expert_used_count and
 * expert_feed_forward_length (else feed_forward_length) keys. Shared
 * experts (qwen2moe's) are refused.
 * Diffusion keys: `{arch}.attention.causal` (default false for llada/dream,
 * true otherwise), `tokenizer.ggml.mask_token_id`, `diffusion.shift_logits`
 * (default true for dream, false otherwise). A causal llada/dream file and a
 * non-causal file of another family are refused (nothing here computes
 * them). The forward pass does not read these keys: ts_forward is always
 * causal and ts_forward_window always bidirectional; decoders use the latter.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/block_ops.h"
#include "model/model_impl.h"
#include "runtime/layers.h"
#include "quant/quant.h"

/* ---- small helpers ---------------------------------------------------- */

/* The architectures, as data: one line each. What a family's files must
 * hold and how its block computes; the loader and the block description
 * read these fields, never the family's name. A family that fits these
 * traits is one line here (docs/ARCHITECTURE.md). */
static const ts_arch_desc arch_table[] = {
    /* name      id              rope          qkv_b  qk_n   post_n gelu   e_sqrt swa    diff   shift  attn62 */
    {"llama", TS_ARCH_LLAMA, TS_ROPE_NORM, false, false, false, false, false, false, false, false, false,
     .moe = TS_MOE_OPTIONAL, .moe_score = TS_MOE_TOPK_SOFTMAX}, /* Mixtral: softmax over the k chosen */
    {"qwen2", TS_ARCH_QWEN2, TS_ROPE_NEOX, true, false, false, false, false, false, false, false, false, .moe = TS_MOE_NONE},
    {"qwen3", TS_ARCH_QWEN3, TS_ROPE_NEOX, false, true, false, false, false, false, false, false, false, .moe = TS_MOE_NONE},
    {"gemma3", TS_ARCH_GEMMA3, TS_ROPE_NEOX, false, true, true, true, true, true, false, false, true, .moe = TS_MOE_NONE},
    {"llada", TS_ARCH_LLADA, TS_ROPE_NORM, false, false, false, false, false, false, true, false, false, .moe = TS_MOE_NONE},
    {"dream", TS_ARCH_DREAM, TS_ROPE_NEOX, true, false, false, false, false, false, true, true, false, .moe = TS_MOE_NONE},
    /* softmax over all experts, then the top k, renormalized (llama.cpp
     * always renormalizes qwen3moe: HF's norm_topk_prob = true) */
    {"qwen3moe", TS_ARCH_QWEN3MOE, TS_ROPE_NEOX, false, true, false, false, false, false, false, false, false,
     .moe = TS_MOE_REQUIRED, .moe_score = TS_MOE_SOFTMAX_TOPK, .moe_norm_topk = true},
    /* the top k of the softmax as they are; Q/K norms over the whole projection */
    {"olmoe", TS_ARCH_OLMOE, TS_ROPE_NEOX, false, true, false, false, false, false, false, false, false,
     .moe = TS_MOE_REQUIRED, .moe_score = TS_MOE_SOFTMAX_TOPK, .moe_norm_topk = false, .qk_norm_full = true},
};

/* Formats "{arch}.{suffix}" into buf (keys are short; truncation impossible
 * for the fixed suffixes used here and harmless otherwise). */
static const char *akey(char *buf, size_t cap, const ts_mdl *m, const char *suffix) {
    snprintf(buf, cap, "%s.%s", m->hp.arch_name, suffix);
    return buf;
}

/* Required integer key in [lo, hi]. */
static int req_i32(const ts_mdl *m, const char *suffix, int64_t lo, int64_t hi, int32_t *out, ts_err *err) {
    char key[128];
    int64_t v;
    if (ts_gguf_get_i64(m->gguf, akey(key, sizeof key, m, suffix), &v, err)) return -1;
    if (v < lo || v > hi)
        return ts_err_set(err, "%s = %lld out of range [%lld, %lld]", key, (long long)v, (long long)lo,
                          (long long)hi);
    *out = (int32_t)v;
    return 0;
}

/* Optional integer key in [lo, hi]; *out untouched when absent. Returns 1 if
 * found, 0 if absent, -1 on error. */
static int opt_i32(const ts_mdl *m, const char *suffix, int64_t lo, int64_t hi, int32_t *out, ts_err *err) {
    char key[128];
    akey(key, sizeof key, m, suffix);
    if (!ts_gguf_find(m->gguf, key)) return 0;
    int64_t v;
    if (ts_gguf_get_i64(m->gguf, key, &v, err)) return -1;
    if (v < lo || v > hi)
        return ts_err_set(err, "%s = %lld out of range [%lld, %lld]", key, (long long)v, (long long)lo,
                          (long long)hi);
    *out = (int32_t)v;
    return 1;
}

/* Optional float key, must be finite and within (lo, hi] ... [lo, hi]. */
static int opt_f32(const ts_mdl *m, const char *suffix, double lo, double hi, float *out, ts_err *err) {
    char key[128];
    float v;
    int r = ts_gguf_opt_f32(m->gguf, akey(key, sizeof key, m, suffix), &v, err);
    if (r <= 0) return r;
    if (!isfinite(v) || v < lo || v > hi) return ts_err_set(err, "%s = %g out of range [%g, %g]", key, v, lo, hi);
    *out = v;
    return 1;
}

static int own(ts_mdl *m, float *p, ts_err *err) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? m->cap_owned * 2 : 64;
        float **np = realloc(m->owned, (size_t)cap * sizeof *np);
        if (!np) {
            free(p);
            return ts_err_set(err, "out of memory");
        }
        m->owned = np;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = p;
    return 0;
}

static void fmt_shape(char *buf, size_t cap, const ts_gguf_tensor *t) {
    int o = snprintf(buf, cap, "[");
    for (uint32_t i = 0; i < t->n_dims && o > 0 && (size_t)o < cap; i++)
        o += snprintf(buf + o, cap - (size_t)o, "%s%lld", i ? ", " : "", (long long)t->ne[i]);
    if (o > 0 && (size_t)o < cap) snprintf(buf + o, cap - (size_t)o, "]");
}

/* Binds matrix `name` of shape [n_in, n_out] (GGUF ne order), or with
 * n_expert > 0 an expert array [n_in, n_out, n_expert]: out then describes
 * one expert (n_in, n_out, row_bytes) and out->data the first; expert e
 * starts n_out * row_bytes after the previous one. Absent and not
 * required: out->data = NULL and 0 is returned. `what` names the expected
 * dimensions for the error message. */
static int bind_weights(ts_mdl *m, const char *name, int64_t n_in, int64_t n_out, int64_t n_expert, const char *what,
                        bool required, ts_wmat *out, ts_err *err) {
    memset(out, 0, sizeof *out);
    const ts_gguf_tensor *t = ts_gguf_find_tensor(m->gguf, name);
    if (!t) return required ? ts_err_set(err, "missing tensor '%s'", name) : 0;
    if (t->n_dims != (n_expert > 0 ? 3u : 2u) || t->ne[0] != n_in || t->ne[1] != n_out ||
        (n_expert > 0 && t->ne[2] != n_expert)) {
        char sh[96], ex[32] = "";
        fmt_shape(sh, sizeof sh, t);
        if (n_expert > 0) snprintf(ex, sizeof ex, ", %lld", (long long)n_expert);
        return ts_err_set(err, "tensor '%s' has shape %s, expected [%lld, %lld%s] (%s)", name, sh, (long long)n_in,
                          (long long)n_out, ex, what);
    }
    const ts_type_traits *tr = ts_type_info(t->type);
    if (!tr || !tr->can_dequant)
        return ts_err_set(err, "tensor '%s': type %s is not supported for matmul", name, tr ? tr->name : "unknown");
    size_t rb = ts_row_size(t->type, n_in);
    if (rb == 0) return ts_err_set(err, "tensor '%s': row of %lld elements does not fit type %s", name, (long long)n_in, tr->name);
    *out = (ts_wmat){.type = t->type, .data = t->data, .n_in = n_in, .n_out = n_out, .row_bytes = rb};
    return 0;
}

static int bind_mat(ts_mdl *m, const char *name, int64_t n_in, int64_t n_out, const char *what, bool required,
                    ts_wmat *out, ts_err *err) {
    return bind_weights(m, name, n_in, n_out, 0, what, required, out, err);
}

static int bind_experts(ts_mdl *m, const char *name, int64_t n_in, int64_t n_out, int64_t n_expert, const char *what,
                        ts_wmat *out, ts_err *err) {
    return bind_weights(m, name, n_in, n_out, n_expert, what, true, out, err);
}

/* Binds 1-D tensor `name` of n elements as f32. Absent and not required:
 * *out = NULL, returns 0. */
static int bind_vec(ts_mdl *m, const char *name, int64_t n, bool required, const float **out, ts_err *err) {
    *out = NULL;
    const ts_gguf_tensor *t = ts_gguf_find_tensor(m->gguf, name);
    if (!t) return required ? ts_err_set(err, "missing tensor '%s'", name) : 0;
    if (t->n_dims != 1 || t->ne[0] != n) {
        char sh[96];
        fmt_shape(sh, sizeof sh, t);
        return ts_err_set(err, "tensor '%s' has shape %s, expected [%lld]", name, sh, (long long)n);
    }
    if (t->type == TS_TYPE_F32 && ((uintptr_t)t->data % sizeof(float)) == 0) {
        *out = t->data;
        return 0;
    }
    const ts_type_traits *tr = ts_type_info(t->type);
    if (!tr || !tr->can_dequant || ts_row_size(t->type, n) == 0)
        return ts_err_set(err, "tensor '%s': type %s is not supported for a vector", name, tr ? tr->name : "unknown");
    float *buf = malloc((size_t)n * sizeof(float));
    if (!buf) return ts_err_set(err, "out of memory converting tensor '%s'", name);
    if (own(m, buf, err)) return -1;
    if (ts_dequant_row(t->type, t->data, buf, n, err)) return ts_err_prefix(err, "tensor '%s'", name);
    *out = buf;
    return 0;
}

/* ---- hyper-parameters ------------------------------------------------- */

static int load_hparams(ts_mdl *m, ts_err *err) {
    ts_hparams *hp = &m->hp;
    const ts_gguf *g = m->gguf;
    ts_gguf_str s;
    if (ts_gguf_get_str(g, "general.architecture", &s, err)) return -1;
    hp->arch_name = NULL;
    for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++) {
        if (s.len == strlen(arch_table[i].name) && !memcmp(s.ptr, arch_table[i].name, s.len)) {
            m->ad = &arch_table[i];
            hp->arch = arch_table[i].arch;
            hp->arch_name = arch_table[i].name;
        }
    }
    if (!hp->arch_name) {
        char names[128];
        size_t len = 0;
        for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0] && len < sizeof names; i++)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", arch_table[i].name);
        return ts_err_set(err, "general.architecture '%.*s' is not supported (%s)", (int)(s.len > 64 ? 64 : s.len),
                          s.ptr, names);
    }
    const ts_arch_desc *ad = m->ad;

    if (req_i32(m, "block_count", 1, 4096, &hp->n_layer, err)) return -1;
    if (req_i32(m, "embedding_length", 1, 1 << 18, &hp->n_embd, err)) return -1;
    if (req_i32(m, "feed_forward_length", 1, 1 << 20, &hp->n_ff, err)) return -1;
    if (req_i32(m, "attention.head_count", 1, 4096, &hp->n_head, err)) return -1;
    if (req_i32(m, "context_length", 1, INT32_MAX, &hp->n_ctx_train, err)) return -1;
    hp->n_head_kv = hp->n_head;
    if (opt_i32(m, "attention.head_count_kv", 1, hp->n_head, &hp->n_head_kv, err) < 0) return -1;
    if (hp->n_head % hp->n_head_kv)
        return ts_err_set(err, "%s.attention.head_count_kv = %d does not divide head_count %d", hp->arch_name,
                          hp->n_head_kv, hp->n_head);

    int32_t hd = 0;
    int r = opt_i32(m, "attention.key_length", 1, 4096, &hd, err);
    if (r < 0) return -1;
    if (r == 0) {
        if (hp->n_embd % hp->n_head)
            return ts_err_set(err, "%s.embedding_length %d not divisible by head_count %d (and no key_length)",
                              hp->arch_name, hp->n_embd, hp->n_head);
        hd = hp->n_embd / hp->n_head;
    }
    hp->head_dim = hd;
    int32_t vd = hd;
    if (opt_i32(m, "attention.value_length", 1, 4096, &vd, err) < 0) return -1;
    if (vd != hd)
        return ts_err_set(err, "%s.attention.value_length %d differs from key_length %d (not supported)",
                          hp->arch_name, vd, hd);
    m->n_rot = hd;
    if (opt_i32(m, "rope.dimension_count", 2, hd, &m->n_rot, err) < 0) return -1;
    if (m->n_rot % 2) return ts_err_set(err, "%s.rope.dimension_count = %d is odd", hp->arch_name, m->n_rot);

    {
        char key[128];
        float eps;
        if (ts_gguf_get_f32(g, akey(key, sizeof key, m, "attention.layer_norm_rms_epsilon"), &eps, err)) return -1;
        if (!isfinite(eps) || eps <= 0.0f || eps >= 1.0f) return ts_err_set(err, "%s = %g out of range (0, 1)", key, eps);
        hp->norm_eps = eps;
    }

    hp->rope_type = ad->rope;
    hp->rope_freq_base = 10000.0f;
    if (opt_f32(m, "rope.freq_base", 1e-3, 1e30, &hp->rope_freq_base, err) < 0) return -1;
    hp->rope_freq_base_swa = ad->swa ? 10000.0f : hp->rope_freq_base;
    if (opt_f32(m, "rope.freq_base_swa", 1e-3, 1e30, &hp->rope_freq_base_swa, err) < 0) return -1;

    /* Rope scaling, as llama.cpp reads it: the type defaults to linear, the
     * factor comes from rope.scaling.factor or the legacy rope.scale_linear. */
    hp->rope_freq_scale = 1.0f;
    {
        char key[128];
        ts_gguf_str ty = {"linear", 6};
        if (ts_gguf_opt_str(g, akey(key, sizeof key, m, "rope.scaling.type"), &ty, err) < 0) return -1;
        float factor = 0.0f;
        if ((r = opt_f32(m, "rope.scaling.factor", 0.0, 1e6, &factor, err)) < 0) return -1;
        if (r == 0 && opt_f32(m, "rope.scale_linear", 0.0, 1e6, &factor, err) < 0) return -1;
#define TY_IS(lit) (ty.len == sizeof(lit) - 1 && !memcmp(ty.ptr, lit, ty.len))
        if (TY_IS("none")) {
            /* no scaling */
        } else if (TY_IS("linear")) {
            if (factor > 0.0f) hp->rope_freq_scale = 1.0f / factor;
        } else if (TY_IS("llama3")) {
            /* Not written by llama.cpp's converter (it stores a rope_freqs
             * tensor instead) but accepted with HF's parameter names. */
            if (!(factor > 0.0f)) return ts_err_set(err, "%s.rope.scaling.type llama3 needs rope.scaling.factor > 0", hp->arch_name);
            float lo = 1.0f, hi = 4.0f;
            int32_t orig = 8192;
            if (opt_f32(m, "rope.scaling.low_freq_factor", 1e-6, 1e6, &lo, err) < 0) return -1;
            if (opt_f32(m, "rope.scaling.high_freq_factor", 1e-6, 1e6, &hi, err) < 0) return -1;
            if (opt_i32(m, "rope.scaling.original_context_length", 1, INT32_MAX, &orig, err) < 0) return -1;
            if (!(hi > lo))
                return ts_err_set(err, "%s.rope.scaling.high_freq_factor %g must exceed low_freq_factor %g",
                                  hp->arch_name, hi, lo);
            hp->rope_llama3_factor = factor;
            hp->rope_llama3_low = lo;
            hp->rope_llama3_high = hi;
            hp->rope_llama3_orig_ctx = orig;
        } else {
            return ts_err_set(err, "%s = '%.*s' is not supported (none, linear, llama3)", key,
                              (int)(ty.len > 32 ? 32 : ty.len), ty.ptr);
        }
#undef TY_IS
    }

    if (ad->swa) {
        if (opt_i32(m, "attention.sliding_window", 0, INT32_MAX, &hp->n_swa, err) < 0) return -1;
        hp->swa_pattern = 6;
        if (opt_i32(m, "attention.sliding_window_pattern", 0, 4096, &hp->swa_pattern, err) < 0) return -1;
    }
    hp->embd_scale = ad->embd_scale_sqrt ? sqrtf((float)hp->n_embd) : 1.0f;
    m->ffn_gelu = ad->gelu;
    if (opt_f32(m, "final_logit_softcapping", 0.0, 1e9, &hp->final_logit_softcap, err) < 0) return -1;
    if (ad->moe != TS_MOE_NONE) {
        if (opt_i32(m, "expert_count", 0, 65536, &hp->n_expert, err) < 0) return -1;
        if (ad->moe == TS_MOE_REQUIRED && hp->n_expert < 1)
            return ts_err_set(err, "%s.expert_count is missing or 0: a %s model routes to experts", hp->arch_name,
                              hp->arch_name);
        if (hp->n_expert > 0) {
            if (req_i32(m, "expert_used_count", 1, hp->n_expert, &hp->n_expert_used, err)) return -1;
            hp->n_ff_exp = hp->n_ff;
            if (opt_i32(m, "expert_feed_forward_length", 1, 1 << 20, &hp->n_ff_exp, err) < 0) return -1;
            /* the routing: the family's, unless the file names a gating
             * function (llama.cpp's keys: 1 softmax, 2 sigmoid) */
            hp->moe_score = ad->moe_score;
            hp->moe_norm_topk = ad->moe_norm_topk;
            int32_t gating = 0;
            if (opt_i32(m, "expert_gating_func", 1, 2, &gating, err) < 0) return -1;
            if (gating == 2) {
                hp->moe_score = TS_MOE_SIGMOID_TOPK;
                hp->moe_norm_topk = false;
            }
            char key[128];
            if (ts_gguf_opt_bool(g, akey(key, sizeof key, m, "expert_weights_norm"), &hp->moe_norm_topk, err) < 0)
                return -1;
            int32_t shared = 0;
            if (opt_i32(m, "expert_shared_count", 0, 65536, &shared, err) < 0) return -1;
            if (shared > 0)
                return ts_err_set(err, "%s.expert_shared_count = %d: shared experts are not supported", hp->arch_name,
                                  shared);
        }
    }
    if (opt_f32(m, "attn_logit_softcapping", 0.0, 1e9, &hp->attn_logit_softcap, err) < 0) return -1;

    /* Attention scale: the file's value when given, else 1/sqrt(head_dim),
     * except Gemma 3 27B (62 layers) which scales by 1/sqrt(n_embd/n_head)
     * (query_pre_attn_scalar), as llama.cpp does. */
    float scale = 0.0f;
    if (opt_f32(m, "attention.scale", 0.0, 1e6, &scale, err) < 0) return -1;
    if (scale > 0.0f) {
        m->attn_scale = scale;
    } else if (ad->attn_scale_62 && hp->n_layer == 62) {
        m->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    } else {
        m->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    }
    return 0;
}

/* ---- tensors ---------------------------------------------------------- */

static int bind_tensors(ts_mdl *m, ts_err *err) {
    ts_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, QD = (int64_t)hp->n_head * hp->head_dim, KD = (int64_t)hp->n_head_kv * hp->head_dim;
    const int64_t F = hp->n_ff;

    const ts_gguf_tensor *te = ts_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!te) return ts_err_set(err, "missing tensor 'token_embd.weight'");
    if (te->n_dims != 2 || te->ne[1] < 1 || te->ne[1] > INT32_MAX) {
        char sh[96];
        fmt_shape(sh, sizeof sh, te);
        return ts_err_set(err, "tensor 'token_embd.weight' has shape %s, expected [n_embd=%lld, n_vocab]", sh, (long long)E);
    }
    hp->n_vocab = (int32_t)te->ne[1];
    int32_t vs = hp->n_vocab;
    if (opt_i32(m, "vocab_size", 1, INT32_MAX, &vs, err) < 0) return -1;
    if (vs != hp->n_vocab)
        return ts_err_set(err, "%s.vocab_size = %d does not match token_embd.weight rows %d", hp->arch_name, vs, hp->n_vocab);
    if (bind_mat(m, "token_embd.weight", E, hp->n_vocab, "n_embd, n_vocab", true, &m->tok_embd, err)) return -1;
    if (bind_vec(m, "output_norm.weight", E, true, &m->output_norm, err)) return -1;
    if (bind_mat(m, "output.weight", E, hp->n_vocab, "n_embd, n_vocab", false, &m->output, err)) return -1;
    hp->tied_output = m->output.data == NULL;
    if (hp->tied_output) m->output = m->tok_embd;

    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return ts_err_set(err, "out of memory");
    const bool need_qk_norm = m->ad->qk_norm;
    const bool gemma = m->ad->post_norms;
    char nm[96];
#define N(suffix) (snprintf(nm, sizeof nm, "blk.%d." suffix, il), nm)
    for (int il = 0; il < hp->n_layer; il++) {
        ts_layer *L = &m->layers[il];
        if (bind_vec(m, N("attn_norm.weight"), E, true, &L->attn_norm, err)) return -1;
        if (bind_mat(m, N("attn_q.weight"), E, QD, "n_embd, n_head*head_dim", true, &L->wq, err)) return -1;
        if (bind_mat(m, N("attn_k.weight"), E, KD, "n_embd, n_head_kv*head_dim", true, &L->wk, err)) return -1;
        if (bind_mat(m, N("attn_v.weight"), E, KD, "n_embd, n_head_kv*head_dim", true, &L->wv, err)) return -1;
        if (bind_mat(m, N("attn_output.weight"), QD, E, "n_head*head_dim, n_embd", true, &L->wo, err)) return -1;
        const bool need_bias = m->ad->qkv_bias;
        if (bind_vec(m, N("attn_q.bias"), QD, need_bias, &L->bq, err)) return -1;
        if (bind_vec(m, N("attn_k.bias"), KD, need_bias, &L->bk, err)) return -1;
        if (bind_vec(m, N("attn_v.bias"), KD, need_bias, &L->bv, err)) return -1;
        if (ts_gguf_find_tensor(m->gguf, N("attn_output.bias")))
            return ts_err_set(err, "tensor '%s' is not supported", nm);
        L->n_q_norm = m->ad->qk_norm_full ? (int32_t)QD : hp->head_dim;
        L->n_k_norm = m->ad->qk_norm_full ? (int32_t)KD : hp->head_dim;
        if (bind_vec(m, N("attn_q_norm.weight"), L->n_q_norm, need_qk_norm, &L->q_norm, err)) return -1;
        if (bind_vec(m, N("attn_k_norm.weight"), L->n_k_norm, need_qk_norm, &L->k_norm, err)) return -1;
        if (bind_vec(m, N("post_attention_norm.weight"), E, gemma, &L->attn_post_norm, err)) return -1;
        if (bind_vec(m, N("ffn_norm.weight"), E, true, &L->ffn_norm, err)) return -1;
        if (hp->n_expert > 0) {
            const int64_t NE = hp->n_expert, FE = hp->n_ff_exp;
            if (bind_mat(m, N("ffn_gate_inp.weight"), E, NE, "n_embd, n_expert", true, &L->w_router, err)) return -1;
            if (bind_experts(m, N("ffn_gate_exps.weight"), E, FE, NE, "n_embd, n_ff_exp, n_expert", &L->w_gate_exps, err) ||
                bind_experts(m, N("ffn_up_exps.weight"), E, FE, NE, "n_embd, n_ff_exp, n_expert", &L->w_up_exps, err) ||
                bind_experts(m, N("ffn_down_exps.weight"), FE, E, NE, "n_ff_exp, n_embd, n_expert", &L->w_down_exps, err))
                return -1;
            if (ts_gguf_find_tensor(m->gguf, N("ffn_gate_shexp.weight")))
                return ts_err_set(err, "tensor '%s': shared experts are not supported", nm);
        } else {
            if (bind_mat(m, N("ffn_gate.weight"), E, F, "n_embd, n_ff", true, &L->w_gate, err)) return -1;
            if (bind_mat(m, N("ffn_up.weight"), E, F, "n_embd, n_ff", true, &L->w_up, err)) return -1;
            if (bind_mat(m, N("ffn_down.weight"), F, E, "n_ff, n_embd", true, &L->w_down, err)) return -1;
        }
        if (bind_vec(m, N("post_ffw_norm.weight"), E, gemma, &L->ffn_post_norm, err)) return -1;
        L->swa = hp->n_swa > 0 && (hp->swa_pattern == 0 || il % hp->swa_pattern < hp->swa_pattern - 1);
    }
#undef N
    return 0;
}

/* Rope angle tables for global and (gemma3) local layers. */
static int build_rope(ts_mdl *m, ts_err *err) {
    const ts_hparams *hp = &m->hp;
    const int n_pairs = m->n_rot / 2;
    const float *factors = NULL;
    if (bind_vec(m, "rope_freqs.weight", n_pairs, false, &factors, err)) return -1;
    if (factors)
        for (int i = 0; i < n_pairs; i++)
            if (!isfinite(factors[i]) || factors[i] <= 0.0f)
                return ts_err_set(err, "tensor 'rope_freqs.weight'[%d] = %g is not a positive factor", i, factors[i]);
    m->inv_freq_global = malloc((size_t)n_pairs * sizeof(double));
    m->inv_freq_swa = malloc((size_t)n_pairs * sizeof(double));
    if (!m->inv_freq_global || !m->inv_freq_swa) return ts_err_set(err, "out of memory");
    ts_rope_llama3 l3 = {hp->rope_llama3_factor, hp->rope_llama3_low, hp->rope_llama3_high, hp->rope_llama3_orig_ctx};
    /* The rope_freqs tensor already encodes llama3 scaling; never apply both. */
    const ts_rope_llama3 *l3p = hp->rope_llama3_factor > 0.0f && !factors ? &l3 : NULL;
    ts_rope_inv_freq(m->inv_freq_global, m->n_rot, hp->rope_freq_base, hp->rope_freq_scale, factors, l3p);
    /* Local layers use their own base and no scaling (llama.cpp:
     * rope_freq_scale_train_swa = 1). */
    ts_rope_inv_freq(m->inv_freq_swa, m->n_rot, hp->rope_freq_base_swa, 1.0, NULL, NULL);
    for (int il = 0; il < hp->n_layer; il++)
        m->layers[il].inv_freq = m->layers[il].swa ? m->inv_freq_swa : m->inv_freq_global;
    return 0;
}

/* ---- diffusion LLMs --------------------------------------------------- */

/* Attention mode, mask token and logit shift (after bind_tensors: the mask
 * id is checked against n_vocab). */
static int load_diffusion_keys(ts_mdl *m, ts_err *err) {
    ts_hparams *hp = &m->hp;
    const bool diffusion = m->ad->diffusion;
    char key[128];
    hp->causal = !diffusion;
    if (ts_gguf_opt_bool(m->gguf, akey(key, sizeof key, m, "attention.causal"), &hp->causal, err) < 0) return -1;
    if (hp->causal && diffusion)
        return ts_err_set(err, "%s = true: a causal %s model is not supported", key, hp->arch_name);
    if (!hp->causal && !diffusion)
        return ts_err_set(err, "%s = false: non-causal attention is only supported for llada and dream (arch %s)",
                          key, hp->arch_name);
    hp->mask_token_id = -1;
    int64_t id;
    if (ts_gguf_find(m->gguf, "tokenizer.ggml.mask_token_id")) {
        if (ts_gguf_get_i64(m->gguf, "tokenizer.ggml.mask_token_id", &id, err)) return -1;
        if (id < 0 || id >= hp->n_vocab)
            return ts_err_set(err, "tokenizer.ggml.mask_token_id = %lld out of range [0, %d)", (long long)id,
                              hp->n_vocab);
        hp->mask_token_id = (int32_t)id;
    }
    bool shift = m->ad->shift_logits;
    if (ts_gguf_opt_bool(m->gguf, "diffusion.shift_logits", &shift, err) < 0) return -1;
    hp->shift_logits = shift ? 1 : 0;
    return 0;
}

/* ---- public ----------------------------------------------------------- */

ts_mdl_params ts_mdl_default_params(void) {
    ts_mdl_params p = {.use_mmap = true};
    return p;
}

static void *read_whole_file(const char *path, size_t *size, ts_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        ts_err_set(err, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    void *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
        ts_err_set(err, "cannot determine the size of '%s'", path);
    } else if (!(buf = malloc(n ? (size_t)n : 1))) {
        ts_err_set(err, "out of memory reading '%s' (%ld bytes)", path, n);
    } else if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        ts_err_set(err, "short read on '%s'", path);
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)(n < 0 ? 0 : n);
    return buf;
}

ts_mdl *ts_mdl_load(const char *path, const ts_mdl_params *p, ts_err *err) {
    ts_mdl_params dp = ts_mdl_default_params();
    if (!p) p = &dp;
    if (!path) {
        ts_err_set(err, "model path is NULL");
        return NULL;
    }
    ts_mdl *m = calloc(1, sizeof *m);
    if (!m || !(m->devs = ts_mdl_devs_new())) {
        free(m);
        ts_err_set(err, "out of memory");
        return NULL;
    }
    if (p->use_mmap) {
        m->gguf = ts_gguf_open(path, err);
    } else {
        size_t size = 0;
        m->file_copy = read_whole_file(path, &size, err);
        if (m->file_copy) m->gguf = ts_gguf_open_mem(m->file_copy, size, err);
    }
    if (!m->gguf) goto fail;
    if (load_hparams(m, err) || bind_tensors(m, err) || build_rope(m, err) || load_diffusion_keys(m, err)) goto fail;

    for (int64_t i = 0; i < ts_gguf_n_tensors(m->gguf); i++) {
        const ts_gguf_tensor *t = ts_gguf_tensor_at(m->gguf, i);
        m->size_bytes += t->nbytes;
        m->n_params += (uint64_t)t->n_elements;
    }
    ts_gguf_str ct;
    int r = ts_gguf_opt_str(m->gguf, "tokenizer.chat_template", &ct, err);
    if (r < 0) goto fail;
    if (r == 1) {
        m->chat_template = malloc(ct.len + 1);
        if (!m->chat_template) {
            ts_err_set(err, "out of memory");
            goto fail;
        }
        memcpy(m->chat_template, ct.ptr, ct.len);
        m->chat_template[ct.len] = '\0';
    }
    m->tok = ts_tokenizer_load(m->gguf, err);
    if (!m->tok) {
        ts_err_prefix(err, "tokenizer");
        goto fail;
    }
    if (ts_mdl_stream_plan(m, path, p, err) || ts_mdl_prepare_fast(m, !p->use_mmap, err) ||
        ts_mdl_describe_weights(m, err))
        goto fail;
    return m;
fail:
    ts_err_prefix(err, "%s", path);
    ts_mdl_free(m);
    return NULL;
}

void ts_mdl_free(ts_mdl *m) {
    if (!m) return;
    ts_mdl_devs_free(m->devs); /* every state is gone: no session is in use */
    ts_rt_weights_free(m->host_w);
    ts_mdl_stream_free(m);
    free(m->host_slots);
    free(m->rope_packed);
    ts_mdl_release_fast(m);
    ts_tokenizer_free(m->tok);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->inv_freq_global);
    free(m->inv_freq_swa);
    free(m->chat_template);
    ts_gguf_close(m->gguf);
    free(m->file_copy);
    free(m);
}

const ts_hparams *ts_mdl_hparams(const ts_mdl *m) { return &m->hp; }
const ts_tokenizer *ts_mdl_tokenizer(const ts_mdl *m) { return m->tok; }
const ts_gguf *ts_mdl_gguf(const ts_mdl *m) { return m->gguf; }
const char *ts_mdl_chat_template(const ts_mdl *m) { return m->chat_template; }
uint64_t ts_mdl_size_bytes(const ts_mdl *m) { return m->size_bytes; }
uint64_t ts_mdl_n_params(const ts_mdl *m) { return m->n_params; }
