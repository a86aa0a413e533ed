"""Python bindings of inferx (ctypes over libinferx.so; standard library only).

    import inferx
    model = inferx.Model("models/target-f16.gguf")
    ids = model.tokenize("It was on this point that she had")
    with inferx.Engine(model) as engine:
        for piece in engine.stream("It was on this point that she had", max_tokens=32):
            print(piece, end="", flush=True)
        results = engine.generate(["First prompt", "Second prompt"], max_tokens=16, temperature=0)
        print(engine.stats()["kv"]["prefix_hit_tokens"])

The library is found through INFERX_LIBRARY (a path), then the dynamic
loader's search (an installed libinferx.so.0, LD_LIBRARY_PATH), then the
build/lib folder of the source tree this package sits in.
"""
import ctypes as C
import json
import os
import queue
import threading

from . import _abi as A

__all__ = ["Model", "Engine", "Completion", "InferxError", "library"]
__version__ = "0.1.0"

FINISH_REASONS = {0: None, 1: "stop", 2: "length", 3: "abort", 4: "error", 5: "deadline"}


class InferxError(RuntimeError):
    """A call into libinferx failed; the message is the library's."""


def _load_library():
    tried = []
    env = os.environ.get("INFERX_LIBRARY")
    candidates = [env] if env else []
    candidates.append("libinferx.so.0")
    here = os.path.dirname(os.path.abspath(__file__))
    candidates.append(os.path.join(here, "..", "..", "build", "lib", "libinferx.so.0"))
    for c in candidates:
        try:
            return C.CDLL(c)
        except OSError as e:
            tried.append(f"{c}: {e}")
    raise InferxError("libinferx.so not found (set INFERX_LIBRARY):\n  " + "\n  ".join(tried))


_lib = None
_lib_lock = threading.Lock()


def library():
    """The loaded libinferx (ctypes.CDLL), with argument types declared."""
    global _lib
    with _lib_lock:
        if _lib is None:
            _lib = _declare(_load_library())
        return _lib


def _declare(L):
    P, vp, st, i32, sz = C.POINTER, C.c_void_p, C.c_int, C.c_int32, C.c_size_t
    sig = {
        "ix_status_str": (C.c_char_p, [st]),
        "ix_model_load": (st, [P(vp), C.c_char_p, P(A.ErrBuf)]),
        "ix_model_destroy": (None, [vp]),
        "ix_model_tokenizer": (vp, [vp]),
        "ix_model_n_params": (C.c_uint64, [vp]),
        "ix_model_weight_bytes": (C.c_uint64, [vp]),
        "ix_tokenizer_encode": (st, [vp, C.c_char_p, sz, C.c_uint, P(A.TokenVec), P(A.ErrBuf)]),
        "ix_tokenizer_decode": (st, [vp, P(A.token_t), sz, C.c_uint, P(A.Buf), P(A.ErrBuf)]),
        "ix_tokenizer_n_vocab": (i32, [vp]),
        "ix_tokenizer_bos": (i32, [vp]),
        "ix_tokenizer_eos": (i32, [vp]),
        "ix_tokenizer_piece": (A.Str, [vp, i32]),
        "ix_token_vec_free": (None, [P(A.TokenVec)]),
        "ix_buf_free": (None, [P(A.Buf)]),
        "ix_engine_default_params": (A.EngineParams, []),
        "ix_request_default_params": (A.RequestParams, []),
        "ix_engine_create": (st, [P(vp), vp, P(A.EngineParams), P(A.ErrBuf)]),
        "ix_engine_destroy": (None, [vp]),
        "ix_engine_submit": (st, [vp, P(A.RequestParams), P(C.c_uint64), P(A.ErrBuf)]),
        "ix_engine_cancel": (None, [vp, C.c_uint64]),
        "ix_engine_get_stats": (None, [vp, P(A.EngineStats)]),
        "ix_engine_generate": (st, [vp, P(A.RequestParams), sz, P(A.Generation), P(A.ErrBuf)]),
        "ix_generation_free": (None, [P(A.Generation)]),
    }
    for name, (res, args) in sig.items():
        f = getattr(L, name)
        f.restype, f.argtypes = res, args
    return L


