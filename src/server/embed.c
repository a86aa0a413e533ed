/* inferx server: POST /v1/embeddings.
 *
 * An embedding is the loaded model's final-norm hidden state pooled over the
 * input's tokens and scaled to unit L2 norm (as OpenAI's are, so that a dot
 * product is the cosine similarity). Pooling follows the GGUF's
 * `<arch>.pooling_type` when it has one (1 mean, 2 first token, 3 last
 * token, as llama.cpp numbers them) and is the mean otherwise: the models
 * served here are causal decoders, and without a pooling head trained for
 * them the mean of every position is what carries the whole text (the last
 * position alone is mostly about the next token).
 *
 * Where it runs: the engine thread owns the engine's model context and KV
 * cache, and its step loop has no notion of a request that returns hidden
 * states, so embeddings run on a context of their own -- its own KV cache
 * for one sequence of at most IXS_EMBED_MAX_TOKENS, its own worker pool as
 * large as the engine's -- created on the first request and shared by all
 * of them under a mutex, one request at a time, on the HTTP thread that
 * received it. The model's weights are immutable and shared read-only. The
 * cost: an HTTP thread is busy for the length of the pass (the others keep
 * serving), and while an embedding request runs it competes with the engine
 * for the cores. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/model.h"
#include "server/server_int.h"

#define IXS_EMBED_MAX_INPUTS 256      /* inputs per request */
#define IXS_EMBED_MAX_TOKENS 4096     /* tokens per input (and the context's KV) */
#define IXS_EMBED_MAX_TOTAL 65536     /* tokens per request */
#define IXS_EMBED_CHUNK 256           /* tokens per forward pass */

typedef enum pooling { POOL_MEAN = 1, POOL_FIRST = 2, POOL_LAST = 3 } pooling;

struct ixs_embedder {
    pthread_mutex_t mu;
    bool ready;           /* under mu: kv and ctx exist */
    ix_kv *kv;
    ix_model_ctx *ctx;
    float *hidden;        /* (IXS_EMBED_CHUNK, n_embd) one pass's output rows */
    int32_t max_tokens;   /* per input: min(context, IXS_EMBED_MAX_TOKENS) */
    pooling pool;
};

ix_status ix__embed_create(ix_server *s) {
    ixs_embedder *em = ix_calloc(1, sizeof *em);
    if (!em) return IX_ERR_NOMEM;
    pthread_mutex_init(&em->mu, NULL);
    em->max_tokens = s->n_ctx < IXS_EMBED_MAX_TOKENS ? s->n_ctx : IXS_EMBED_MAX_TOKENS;
    em->pool = POOL_MEAN;
    const ix_model_hparams *hp = ix_model_get_hparams(s->model);
    char key[64];
    uint32_t pt;
    snprintf(key, sizeof key, "%s.pooling_type", hp->arch_name);
    if (ix_gguf_get_u32(ix_model_gguf(s->model), key, &pt, NULL) == IX_OK && (pt == POOL_FIRST || pt == POOL_LAST))
        em->pool = (pooling)pt;
    s->embed = em;
    IX_LOGI("server: embeddings pool hidden states by %s", em->pool == POOL_MEAN ? "the mean" : em->pool == POOL_LAST ? "the last token" : "the first token");
    return IX_OK;
}

void ix__embed_destroy(ix_server *s) {
    ixs_embedder *em = s->embed;
    if (!em) return;
    ix_model_ctx_destroy(em->ctx);
    ix_kv_destroy(em->kv);
    ix_free(em->hidden);
    pthread_mutex_destroy(&em->mu);
    ix_free(em);
    s->embed = NULL;
}

