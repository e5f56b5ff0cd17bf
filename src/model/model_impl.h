/* model_impl.h - the inside of ts_mdl and ts_state, shared by the loader
 * (model.c) and the forward pass (forward.c). Not part of any public API.
 */
#ifndef TS_MODEL_IMPL_H
#define TS_MODEL_IMPL_H

#include "core/threadpool.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "runtime/block.h"

/* One transformer block's weights. Matrices point into the file in their
 * stored type; vectors are f32 (into the file when stored as F32, else a
 * converted copy owned by the model). Absent optional parts are NULL / have
 * data == NULL. */
typedef struct ts_layer {
    const float *attn_norm;      /* [n_embd] */
    ts_wmat wq;                  /* [n_head*head_dim][n_embd] */
    ts_wmat wk;                  /* [n_head_kv*head_dim][n_embd] */
    ts_wmat wv;                  /* [n_head_kv*head_dim][n_embd] */
    const float *bq, *bk, *bv;   /* qwen2 biases: [n_head*head_dim], [n_kv_dim], [n_kv_dim] */
    const float *q_norm;         /* qwen3/gemma3 per-head RMSNorm: [head_dim]; olmoe: [n_head*head_dim] */
    const float *k_norm;         /* [head_dim]; olmoe: [n_head_kv*head_dim] */
    int32_t n_q_norm, n_k_norm;  /* their lengths */
    ts_wmat wo;                  /* [n_embd][n_head*head_dim] */
    const float *attn_post_norm; /* gemma3: [n_embd] */
    const float *ffn_norm;       /* [n_embd] */
    ts_wmat w_gate;              /* [n_ff][n_embd] */
    ts_wmat w_up;                /* [n_ff][n_embd] */
    ts_wmat w_down;              /* [n_embd][n_ff] */
    const float *ffn_post_norm;  /* gemma3: [n_embd] */
    /* a MoE layer (w_gate/up/down absent): the router and the expert
     * arrays, n_expert matrices each, expert e at data + e * n_out * row_bytes
     * (n_in, n_out: one expert's shape) */
    ts_wmat w_router;            /* [n_expert][n_embd] */
    ts_wmat w_gate_exps;         /* [n_expert] x [n_ff_exp][n_embd] */
    ts_wmat w_up_exps;           /* [n_expert] x [n_ff_exp][n_embd] */
    ts_wmat w_down_exps;         /* [n_expert] x [n_embd][n_ff_exp] */

    bool swa;                    /* local (sliding-window) layer */
    const double *inv_freq;      /* [n_rot/2] rope angles per position for this layer */
} ts_layer;

/* An architecture family as data (model.c's table): what its files must
 * hold and how its block computes. */
typedef struct ts_arch_desc {
    const char *name;
    enum ts_arch arch;
    enum ts_rope_type rope;
    bool qkv_bias;        /* attn_{q,k,v}.bias required */
    bool qk_norm;         /* attn_{q,k}_norm.weight required (per-head RMSNorm) */
    bool post_norms;      /* post_attention_norm / post_ffw_norm required */
    bool gelu;            /* GeGLU (else SwiGLU) */
    bool embd_scale_sqrt; /* embeddings scaled by sqrt(n_embd) */
    bool swa;             /* sliding-window layers (attention.sliding_window[_pattern], pattern 6), local rope base 10000 */
    bool diffusion;       /* a diffusion LLM: bidirectional attention, mask token */
    bool shift_logits;    /* default of diffusion.shift_logits */
    bool attn_scale_62;   /* 62 layers: attention scaled by 1/sqrt(n_embd/n_head) (Gemma 3 27B) */
    /* mixture of experts: 0 dense; TS_MOE_OPTIONAL experts when
     * {arch}.expert_count > 0 (llama: Mixtral); TS_MOE_REQUIRED */
    uint8_t moe;
    uint8_t moe_score;    /* ts_moe_score (kernels/block_ops.h) */
    bool moe_norm_topk;   /* the k weights renormalized to sum 1 */
    bool qk_norm_full;    /* Q/K norms over the whole projection (olmoe), not per head */
} ts_arch_desc;
enum { TS_MOE_NONE = 0, TS_MOE_OPTIONAL = 1, TS_MOE_REQUIRED = 2 };

typedef struct ts_mdl_stream ts_mdl_stream;

struct ts_mdl {
    ts_gguf *gguf;
    const ts_arch_desc *ad; /* the family (model.c's table) */
    void *file_copy;             /* the whole file when use_mmap is false */
    ts_tokenizer *tok;
    ts_hparams hp;
    char *chat_template;

    int32_t n_rot;               /* rotated dims per head (rope.dimension_count) */
    float attn_scale;            /* multiplies q.k */
    bool ffn_gelu;               /* GeGLU (gemma) instead of SwiGLU */

