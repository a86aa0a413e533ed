"""ctypes mirrors of the C structs the bindings pass across (include/inferx/*.h).

tests/python/test_inferx.py compares every size and field offset here with the
compiler's (tests/py_abi.c), so a header change that is not mirrored fails
the tests instead of corrupting memory.
"""
import ctypes as C

MAX_SEQS = 16  # IX_SCHED_MAX_SEQS
MAX_LOGPROBS = 20  # IX_SAMPLE_MAX_LOGPROBS
ERRMSG_MAX = 512  # IX_ERRMSG_MAX
STEP_TOKEN_BUCKETS = 13  # IX_ENGINE_STEP_TOKEN_BUCKETS
SPEC_MAX_K = 8  # IX_SPEC_MAX_K

token_t = C.c_int32


class ErrBuf(C.Structure):
    _fields_ = [("msg", C.c_char * ERRMSG_MAX)]


class TokenVec(C.Structure):
    _fields_ = [("ids", C.POINTER(token_t)), ("n", C.c_size_t), ("cap", C.c_size_t)]


class Buf(C.Structure):
    _fields_ = [("data", C.c_void_p), ("len", C.c_size_t), ("cap", C.c_size_t)]


class Str(C.Structure):
    _fields_ = [("ptr", C.c_void_p), ("len", C.c_size_t)]


class LogitBias(C.Structure):
    _fields_ = [("id", token_t), ("bias", C.c_float)]


class SampleParams(C.Structure):
    _fields_ = [
        ("temperature", C.c_float),
        ("top_k", C.c_int32),
        ("top_p", C.c_float),
        ("min_p", C.c_float),
        ("repetition_penalty", C.c_float),
        ("presence_penalty", C.c_float),
        ("frequency_penalty", C.c_float),
        ("seed", C.c_uint64),
        ("logit_bias", C.POINTER(LogitBias)),
        ("n_logit_bias", C.c_size_t),
        ("logprobs", C.c_bool),
        ("n_logprobs", C.c_int32),
    ]


class SampleResult(C.Structure):
    _fields_ = [
        ("id", token_t),
        ("logprob", C.c_float),
        ("n_top", C.c_int32),
        ("top_ids", token_t * MAX_LOGPROBS),
        ("top_logprobs", C.c_float * MAX_LOGPROBS),
    ]


class Usage(C.Structure):
    _fields_ = [("prompt_tokens", C.c_int32), ("cached_prompt_tokens", C.c_int32), ("completion_tokens", C.c_int32)]


class Timings(C.Structure):
    _fields_ = [
        ("queue_ms", C.c_double),
        ("prefill_ms", C.c_double),
        ("first_token_ms", C.c_double),
        ("total_ms", C.c_double),
        ("compute_ms", C.c_double),
    ]


class FinishInfo(C.Structure):
    _fields_ = [
        ("id", C.c_uint64),
        ("n_choices", C.c_int32),
        ("reasons", C.c_int * MAX_SEQS),
        ("reason", C.c_int),
        ("usage", Usage),
        ("timings", Timings),
        ("deadline_missed", C.c_bool),
        ("n_preemptions", C.c_int32),
        ("message", C.c_char * 256),
        ("invalid_request", C.c_bool),
    ]


class TokenEvent(C.Structure):
    _fields_ = [
        ("id", C.c_uint64),
        ("choice", C.c_int32),
        ("token", token_t),
        ("text", C.c_void_p),
        ("text_len", C.c_size_t),
        ("sample", C.POINTER(SampleResult)),
    ]


ON_TOKEN = C.CFUNCTYPE(None, C.c_void_p, C.POINTER(TokenEvent))
ON_FINISH = C.CFUNCTYPE(None, C.c_void_p, C.POINTER(FinishInfo))


class RequestCallbacks(C.Structure):
    _fields_ = [("on_token", ON_TOKEN), ("on_finish", ON_FINISH), ("user", C.c_void_p),
                ("on_prefill", C.c_void_p)]  # optional; the bindings leave it NULL


class Constraint(C.Structure):
    _fields_ = [("kind", C.c_int), ("text", C.c_char_p), ("len", C.c_size_t), ("flags", C.c_uint)]


CONSTRAINT_GRAMMAR, CONSTRAINT_JSON_SCHEMA, CONSTRAINT_JSON_OBJECT = 1, 2, 3


class RequestParams(C.Structure):
    _fields_ = [
        ("prompt", C.POINTER(token_t)),
        ("n_prompt", C.c_size_t),
        ("sample", SampleParams),
        ("max_tokens", C.c_int32),
        ("stop", C.POINTER(C.c_char_p)),
        ("n_stop", C.c_size_t),
        ("stop_token_ids", C.POINTER(token_t)),
        ("n_stop_token_ids", C.c_size_t),
        ("ignore_eos", C.c_bool),
        ("priority", C.c_int32),
        ("deadline_ms", C.c_int64),
        ("cache_ns", C.c_uint64),
        ("n", C.c_int32),
        ("constraint", Constraint),
        ("cb", RequestCallbacks),
        ("no_spec", C.c_bool),
        ("session_id", C.c_uint64),
        ("session_tenant", C.c_uint64),
        ("session_expires_ms", C.c_int64),
    ]


class SchedParams(C.Structure):
    _fields_ = [
        ("policy", C.c_int),
        ("preempt", C.c_int),
        ("max_num_seqs", C.c_int32),
        ("max_num_batched_tokens", C.c_int32),
        ("target_step_ms", C.c_double),
    ]