/* Under em->mu: the context, made on first use. */
static ix_status embedder_ready(ix_server *s, ixs_embedder *em, ix_errbuf *err) {
    if (em->ready) return IX_OK;
    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(s->model, &kp);
    kp.dtype = IX_KV_F16;
    kp.n_blocks = (em->max_tokens + kp.block_size - 1) / kp.block_size + 1;
    kp.max_seq_len = em->max_tokens;
    kp.enable_prefix_cache = false;
    kp.n_swap_blocks = 0;
    ix_status st = ix_kv_create(&kp, &em->kv, err);
    if (st != IX_OK) return st;
    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.max_batch_tokens = IXS_EMBED_CHUNK;
    cp.n_threads = ix_pool_n_threads(ix_engine_pool(s->engine));
    if ((st = ix_model_ctx_create(&em->ctx, s->model, em->kv, &cp, err)) != IX_OK) goto fail;
    const ix_model_hparams *hp = ix_model_get_hparams(s->model);
    em->hidden = ix_malloc((size_t)IXS_EMBED_CHUNK * (size_t)hp->n_embd * sizeof *em->hidden);
    if (!em->hidden) {
        st = ix_errf(err, IX_ERR_NOMEM, "out of memory");
        goto fail;
    }
    em->ready = true;
    return IX_OK;
fail:
    ix_model_ctx_destroy(em->ctx);
    ix_kv_destroy(em->kv);
    em->ctx = NULL;
    em->kv = NULL;
    return st;
}

/* Under em->mu: out (n_embd) = the pooled, normalized embedding of ids. */
static ix_status embed_one(ix_server *s, ixs_embedder *em, const ix_token_vec *ids, float *out, ix_errbuf *err) {
    const int32_t E = ix_model_get_hparams(s->model)->n_embd;
    const int32_t n = (int32_t)ids->n;
    int32_t seq;
    ix_status st = ix_kv_seq_create(em->kv, 0, &seq);
    if (st != IX_OK) return ix_errf(err, st, "KV cache: %s", ix_kv_errmsg(em->kv));
    double *acc = ix_calloc((size_t)E, sizeof *acc); /* (E) sum of the pooled rows */
    int32_t pos[IXS_EMBED_CHUNK], sq[IXS_EMBED_CHUNK];
    uint8_t want[IXS_EMBED_CHUNK];
    if (!acc) {
        st = ix_errf(err, IX_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int32_t p0 = 0; p0 < n; p0 += IXS_EMBED_CHUNK) {
        int32_t m = n - p0 < IXS_EMBED_CHUNK ? n - p0 : IXS_EMBED_CHUNK;
        if ((st = ix_kv_seq_append(em->kv, seq, m, NULL)) != IX_OK) {
            st = ix_errf(err, st == IX_FULL ? IX_ERR_INTERNAL : st, "KV cache: %s", ix_kv_errmsg(em->kv));
            goto done;
        }
        for (int32_t t = 0; t < m; t++) {
            int32_t p = p0 + t;
            pos[t] = p;
            sq[t] = seq;
            want[t] = em->pool == POOL_MEAN || (em->pool == POOL_FIRST && p == 0) ||
                      (em->pool == POOL_LAST && p == n - 1);
        }
        ix_batch b = {m, ids->ids + p0, pos, sq, want};
        if ((st = ix_model_forward_hidden(em->ctx, &b, em->hidden)) != IX_OK) {
            st = ix_errf(err, st, "forward pass: %s", ix_model_ctx_errmsg(em->ctx));
            goto done;
        }
        ix_kv_seq_commit(em->kv, seq, p0 + m);
        int32_t row = 0;
        for (int32_t t = 0; t < m; t++) {
            if (!want[t]) continue;
            const float *h = em->hidden + (size_t)row++ * (size_t)E;
            for (int32_t i = 0; i < E; i++) acc[i] += h[i];
        }
    }
    double norm = 0;
    for (int32_t i = 0; i < E; i++) norm += acc[i] * acc[i];
    norm = sqrt(norm);
    for (int32_t i = 0; i < E; i++) out[i] = norm > 0 ? (float)(acc[i] / norm) : 0.0f;
done:
    ix_free(acc);
    ix_kv_seq_free(em->kv, seq);
    return st;
}

/* ---- the request -------------------------------------------------------- */

typedef struct embed_req {
    ix_token_vec in[IXS_EMBED_MAX_INPUTS];
    int32_t n_in;
    bool base64;
} embed_req;

static int tokens_of(ix_server *s, json_t *v, size_t i, bool many, ix_token_vec *out, ixs_err *e) {
    char where[32] = "";
    if (many) snprintf(where, sizeof where, "[%zu]", i);
    if (json_is_string(v)) {
        if (json_string_length(v) == 0) return IXS_BAD(e, "input", "'input%s' is an empty string", where);
        ix_errbuf err = {{0}};
        if (ix_tokenizer_encode(s->tok, json_string_value(v), json_string_length(v), IX_TOK_ADD_SPECIAL, out,
                                &err) != IX_OK)
            return IXS_BAD(e, "input", "input%s: %s", where, err.msg);
    } else if (json_is_array(v)) {
        if (json_array_size(v) == 0) return IXS_BAD(e, "input", "'input%s' is an empty token array", where);
        size_t k;
        json_t *t;
        json_array_foreach(v, k, t) {
            if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= s->n_vocab)
                return IXS_BAD(e, "input", "'input%s' token %zu is not an id in [0, %d)", where, k, (int)s->n_vocab);
            if (ix_token_vec_push(out, (ix_token)json_integer_value(t)) != IX_OK)
                return ix__srv_errf(e, 500, "server_error", NULL, "out of memory");
        }
    } else {
        return IXS_BAD(e, "input", "'input%s' must be a string or an array of token ids", where);
    }
    if (out->n > (size_t)s->embed->max_tokens) {
        ix__srv_errf(e, 400, "invalid_request_error", "input",
                     "input%s is %zu tokens; at most %d tokens are embedded at once", where, out->n,
                     (int)s->embed->max_tokens);
        e->code = "context_length_exceeded";
        return -1;
    }
    return 0;
}

