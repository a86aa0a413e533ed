/* model reference: inferx's logits against the double-precision reference
 * forward pass (model_ref.c) for tiny random models that exercise the
 * loader's and the forward pass's features one at a time: RoPE scaling
 * (linear, llama3, yarn, Phi-3's longrope with long or short factors, a
 * rope_freqs tensor), partial rotary, sliding windows smaller than the
 * sequence (blocks of 4, and the cache must really release them), tied
 * embeddings with full multi-head attention, f16 K/V. Each case also checks
 * that it can fail: the reference without its feature (no scaling, no
 * factors, no window, the whole head rotated, ...) must be far from inferx.
 * test_arch_ref.c does the same for every architecture.
 *
 * Malformed models (a missing tensor, a wrong shape, an unsupported type) must
 * fail to load with a message naming the tensor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "model_ref.h"

/* clang-format off */
static const ref_case k_cases[] = {
    /* RoPE scaling */
    {.name = "llama_linear_rope", .arch = "llama", .scaling = IX_ROPE_SCALING_LINEAR, .factor = 4,
     .opt = R(OUTPUT), .types = T_F32, .ab = AB(SCALE)},
    {.name = "llama3_rope_scaling", .arch = "llama", .freq_base = 500000, .scaling = IX_ROPE_SCALING_LLAMA3,
     .factor = 8, .low = 1, .high = 4, .orig_ctx = 64, .opt = R(OUTPUT), .types = T_F32, .ab = AB(FACTORS)},
    {.name = "llama_rope_freqs_tensor", .arch = "llama", .opt = R(OUTPUT) | R(ROPE_FREQS), .types = T_F32,
     .ab = AB(FACTORS)},
    {.name = "qwen2_yarn", .arch = "qwen2", .scaling = IX_ROPE_SCALING_YARN, .factor = 4, .orig_ctx = 4096,
     .types = T_F32 | T_Q8, .ab = AB(YARN_RAMP) | AB(MSCALE) | AB(SCALE)},
    {.name = "phi3_longrope_long", .arch = "phi3", .scaling = IX_ROPE_SCALING_LONGROPE, .orig_ctx = 64,
     .attn_factor = 1.19f, .opt = R(ROPE_LONG) | R(ROPE_SHORT) | R(OUTPUT_B), .types = T_F32 | T_Q4,
     .ab = AB(LONGROPE_SET) | AB(MSCALE) | AB(FACTORS)},
    {.name = "phi3_longrope_short", .arch = "phi3", .scaling = IX_ROPE_SCALING_LONGROPE, .orig_ctx = 4096,
     .attn_factor = 1.19f, .opt = R(ROPE_LONG) | R(ROPE_SHORT), .types = T_F32, .ab = AB(LONGROPE_SET)},
    /* partial rotary, windows, tied MHA, f16 K/V */
    {.name = "llama_partial_rotary", .arch = "llama", .n_rot = 8, .opt = R(OUTPUT), .types = T_F32,
     .ab = AB(N_ROT)},
    {.name = "qwen2_partial_rotary", .arch = "qwen2", .n_rot = 8, .opt = R(OUTPUT), .types = T_F32,
     .ab = AB(N_ROT)},
    {.name = "llama_sliding_window_f16kv", .arch = "llama", .window = 5, .block_size = 4, .opt = R(OUTPUT),
     .types = T_F32, .kv16 = true, .ab = AB(WINDOW)},
    {.name = "qwen2_window", .arch = "qwen2", .freq_base = 1e6f, .window = 9, .block_size = 4,
     .opt = R(OUTPUT), .types = T_F32 | T_Q8, .ab = AB(WINDOW)},
    {.name = "llama_tied_mha", .arch = "llama", .Hkv = 4, .types = T_F32, .ab = AB(ROPE_MODE)},
};
/* clang-format on */

