/* architecture reference: inferx's logits against the double-precision
 * reference forward pass (model_ref.c, which states each architecture's
 * semantics independently of the architecture table) for a tiny random model
 * of every architecture of the table, each with F32, F16, BF16, Q8_0 and
 * Q4_0 weights, on every ISA path this CPU runs. Each case also checks that
 * the architecture's features can fail, with the reference leaving one out:
 * attention biases (qwen2, gpt2, starcoder2, stablelm, llama's optional
 * ones), q/k norms (qwen3), the row order of fused Q/K/V and gate/up (phi3,
 * gpt2, falcon), the embedding scale (gemma, gemma2), post-norms, both
 * soft-caps, the window on even layers only and the query scale of head_dim
 * (gemma2), learned positions (gpt2), GELU for SiLU and back, partial rotary
 * (stablelm), parallel against sequential blocks (falcon, stablelm with and
 * without ffn_norm), the pair layout, the window itself (mistral, gemma2).
 * test_model_ref.c covers RoPE scaling and the loader. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "model_ref.h"

/* Gemma's head_dim differs from n_embd/n_head, as in the real models; gemma2's
 * 3 layers slide, attend fully, slide (4 would bring quantized weights near
 * their tolerance: the error grows with depth). */
/* clang-format off */
static const ref_case k_cases[] = {
    {.name = "llama", .arch = "llama", .opt = R(OUTPUT), .ab = AB(ROPE_MODE) | AB(ACT)},
    {.name = "llama_bias", .arch = "llama", .opt = R(OUTPUT) | ATTN_BIASES | R(ATTN_OUT_B),
     .types = T_F32 | T_Q8, .ab = AB(BIAS)},
    {.name = "mistral_window", .arch = "mistral", .opt = R(OUTPUT), .window = 7, .block_size = 4,
     .ab = AB(WINDOW)},
    {.name = "qwen2", .arch = "qwen2", .freq_base = 1e6f, .opt = R(OUTPUT), .ab = AB(BIAS) | AB(ROPE_MODE)},
    {.name = "qwen3", .arch = "qwen3", .freq_base = 1e6f, .opt = R(OUTPUT), .ab = AB(QK_NORM) | AB(ROPE_MODE)},
    {.name = "phi3", .arch = "phi3", .ab = AB(FUSED_ORDER) | AB(ROPE_MODE)},
    {.name = "gemma", .arch = "gemma", .Hkv = 1, .hd = 32, .ab = AB(EMBD_SCALE) | AB(ACT) | AB(ROPE_MODE)},
    {.name = "gemma2", .arch = "gemma2", .hd = 32, .L = 3, .window = 6, .block_size = 4, .attn_softcap = 1.5f,
     .final_softcap = 2.5f,
     .ab = AB(POST_NORMS) | AB(ATTN_SOFTCAP) | AB(FINAL_SOFTCAP) | AB(WINDOW_ALL) | AB(WINDOW) | AB(QSCALE) |
           AB(ACT) | AB(EMBD_SCALE)},
    {.name = "gpt2", .arch = "gpt2", .Hkv = 4, .ab = AB(POS_EMBD) | AB(ACT) | AB(FUSED_ORDER) | AB(BIAS)},
    {.name = "starcoder2", .arch = "starcoder2",
     .opt = R(OUTPUT) | ATTN_BIASES | R(ATTN_OUT_B) | R(FFN_UP_B) | R(FFN_DOWN_B),
     .ab = AB(ACT) | AB(BIAS) | AB(ROPE_MODE)},
    {.name = "stablelm", .arch = "stablelm", .n_rot = 4, .opt = ATTN_BIASES | R(FFN_NORM) | R(FFN_NORM_B),
     .ab = AB(N_ROT) | AB(PARALLEL) | AB(BIAS)},
    {.name = "stablelm_parallel", .arch = "stablelm", .n_rot = 4, .ab = AB(PARALLEL) | AB(N_ROT)},
    {.name = "falcon", .arch = "falcon", .Hkv = 1, .ab = AB(PARALLEL) | AB(ACT) | AB(FUSED_ORDER)},
};
/* clang-format on */

int main(void) {
    return ref_run("arch_ref", k_cases, IX_ARRAY_LEN(k_cases), NULL, 0);
}