static int parse_embed(ix_server *s, json_t *req, embed_req *r, ixs_err *e) {
    static const char *const known[] = {"model", "input", "encoding_format", "dimensions", "user"};
    const char *key;
    json_t *v;
    json_object_foreach(req, key, v) {
        bool ok = false;
        for (size_t i = 0; i < IX_ARRAY_LEN(known) && !ok; i++) ok = !strcmp(key, known[i]);
        if (!ok) return IXS_BAD(e, key, "unknown field '%.48s' (not supported by /v1/embeddings)", key);
    }
    json_t *in = json_object_get(req, "input");
    if (!in || json_is_null(in)) return IXS_BAD(e, "input", "'input' is required");
    /* One input: a string or a token array; several: an array of either. */
    json_t *first = json_array_get(in, 0);
    bool many = json_is_array(in) && (json_is_string(first) || json_is_array(first));
    if (json_is_array(in) && json_array_size(in) == 0) return IXS_BAD(e, "input", "'input' is an empty array");
    size_t n = many ? json_array_size(in) : 1;
    if (n > IXS_EMBED_MAX_INPUTS)
        return IXS_BAD(e, "input", "'input' has %zu items; at most %d per request", n, IXS_EMBED_MAX_INPUTS);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (tokens_of(s, many ? json_array_get(in, i) : in, i, many, &r->in[i], e)) return -1;
        r->n_in = (int32_t)i + 1;
        total += r->in[i].n;
    }
    if (total > IXS_EMBED_MAX_TOTAL)
        return IXS_BAD(e, "input", "'input' is %zu tokens in all; at most %d per request", total, IXS_EMBED_MAX_TOTAL);
    json_t *fmt = json_object_get(req, "encoding_format");
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_string_value(fmt);
        if (!f || (strcmp(f, "float") && strcmp(f, "base64")))
            return IXS_BAD(e, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
        r->base64 = !strcmp(f, "base64");
    }
    json_t *dim = json_object_get(req, "dimensions");
    int32_t E = ix_model_get_hparams(s->model)->n_embd;
    if (dim && !json_is_null(dim) && (!json_is_integer(dim) || json_integer_value(dim) != E))
        return IXS_BAD(e, "dimensions", "'dimensions' must be %d, the model's embedding size (no shortening)",
                       (int)E);
    json_t *user = json_object_get(req, "user");
    if (user && !json_is_null(user) && !json_is_string(user)) return IXS_BAD(e, "user", "'user' must be a string");
    return 0;
}