    ts_wmat tok_embd;            /* [n_vocab][n_embd] */
    const float *output_norm;    /* [n_embd] */
    ts_wmat output;              /* [n_vocab][n_embd] (= tok_embd when tied) */
    ts_layer *layers;            /* [n_layer] */

    double *inv_freq_global;     /* [n_rot/2] */
    double *inv_freq_swa;        /* [n_rot/2] */

    float **owned;               /* converted vectors, freed with the model */
    int n_owned, cap_owned;

    uint64_t size_bytes;
    uint64_t n_params;

    /* device sessions (model/devices.c): one opened device and the weights
     * on it per device name, shared by the states that run there. The only
     * part of a loaded model that changes (under its own lock). */
    struct ts_mdl_devs *devs;
    /* the layers' weights as runtime slots (model/devices.c, at load):
     * [n_layer][TS_LS_COUNT] over the model's memory and rope_packed (the
     * global and sliding-window angles, ts_eng_rope_freq_pack); host_w is
     * them for the states' CPU layer graphs (no device) */
    struct ts_rt_host_slot *host_slots;
    void *rope_packed;
    struct ts_rt_weights *host_w;

    /* fast path (model/fast.c) */
    bool ref_kernels;            /* TS_KERNELS=ref at load: reference matmul/attention */
    void *packed_map;            /* anonymous mapping holding the repacked matrices */
    size_t packed_map_size;
    size_t packed_bytes;         /* bytes of repacked matrices (in packed_map or in place) */
    float *fast_vecs;            /* owned copies of the f32 vectors of a repacked mapped model */
    /* under a memory budget (stream.c): layers whose matrices stay in the file */
    bool *streamed;              /* [n_layer], NULL without a budget */
    ts_mdl_stream *stream;
};

/* Repacks the layer matrices for the fast kernels (model/fast.c); in_place
 * when the model owns a writable copy of the file. */
int ts_mdl_prepare_fast(ts_mdl *m, bool in_place, ts_err *err);
void ts_mdl_release_fast(ts_mdl *m);

/* ---- device sessions (model/devices.c) ---- */

/* One device opened for a model, and the model's weights on it
 * (runtime/layers.h), shared by every state of the model that asked for the
 * same device name and thread count. */
typedef struct ts_mdl_dev {
    struct ts_mdl_dev *next;
    char key[288]; /* device name + "#threads" */
    int refs;      /* states holding it, and sessions mapping its weights */
    struct ts_rt_weights *w;
    struct ts_mdl_dev *peer; /* the session whose packed weights this one maps (held) */
} ts_mdl_dev;

/* stream.c: decides which layers stream under p->mem_budget (before the
 * fast repack, which skips them); marks a streamed layer's matrix slots
 * (describe_weights, before host_w is made); gives host_w its source. */
int ts_mdl_stream_plan(ts_mdl *m, const char *path, const ts_mdl_params *p, ts_err *err);
bool ts_mdl_layer_streamed(const ts_mdl *m, int l);
/* fast.c: drops the whole pages inside [p, p + n) from the file mapping
 * (advisory: failure only costs memory). */
/* Drops a streamed layer's matrices' pages from the mapping (advisory). */
void ts_mdl_stream_drop_layer(const ts_mdl *m, int l);
void ts_mdl_stream_describe(const ts_mdl *m, int l, struct ts_rt_host_slot *S);
int ts_mdl_stream_attach(ts_mdl *m, ts_err *err);
/* The same source for a device's weights (the model's device sessions). */
int ts_mdl_stream_attach_to(const ts_mdl *m, struct ts_rt_weights *w, ts_err *err);
void ts_mdl_stream_free(ts_mdl *m);
/* The expert cache's counters (model-wide) and its size; zeros without one. */
void ts_mdl_stream_cache_stats(const ts_mdl *m, uint64_t *hits, uint64_t *misses, uint64_t *bytes);

/* Builds m->host_slots, rope_packed and host_w (after the fast repack). */
int ts_mdl_describe_weights(ts_mdl *m, ts_err *err);

struct ts_mdl_devs *ts_mdl_devs_new(void);
void ts_mdl_devs_free(struct ts_mdl_devs *d);
/* The session for device `spec` with n_threads for engines that take
 * threads=: the existing one, or the device opened now with the model's
 * weights described to it (nothing uploaded yet: the first state's
 * ts_rt_layers_new does that). With peer (another session of the model,
 * its weights placed), the session maps the peer's packed matrices where
 * it reads their layout (ts_rt_weights_set_peer: one stored copy for two
 * devices) and holds the peer until it closes; sessions with and without a
 * peer are distinct. NULL with err when it does not open. */
ts_mdl_dev *ts_mdl_dev_acquire(const ts_mdl *m, const char *spec, int n_threads, ts_mdl_dev *peer, ts_err *err);
/* The GGUF rows' file pages of the matrices the CPU holds in panels,
 * dropped again after a device made its copy from them (the load dropped
 * them once, fast.c; a device's packing read them back in): the file's
 * copy is not resident beside the panels and the device's. */