static void test_malformed(void **state) {
    (void)state;
    /* ffn 256 so that an IQ2_XXS ffn_down (blocks of 256, a type without kernels) is a well-formed file. */
    static const ref_case qwen2 = {
        .name = "malformed_qwen2", .arch = "qwen2", .F = 256, .opt = R(OUTPUT)};
    static const ref_case phi3 = {.name = "malformed_phi3", .arch = "phi3"};
    static const ref_case gpt2 = {.name = "malformed_gpt2", .arch = "gpt2"};
    static const ref_case qwen3 = {.name = "malformed_qwen3", .arch = "qwen3"};
    static const struct {
        const ref_case *c;
        ref_mutation mut;
        ix_status want;
    } cases[] = {
        {&qwen2, {MUT_DROP, 1, IX__R_FFN_UP}, IX_ERR_FORMAT},
        {&qwen2, {MUT_DROP, -1, IX__R_OUT_NORM}, IX_ERR_FORMAT},
        {&qwen2, {MUT_DROP, 0, IX__R_ATTN_K_B}, IX_ERR_FORMAT},
        {&qwen2, {MUT_DROP, -1, IX__R_TOK_EMBD}, IX_ERR_FORMAT},
        {&qwen2, {MUT_SHAPE, 0, IX__R_ATTN_K}, IX_ERR_FORMAT},
        {&qwen2, {MUT_SHAPE, 1, IX__R_FFN_DOWN}, IX_ERR_FORMAT},
        {&qwen2, {MUT_SHAPE, -1, IX__R_OUTPUT}, IX_ERR_FORMAT},
        {&qwen2, {MUT_SHAPE, 1, IX__R_ATTN_NORM}, IX_ERR_FORMAT},
        {&qwen2, {MUT_TYPE_IQ2_XXS, 0, IX__R_FFN_DOWN}, IX_ERR_UNSUPPORTED},
        {&qwen2, {MUT_TYPE_F16, 1, IX__R_FFN_NORM}, IX_ERR_UNSUPPORTED},
        {&phi3, {MUT_SHAPE, 1, IX__R_ATTN_QKV}, IX_ERR_FORMAT},
        {&phi3, {MUT_SHAPE, 0, IX__R_FFN_GATE_UP}, IX_ERR_FORMAT},
        {&gpt2, {MUT_DROP, -1, IX__R_POS_EMBD}, IX_ERR_FORMAT},
        {&gpt2, {MUT_DROP, 0, IX__R_ATTN_QKV_B}, IX_ERR_FORMAT},
        {&qwen3, {MUT_DROP, 1, IX__R_ATTN_K_NORM}, IX_ERR_FORMAT},
    };
    static const char *const kind_names[] = {[MUT_DROP] = "drop",
                                             [MUT_SHAPE] = "reshape",
                                             [MUT_TYPE_IQ2_XXS] = "retype",
                                             [MUT_TYPE_F16] = "retype"};
    char path[512];
    for (size_t i = 0; i < IX_ARRAY_LEN(cases); i++) {
        const ref_case base = ref_case_fill(cases[i].c);
        ref_model m;
        ref_model_make(&m, &base, IX_DTYPE_F32, 99);
        ref_model_path(path, sizeof path, base.name);
        ix_model *model = NULL;
        ix_errbuf err = {{0}};
        if (i == 0 || cases[i].c != cases[i - 1].c) {
            /* the unmutated file loads: each failure below is the mutation's */
            ref_model_write(&m, NULL, path);
            if (ix_model_load(&model, path, &err) != IX_OK)
                fail_msg("the unmutated %s: %s", base.name, err.msg);
            ix_model_destroy(model);
            model = NULL;
        }
        const ref_tensor *t = &m.t[cases[i].mut.il + 1][cases[i].mut.role];
        assert_non_null(t->data);
        ref_model_write(&m, &cases[i].mut, path);
        ix_status s = ix_model_load(&model, path, &err);
        fprintf(stderr, "  %s %s %s: %s: %s\n", base.arch, kind_names[cases[i].mut.kind], t->name,
                ix_status_name(s), err.msg);
        assert_null(model);
        if (s != cases[i].want)
            fail_msg("%s: status %s, want %s", t->name, ix_status_name(s),
                     ix_status_name(cases[i].want));
        if (!strstr(err.msg, t->name))
            fail_msg("%s: the message '%s' does not name the tensor", t->name, err.msg);
        unlink(path);
        ref_model_free(&m);
    }
}

int main(void) {
    const struct CMUnitTest extra[] = {cmocka_unit_test(test_malformed)};
    return ref_run("model_ref", k_cases, IX_ARRAY_LEN(k_cases), extra, IX_ARRAY_LEN(extra));
}