/* ---- the answer --------------------------------------------------------- */

/* Standard base64 of the vector as little-endian float32. */
static json_t *base64_f32(const float *v, int32_t n) {
    static const char k_alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t nb = (size_t)n * 4;
    unsigned char *raw = ix_malloc(nb ? nb : 1);
    char *out = ix_malloc((nb + 2) / 3 * 4 + 1);
    json_t *j = NULL;
    if (!raw || !out) goto done;
    for (int32_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) raw[(size_t)i * 4 + (size_t)k] = (unsigned char)(u >> (8 * k));
    }
    size_t o = 0;
    for (size_t i = 0; i < nb; i += 3) {
        uint32_t x = (uint32_t)raw[i] << 16 | (i + 1 < nb ? (uint32_t)raw[i + 1] << 8 : 0) |
                     (i + 2 < nb ? raw[i + 2] : 0);
        out[o++] = k_alpha[x >> 18 & 63];
        out[o++] = k_alpha[x >> 12 & 63];
        out[o++] = i + 1 < nb ? k_alpha[x >> 6 & 63] : '=';
        out[o++] = i + 2 < nb ? k_alpha[x & 63] : '=';
    }
    j = json_stringn(out, o);
done:
    ix_free(raw);
    ix_free(out);
    return j;
}

static json_t *vector_json(const float *v, int32_t n, bool base64) {
    if (base64) return base64_f32(v, n);
    json_t *a = json_array();
    for (int32_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_real(v[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

enum MHD_Result ix__srv_embeddings(ixs_conn *cc, json_t *req) {
    ix_server *s = cc->s;
    ixs_embedder *em = s->embed;
    ixs_err e;
    embed_req r;
    memset(&r, 0, sizeof r);
    json_t *data = NULL, *root = NULL;
    float *vec = NULL;
    int32_t E = ix_model_get_hparams(s->model)->n_embd;
    size_t n_tokens = 0;
    if (parse_embed(s, req, &r, &e)) goto fail;
    vec = ix_malloc((size_t)E * sizeof *vec);
    data = json_array();
    if (!vec || !data) goto oom;
    pthread_mutex_lock(&em->mu);
    ix_errbuf err = {{0}};
    ix_status st = embedder_ready(s, em, &err);
    for (int32_t i = 0; st == IX_OK && i < r.n_in; i++) {
        if ((st = embed_one(s, em, &r.in[i], vec, &err)) != IX_OK) break;
        json_t *item = vector_json(vec, E, r.base64);
        if (!item || json_array_append_new(data, json_pack("{s:s, s:i, s:o}", "object", "embedding", "index",
                                                           (int)i, "embedding", item))) {
            st = ix_errf(&err, IX_ERR_NOMEM, "out of memory");
            break;
        }
        n_tokens += r.in[i].n;
    }
    pthread_mutex_unlock(&em->mu);
    if (st != IX_OK) {
        ix__srv_errf(&e, 500, "server_error", NULL, "embedding failed: %s", err.msg);
        goto fail;
    }
    root = json_pack("{s:s, s:o, s:s, s:{s:i, s:i}}", "object", "list", "data", data, "model", s->model_name,
                     "usage", "prompt_tokens", (int)n_tokens, "total_tokens", (int)n_tokens);
    data = NULL;
    for (int32_t i = 0; i < r.n_in; i++) ix_token_vec_free(&r.in[i]);
    ix_free(vec);
    return ix__srv_reply_json(cc, 200, root);
oom:
    ix__srv_errf(&e, 500, "server_error", NULL, "out of memory");
fail:
    for (int32_t i = 0; i < IXS_EMBED_MAX_INPUTS; i++) ix_token_vec_free(&r.in[i]);
    json_decref(data);
    ix_free(vec);
    return ix__srv_reply_err(cc, &e);
}