void ts_mdl_drop_row_pages(const ts_mdl *m);
/* Drops a state's hold; the last one closes the device and frees its weights. */
void ts_mdl_dev_release(const ts_mdl *m, ts_mdl_dev *d);

/* One extra activation set: buffers [width][...] per activation slot, its
 * device runner, its window in flight. */
typedef struct ts_act_set {
    float *act[TS_LS_N_ACT];
    struct ts_rt_layers *pf;
    bool pending;
    int32_t n;
    float *logits;
} ts_act_set;

struct ts_state {
    const ts_mdl *m;
    ts_threadpool *pool;
    int32_t n_ctx;
    int32_t n_batch;
    int32_t n_threads;
    bool kv_f32;
    int32_t n_past;

    int64_t n_kv_dim;            /* n_head_kv * head_dim */
    int64_t n_q_dim;             /* n_head * head_dim */
    void *k_cache;               /* [n_layer][n_ctx][n_kv_dim] f16 or f32 */
    void *v_cache;               /* [n_layer][n_ctx][n_kv_dim] */

    /* activations for one micro-batch of up to n_batch tokens */
    float *x;                    /* [n_batch][n_embd] residual stream */
    float *xn;                   /* [n_batch][n_embd] normed input of a sub-block */
    float *q;                    /* [n_batch][n_q_dim] */
    float *k;                    /* [n_batch][n_kv_dim] */
    float *v;                    /* [n_batch][n_kv_dim] */
    float *attn;                 /* [n_batch][n_q_dim] attention output */
    float *o;                    /* [n_batch][n_embd] projection output */
    float *gate;                 /* [n_batch][n_ff], a MoE layer's [n_batch][k][n_ff_exp] when wider */
    float *up;                   /* likewise */
    float *router;               /* MoE: [n_batch][n_expert] router logits */
    int32_t *exp_ids;            /* MoE: [n_batch][k] the tokens' experts */
    float *exp_w;                /* MoE: [n_batch][k] their weights */
    float *logits;               /* [n_vocab] last evaluated token */
    float *embd_sum, *embd_last; /* ts_state_set_embd_sink: [n_embd] each, or NULL */

    /* the layers: the block graph (runtime/block.h) run on the state's own
     * `cpu` engine over the buffers above and the model's weights */
    struct ts_engine *cpu_eng;   /* over pool */
    struct ts_rt_layers *cpu_layers;

    struct ts_linear_ws *lin;    /* fast matmul work space (the output matmul); NULL: reference path */
    float *scratch;              /* [n_threads][scratch_stride] */
    int64_t scratch_stride;

    /* prefill on a device (forward.c, runtime/layers.h): full chunks of
     * pf_width tokens run their layers there, over the buffers above
     * (allocated for max(n_batch, pf_width) rows) and the KV cache */
    ts_mdl_dev *pf_sess;         /* the model's session for the device (shared) */
    struct ts_engine *pf_dev;    /* its engine (not owned); NULL: CPU only */
    struct ts_rt_layers *pf;
    int32_t pf_width, pf_min;
    uint64_t pf_pad_tokens; /* padding rows of windows run at the required width (window_pad) */
    /* prefill_min_tokens -1: a chunk goes to the device when the CPU's
     * measured time for it exceeds the crossings it would cost there
     * (crossing_ns of the device's desc x crossings per run) */
    bool pf_auto;
    double cpu_ns_per_tok; /* measured over the CPU's layer runs of > 1 token (EMA); 0: none yet */
    char pf_fallback[640];       /* the fallback line, "" when none */
    /* a window forward submitted to the device, not yet waited for */
    bool win_pending;
    int32_t win_n;
    float *win_logits;
    const uint8_t *win_need; /* its logit-row selection (NULL: every row) */
    int32_t win_need_n;
    /* ts_state_set_logit_rows: the rows the next window forward (set 0)
     * computes logits for, taken by that call (NULL: all) */
    const uint8_t *logit_need;
    int32_t logit_need_n;
    /* activation sets beyond the first (ts_state_params.n_act_sets): each
     * its own buffers and device runner sharing s->pf's queue, for windows
     * in flight at once (ts_forward_window_submit_set) */
    int32_t want_sets; /* ts_state_params.n_act_sets, clamped to [1, 4] */
    int32_t n_sets;    /* extra ones that opened */
    struct ts_act_set *sets;
    /* sched=ooo: chunks run out of order, and the time the state's thread
     * sat blocked on the device in those runs (ts_rt_chunks.host_wait_ns) */
    uint64_t ooo_chunks, ooo_host_wait_ns;
    char sets_note[200]; /* why fewer opened, for the info line ("" when all did) */
    /* the two-engine stream's second device (ts_state_attach_device_b):
     * its runner over the buffers above and the KV cache */
    ts_mdl_dev *pfb_sess;
    struct ts_rt_layers *pfb;
    char pf_info[384];
};

#endif