def _struct_dict(s):
    out = {}
    for name, _ in s._fields_:
        v = getattr(s, name)
        out[name] = _struct_dict(v) if isinstance(v, C.Structure) else v
    return out


class _Handle:
    """A C object owned by Python: closed by close(), by a with block's end,
    or when collected."""

    _h = None
    _kind = "object"

    def _destroy(self, h):
        raise NotImplementedError

    def close(self):
        if self._h:
            self._destroy(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self):
        if not self._h:
            raise InferxError(f"the {self._kind} is closed")
        return self._h


class Model(_Handle):
    """A GGUF model, loaded (weights mapped and packed) once; any number of
    engines may share it. Closing it while an engine uses it is an error."""

    def __init__(self, path):
        L = library()
        self._h = C.c_void_p()
        err = A.ErrBuf()
        st = L.ix_model_load(C.byref(self._h), os.fsencode(path), C.byref(err))
        if st != 0:
            self._h = None
            raise InferxError(f"{path}: {err.msg.decode(errors='replace')}")
        self._tok = L.ix_model_tokenizer(self._h)
        self.path = str(path)

    _kind = "model"

    def _destroy(self, h):
        library().ix_model_destroy(h)

    @property
    def n_vocab(self):
        self._handle()
        return library().ix_tokenizer_n_vocab(self._tok)

    @property
    def n_params(self):
        return library().ix_model_n_params(self._handle())

    @property
    def weight_bytes(self):
        return library().ix_model_weight_bytes(self._handle())

    def tokenize(self, text, add_special=True, parse_special=False):
        """Token ids of text (BOS added as the vocabulary says when add_special)."""
        self._handle()
        data = text.encode() if isinstance(text, str) else bytes(text)
        v, err = A.TokenVec(), A.ErrBuf()
        flags = (1 if add_special else 0) | (2 if parse_special else 0)
        L = library()
        try:
            if L.ix_tokenizer_encode(self._tok, data, len(data), flags, C.byref(v), C.byref(err)) != 0:
                raise InferxError(err.msg.decode(errors="replace"))
            return [v.ids[i] for i in range(v.n)]
        finally:
            L.ix_token_vec_free(C.byref(v))

    def detokenize(self, ids, render_special=False):
        """The text of token ids (invalid UTF-8 replaced)."""
        self._handle()
        arr = (A.token_t * len(ids))(*ids)
        b, err = A.Buf(), A.ErrBuf()
        L = library()
        try:
            if L.ix_tokenizer_decode(self._tok, arr, len(ids), 1 if render_special else 0, C.byref(b),
                                     C.byref(err)) != 0:
                raise InferxError(err.msg.decode(errors="replace"))
            return C.string_at(b.data, b.len).decode(errors="replace") if b.len else ""
        finally:
            L.ix_buf_free(C.byref(b))

    def piece(self, token_id):
        """The vocabulary's piece of one id (as stored: '▁' for SPM spaces)."""
        self._handle()
        s = library().ix_tokenizer_piece(self._tok, token_id)
        return C.string_at(s.ptr, s.len).decode(errors="replace") if s.len else ""


class Completion:
    """One finished request: the text and token ids of each choice, why each
    finished, token counts and timings (ms)."""

    def __init__(self, texts, tokens, info):
        self.texts = texts
        self.tokens = tokens
        self.finish_reasons = [FINISH_REASONS.get(info.reasons[c]) for c in range(info.n_choices)]
        self.usage = _struct_dict(info.usage)
        self.timings = _struct_dict(info.timings)
        self.error = info.message.decode(errors="replace") if info.reason == 4 else None

    @property
    def text(self):
        return self.texts[0]

    def __repr__(self):
        return f"Completion(text={self.text!r}, finish_reason={self.finish_reasons[0]!r}, usage={self.usage})"


_SAMPLING = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
             "frequency_penalty", "seed")