class SpecParams(C.Structure):
    _fields_ = [
        ("kind", C.c_int),
        ("k", C.c_int32),
        ("ngram_max", C.c_int32),
        ("ngram_min", C.c_int32),
        ("adaptive", C.c_bool),
        ("draft_model", C.c_char_p),
        ("draft_kv_mem_bytes", C.c_size_t),
        ("medusa_heads", C.c_char_p),
    ]
# ix_kv_dtype (inferx/core.h): the names of its values, in enum order.
KV_DTYPES = ("f32", "f16", "bf16", "q8_0", "fp8_e4m3", "q4_0")


class EngineParams(C.Structure):
    _fields_ = [
        ("sched", SchedParams),
        ("kv_dtype", C.c_int),
        ("kv_mem_bytes", C.c_size_t),
        ("kv_blocks", C.c_int64),
        ("kv_block_size", C.c_int32),
        ("kv_swap_blocks", C.c_int64),
        ("enable_prefix_cache", C.c_bool),
        ("n_threads", C.c_int32),
        ("n_ctx", C.c_int32),
        ("start_thread", C.c_bool),
        ("kv_disk_dir", C.c_char_p),
        ("kv_disk_max_bytes", C.c_uint64),
        ("spec", SpecParams),
    ]


class KvStats(C.Structure):
    _fields_ = [
        ("n_blocks_total", C.c_int64),
        ("n_blocks_used", C.c_int64),
        ("n_blocks_cached", C.c_int64),
        ("n_blocks_evictable", C.c_int64),
        ("n_blocks_free", C.c_int64),
        ("n_slots_used", C.c_int64),
        ("n_slots_allocated", C.c_int64),
        ("utilization", C.c_double),
        ("n_seqs", C.c_int64),
        ("n_seqs_swapped", C.c_int64),
        ("prefix_queried_tokens", C.c_int64),
        ("prefix_hit_tokens", C.c_int64),
        ("n_forks", C.c_int64),
        ("n_cow_copies", C.c_int64),
        ("n_evictions", C.c_int64),
        ("n_swap_blocks_total", C.c_int64),
        ("n_swap_blocks_used", C.c_int64),
        ("n_blocks_swapped_out", C.c_int64),
        ("n_blocks_swapped_in", C.c_int64),
        ("pool_bytes", C.c_size_t),
        ("swap_bytes", C.c_size_t),
    ]


class ModelProfile(C.Structure):
    _fields_ = [
        ("n_forward", C.c_uint64),
        ("n_tokens", C.c_uint64),
        ("n_logits", C.c_uint64),
        ("matmul_ns", C.c_uint64),
        ("attention_ns", C.c_uint64),
        ("rows_ns", C.c_uint64),
        ("output_ns", C.c_uint64),
    ]


class EngineStats(C.Structure):
    _fields_ = [
        ("n_waiting", C.c_int32),
        ("n_running", C.c_int32),
        ("n_swapped", C.c_int32),
        ("n_steps", C.c_uint64),
        ("n_finished", C.c_uint64),
        ("n_prompt_tokens", C.c_uint64),
        ("n_cached_prompt_tokens", C.c_uint64),
        ("n_generated_tokens", C.c_uint64),
        ("n_preempt_recompute", C.c_uint64),
        ("n_preempt_swap", C.c_uint64),
        ("n_deadline_shed", C.c_uint64),
        ("n_deadline_missed", C.c_uint64),
        ("step_budget", C.c_int32),
        ("step_cost_fixed_ms", C.c_double),
        ("step_cost_per_token_ms", C.c_double),
        ("plan_ns", C.c_uint64),
        ("forward_ns", C.c_uint64),
        ("sample_ns", C.c_uint64),
        ("step_tokens", C.c_uint64 * (STEP_TOKEN_BUCKETS + 1)),
        ("step_tokens_sum", C.c_uint64),
        ("spec_n_drafts", C.c_uint64),
        ("spec_n_draft_tokens", C.c_uint64),
        ("spec_n_accepted_tokens", C.c_uint64),
        ("spec_accepted_per_pos", C.c_uint64 * SPEC_MAX_K),
        ("spec_draft_seqs", C.c_int64),
        ("spec_draft_blocks_used", C.c_int64),
        ("spec_draft_blocks_total", C.c_int64),
        ("spec_draft_forward_ns", C.c_uint64),
        ("forward", ModelProfile),
        ("kv", KvStats),
    ]


class Generation(C.Structure):
    _fields_ = [("info", FinishInfo), ("tokens", TokenVec * MAX_SEQS), ("text", Buf * MAX_SEQS)]


# name -> (struct, C type name): what tests/py_abi.c reports
MIRRORED = {
    "ix_errbuf": ErrBuf,
    "ix_token_vec": TokenVec,
    "ix_buf": Buf,
    "ix_str": Str,
    "ix_logit_bias": LogitBias,
    "ix_sample_params": SampleParams,
    "ix_sample_result": SampleResult,
    "ix_usage": Usage,
    "ix_timings": Timings,
    "ix_finish_info": FinishInfo,
    "ix_token_event": TokenEvent,
    "ix_request_callbacks": RequestCallbacks,
    "ix_constraint": Constraint,
    "ix_request_params": RequestParams,
    "ix_sched_params": SchedParams,
    "ix_spec_params": SpecParams,
    "ix_engine_params": EngineParams,
    "ix_kv_stats": KvStats,
    "ix_model_profile": ModelProfile,
    "ix_engine_stats": EngineStats,
    "ix_generation": Generation,
}
