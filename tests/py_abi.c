/* Prints the size and field offsets of every struct the Python bindings
 * mirror (python/inferx/_abi.py), as one JSON object, for
 * tests/python/test_inferx.py to compare against ctypes' layout. */
#include <stddef.h>
#include <stdio.h>

#include "inferx/engine.h"

static int first_struct = 1, first_field;

#define S(type)                                                                                                        \
    printf("%s\n  \"%s\": {\"size\": %zu, \"fields\": {", first_struct ? "{" : ",", #type, sizeof(type)),          \
        first_struct = 0, first_field = 1
#define F(type, field) printf("%s\"%s\": %zu", first_field ? "" : ", ", #field, offsetof(type, field)), first_field = 0
#define E() printf("}}")

int main(void) {
    S(ix_errbuf), F(ix_errbuf, msg), E();
    S(ix_token_vec), F(ix_token_vec, ids), F(ix_token_vec, n), F(ix_token_vec, cap), E();
    S(ix_buf), F(ix_buf, data), F(ix_buf, len), F(ix_buf, cap), E();
    S(ix_str), F(ix_str, ptr), F(ix_str, len), E();
    S(ix_logit_bias), F(ix_logit_bias, id), F(ix_logit_bias, bias), E();
    S(ix_sample_params), F(ix_sample_params, temperature), F(ix_sample_params, top_k), F(ix_sample_params, top_p),
        F(ix_sample_params, min_p), F(ix_sample_params, repetition_penalty), F(ix_sample_params, presence_penalty),
        F(ix_sample_params, frequency_penalty), F(ix_sample_params, seed), F(ix_sample_params, logit_bias),
        F(ix_sample_params, n_logit_bias), F(ix_sample_params, logprobs), F(ix_sample_params, n_logprobs), E();
    S(ix_sample_result), F(ix_sample_result, id), F(ix_sample_result, logprob), F(ix_sample_result, n_top),
        F(ix_sample_result, top_ids), F(ix_sample_result, top_logprobs), E();
    S(ix_usage), F(ix_usage, prompt_tokens), F(ix_usage, cached_prompt_tokens), F(ix_usage, completion_tokens), E();
    S(ix_timings), F(ix_timings, queue_ms), F(ix_timings, prefill_ms), F(ix_timings, first_token_ms),
        F(ix_timings, total_ms), F(ix_timings, compute_ms), E();
    S(ix_finish_info), F(ix_finish_info, id), F(ix_finish_info, n_choices), F(ix_finish_info, reasons),
        F(ix_finish_info, reason), F(ix_finish_info, usage), F(ix_finish_info, timings),
        F(ix_finish_info, deadline_missed), F(ix_finish_info, n_preemptions), F(ix_finish_info, message),
        F(ix_finish_info, invalid_request), E();
    S(ix_token_event), F(ix_token_event, id), F(ix_token_event, choice), F(ix_token_event, token),
        F(ix_token_event, text), F(ix_token_event, text_len), F(ix_token_event, sample), E();
    S(ix_request_callbacks), F(ix_request_callbacks, on_token), F(ix_request_callbacks, on_finish),
        F(ix_request_callbacks, user), F(ix_request_callbacks, on_prefill), E();
    S(ix_constraint), F(ix_constraint, kind), F(ix_constraint, text), F(ix_constraint, len), F(ix_constraint, flags),
        E();
    S(ix_request_params), F(ix_request_params, prompt), F(ix_request_params, n_prompt), F(ix_request_params, sample),
        F(ix_request_params, max_tokens), F(ix_request_params, stop), F(ix_request_params, n_stop),
        F(ix_request_params, stop_token_ids), F(ix_request_params, n_stop_token_ids), F(ix_request_params, ignore_eos),
        F(ix_request_params, priority), F(ix_request_params, deadline_ms), F(ix_request_params, cache_ns),
        F(ix_request_params, n), F(ix_request_params, constraint), F(ix_request_params, cb),
        F(ix_request_params, no_spec), F(ix_request_params, session_id), F(ix_request_params, session_tenant),
        F(ix_request_params, session_expires_ms), E();
    S(ix_spec_params), F(ix_spec_params, kind), F(ix_spec_params, k), F(ix_spec_params, ngram_max),
        F(ix_spec_params, ngram_min), F(ix_spec_params, adaptive), F(ix_spec_params, draft_model),
        F(ix_spec_params, draft_kv_mem_bytes), F(ix_spec_params, medusa_heads), E();
    S(ix_sched_params), F(ix_sched_params, policy), F(ix_sched_params, preempt), F(ix_sched_params, max_num_seqs),
        F(ix_sched_params, max_num_batched_tokens), F(ix_sched_params, target_step_ms), E();
    S(ix_model_profile), F(ix_model_profile, n_forward), F(ix_model_profile, n_tokens), F(ix_model_profile, n_logits),
        F(ix_model_profile, matmul_ns), F(ix_model_profile, attention_ns), F(ix_model_profile, rows_ns),
        F(ix_model_profile, output_ns), E();
    S(ix_engine_params), F(ix_engine_params, sched), F(ix_engine_params, kv_dtype), F(ix_engine_params, kv_mem_bytes),
        F(ix_engine_params, kv_blocks), F(ix_engine_params, kv_block_size), F(ix_engine_params, kv_swap_blocks),
        F(ix_engine_params, enable_prefix_cache), F(ix_engine_params, n_threads), F(ix_engine_params, n_ctx),
        F(ix_engine_params, start_thread), F(ix_engine_params, kv_disk_dir), F(ix_engine_params, kv_disk_max_bytes),
        F(ix_engine_params, spec), E();
    S(ix_kv_stats), F(ix_kv_stats, n_blocks_total), F(ix_kv_stats, n_blocks_used), F(ix_kv_stats, n_blocks_cached),
        F(ix_kv_stats, n_blocks_evictable), F(ix_kv_stats, n_blocks_free), F(ix_kv_stats, n_slots_used),
        F(ix_kv_stats, n_slots_allocated), F(ix_kv_stats, utilization), F(ix_kv_stats, n_seqs),
        F(ix_kv_stats, n_seqs_swapped), F(ix_kv_stats, prefix_queried_tokens), F(ix_kv_stats, prefix_hit_tokens),
        F(ix_kv_stats, n_forks), F(ix_kv_stats, n_cow_copies), F(ix_kv_stats, n_evictions),
        F(ix_kv_stats, n_swap_blocks_total), F(ix_kv_stats, n_swap_blocks_used), F(ix_kv_stats, n_blocks_swapped_out),
        F(ix_kv_stats, n_blocks_swapped_in), F(ix_kv_stats, pool_bytes), F(ix_kv_stats, swap_bytes), E();
    S(ix_engine_stats), F(ix_engine_stats, n_waiting), F(ix_engine_stats, n_running), F(ix_engine_stats, n_swapped),
        F(ix_engine_stats, n_steps), F(ix_engine_stats, n_finished), F(ix_engine_stats, n_prompt_tokens),
        F(ix_engine_stats, n_cached_prompt_tokens), F(ix_engine_stats, n_generated_tokens),
        F(ix_engine_stats, n_preempt_recompute), F(ix_engine_stats, n_preempt_swap),
        F(ix_engine_stats, n_deadline_shed), F(ix_engine_stats, n_deadline_missed), F(ix_engine_stats, step_budget),
        F(ix_engine_stats, step_cost_fixed_ms), F(ix_engine_stats, step_cost_per_token_ms), F(ix_engine_stats, plan_ns),
        F(ix_engine_stats, forward_ns), F(ix_engine_stats, sample_ns), F(ix_engine_stats, step_tokens),
        F(ix_engine_stats, step_tokens_sum), F(ix_engine_stats, spec_n_drafts),
        F(ix_engine_stats, spec_n_draft_tokens), F(ix_engine_stats, spec_n_accepted_tokens),
        F(ix_engine_stats, spec_accepted_per_pos), F(ix_engine_stats, spec_draft_seqs),
        F(ix_engine_stats, spec_draft_blocks_used), F(ix_engine_stats, spec_draft_blocks_total),
        F(ix_engine_stats, spec_draft_forward_ns), F(ix_engine_stats, forward),
        F(ix_engine_stats, kv), E();
    S(ix_generation), F(ix_generation, info), F(ix_generation, tokens), F(ix_generation, text), E();
    printf("\n}\n");
    return 0;
}