class Engine(_Handle):
    """Continuous batching over one model: a thread of its own that batches
    every request submitted from any Python thread."""

    def __init__(self, model, kv_mem_mb=256, max_num_seqs=None, max_num_batched_tokens=None, target_step_ms=None,
                 n_threads=0, n_ctx=0, prefix_cache=True, spec=None, spec_k=None, kv_cache_dtype="f16", draft_model=None,
                 medusa=None):
        L = library()
        p = L.ix_engine_default_params()
        if draft_model:  # a draft GGUF with the model's vocabulary; implies spec="draft"
            self._draft_path = os.fsencode(draft_model)  # outlives the engine's copy of the pointer
            p.spec.draft_model = self._draft_path
            spec = spec or "draft"
        if medusa:  # a heads file of `inferx medusa-train` for this model; implies spec="medusa"
            self._medusa_path = os.fsencode(medusa)
            p.spec.medusa_heads = self._medusa_path
            spec = spec or "medusa"
        if spec:  # speculative decoding: "ngram", "draft" or "medusa" (docs/speculative.md)
            kinds = {"none": 0, "ngram": 1, "draft": 2, "medusa": 3}
            if spec not in kinds:
                raise ValueError("spec must be one of %s" % ", ".join(kinds))
            p.spec.kind = kinds[spec]
        if spec_k:
            p.spec.k = spec_k
        p.kv_mem_bytes = int(kv_mem_mb) << 20
        if kv_cache_dtype not in A.KV_DTYPES:
            raise InferxError("kv_cache_dtype must be one of %s, not %r" % (", ".join(A.KV_DTYPES), kv_cache_dtype))
        p.kv_dtype = A.KV_DTYPES.index(kv_cache_dtype)
        if max_num_seqs:
            p.sched.max_num_seqs = max_num_seqs
        if max_num_batched_tokens:
            p.sched.max_num_batched_tokens = max_num_batched_tokens
        if target_step_ms is not None:
            p.sched.target_step_ms = float(target_step_ms)
        p.n_threads, p.n_ctx, p.enable_prefix_cache = n_threads, n_ctx, bool(prefix_cache)
        self.model = model
        self._h = C.c_void_p()
        err = A.ErrBuf()
        if L.ix_engine_create(C.byref(self._h), model._handle(), C.byref(p), C.byref(err)) != 0:
            self._h = None
            raise InferxError(err.msg.decode(errors="replace"))

    _kind = "engine"

    def _destroy(self, h):
        """Stops the engine thread; requests in flight finish with 'abort'."""
        library().ix_engine_destroy(h)

    def _request(self, prompt, keep, max_tokens=128, stop=None, n=1, priority=0, ignore_eos=False, json_schema=None,
                 json_object=False, grammar=None, speculative=True, **sampling):
        """Fills a request (keep collects the ctypes buffers it points to)."""
        if sum(x is not None and x is not False for x in (json_schema, grammar, json_object)) > 1:
            raise TypeError("json_schema, json_object and grammar exclude each other")
        for k in sampling:
            if k not in _SAMPLING:
                raise TypeError(f"unknown sampling parameter {k!r}")
        ids = prompt if isinstance(prompt, (list, tuple)) else self.model.tokenize(prompt)
        r = library().ix_request_default_params()
        arr = (A.token_t * len(ids))(*ids)
        keep.append(arr)
        r.prompt, r.n_prompt = arr, len(ids)
        r.max_tokens, r.n, r.priority, r.ignore_eos = max_tokens, n, priority, ignore_eos
        r.no_spec = not speculative
        for k, v in sampling.items():
            setattr(r.sample, k, v)
        if json_schema is not None or grammar is not None or json_object:
            if grammar is not None:
                kind, text = A.CONSTRAINT_GRAMMAR, grammar.encode()
            elif json_schema is not None:
                schema = json_schema if isinstance(json_schema, str) else json.dumps(json_schema)
                kind, text = A.CONSTRAINT_JSON_SCHEMA, schema.encode()
            else:
                kind, text = A.CONSTRAINT_JSON_OBJECT, b""
            buf = C.create_string_buffer(text, len(text) + 1)
            keep.append(buf)
            r.constraint.kind, r.constraint.len = kind, len(text)
            r.constraint.text = C.cast(buf, C.c_char_p)
        if stop:
            stops = [stop] if isinstance(stop, str) else list(stop)
            sarr = (C.c_char_p * len(stops))(*[s.encode() for s in stops])
            keep.append(sarr)
            r.stop, r.n_stop = sarr, len(stops)
        return r

    def generate(self, prompts, **kw):
        """Runs every prompt (a string or token ids; a list of them) through
        the engine at once (continuous batching) and returns a Completion per
        prompt (one, for a single prompt). Keyword arguments: max_tokens,
        stop, n, priority, ignore_eos, speculative (False opts out of the
        engine's spec); json_schema (a dict or JSON text),
        json_object=True or grammar (GBNF text, docs/grammar.md) to constrain
        the output; and the sampling parameters
        temperature, top_k, top_p, min_p, repetition_penalty,
        presence_penalty, frequency_penalty, seed."""
        single = isinstance(prompts, str) or (prompts and isinstance(prompts[0], int))
        plist = [prompts] if single else list(prompts)
        if not plist:
            return []
        keep = []
        reqs = (A.RequestParams * len(plist))(*[self._request(p, keep, **kw) for p in plist])
        gens = (A.Generation * len(plist))()
        err = A.ErrBuf()
        L = library()
        if L.ix_engine_generate(self._handle(), reqs, len(plist), gens, C.byref(err)) != 0:
            raise InferxError(err.msg.decode(errors="replace"))
        out = []
        try:
            for g in gens:
                nc = max(1, g.info.n_choices)
                texts = [C.string_at(g.text[c].data, g.text[c].len).decode(errors="replace") if g.text[c].len
                         else "" for c in range(nc)]
                toks = [[g.tokens[c].ids[i] for i in range(g.tokens[c].n)] for c in range(nc)]
                out.append(Completion(texts, toks, g.info))
        finally:
            for g in gens:
                L.ix_generation_free(C.byref(g))
        return out[0] if single else out

    def stream(self, prompt, **kw):
        """Yields the text of one request as it is generated (choice 0). The
        Completion is available as the generator's return value (and in
        .last after it ends). Closing the generator early cancels the
        request."""
        keep = []
        r = self._request(prompt, keep, **kw)
        q = queue.SimpleQueue()

        def on_token(_user, ev):
            e = ev.contents
            if e.choice == 0 and e.text_len:
                q.put(("text", C.string_at(e.text, e.text_len)))

        def on_finish(_user, info):
            q.put(("done", Completion([""] * max(1, info.contents.n_choices), [], info.contents)))

        cbs = (A.ON_TOKEN(on_token), A.ON_FINISH(on_finish))
        r.cb.on_token, r.cb.on_finish = cbs
        rid, err = C.c_uint64(), A.ErrBuf()
        if library().ix_engine_submit(self._handle(), C.byref(r), C.byref(rid), C.byref(err)) != 0:
            raise InferxError(err.msg.decode(errors="replace"))
        return self._drain(q, rid.value, cbs, keep)

    def _drain(self, q, rid, cbs, keep):
        pending = b""
        text = []
        finished = False
        try:
            while True:
                kind, v = q.get()
                if kind == "done":
                    finished = True
                    v.texts[0] = "".join(text)
                    self.last = v
                    return v
                pending += v
                try:
                    s, pending = pending.decode(), b""
                except UnicodeDecodeError:
                    continue  # the engine emits whole characters; keep bytes until they decode
                text.append(s)
                yield s
        finally:
            if not finished and self._h:
                library().ix_engine_cancel(self._h, rid)
                while q.get()[0] != "done":  # the callbacks must not outlive their ctypes objects
                    pass
            del cbs, keep

    def cancel(self, request_id):
        library().ix_engine_cancel(self._handle(), request_id)

    def stats(self):
        """The engine's counters and its KV cache's (a dict of the C struct)."""
        s = A.EngineStats()
        library().ix_engine_get_stats(self._handle(), C.byref(s))
        return _struct_dict(s)
