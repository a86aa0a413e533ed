"""Tests of the Python bindings (python/inferx) against the library built in
this tree. Environment (set by tests/CMakeLists.txt): INFERX_LIBRARY (the
shared object), PY_ABI (tests/py_abi.c's binary), INFERX_MODEL, INFERX_BIN
(the inferx binary, for cross-checks)."""
import json
import os
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import inferx  # noqa: E402
from inferx import _abi  # noqa: E402

MODEL = os.environ.get("INFERX_MODEL", os.path.join(HERE, "..", "..", "models", "target-f16.gguf"))
PROMPT = "It was on this point that she had"


class Abi(unittest.TestCase):
    def test_layout_matches_the_compiler(self):
        c = json.loads(subprocess.run([os.environ["PY_ABI"]], check=True, capture_output=True, text=True).stdout)
        self.assertEqual(set(c), set(_abi.MIRRORED), "structs mirrored vs reported")
        for name, st in _abi.MIRRORED.items():
            with self.subTest(struct=name):
                self.assertEqual(c[name]["size"], _abi.C.sizeof(st), f"sizeof({name})")
                py = {f: getattr(st, f).offset for f, _ in st._fields_}
                self.assertEqual(py, c[name]["fields"], f"fields and offsets of {name}")


class ModelTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = inferx.Model(MODEL)

    @classmethod
    def tearDownClass(cls):
        cls.model.close()

    def test_tokenize_matches_the_cli(self):
        text = "Hello, world! Héllo wörld — «quotes»\n\ttabs"
        ids = self.model.tokenize(text)
        out = subprocess.run([os.environ["INFERX_BIN"], "tokenize", "-m", MODEL], input=text, check=True,
                             capture_output=True, text=True).stdout
        self.assertEqual(ids, [int(t) for t in out.split()])
        self.assertEqual(self.model.detokenize(ids), text)
        self.assertEqual(self.model.tokenize("x", add_special=False)[0] != 1, True)

    def test_bad_path_raises(self):
        with self.assertRaises(inferx.InferxError) as cm:
            inferx.Model("/nonexistent/model.gguf")
        self.assertIn("/nonexistent/model.gguf", str(cm.exception))

    def test_generate_stream_and_batch_agree(self):
        with inferx.Engine(self.model, kv_mem_mb=32) as e:
            one = e.generate(PROMPT, max_tokens=24, temperature=0)
            self.assertEqual(one.finish_reasons, ["length"])
            self.assertEqual(one.usage["completion_tokens"], 24)
            self.assertEqual(len(one.tokens[0]), 24)
            prompt_ids = self.model.tokenize(PROMPT)
            self.assertTrue(self.model.detokenize(prompt_ids + one.tokens[0]).endswith(one.text))
            streamed = "".join(e.stream(PROMPT, max_tokens=24, temperature=0))
            self.assertEqual(streamed, one.text)
            self.assertEqual(e.last.usage["completion_tokens"], 24)
            prompts = [PROMPT, "Emma was", "The next morning"]
            batch = e.generate(prompts, max_tokens=12, temperature=0)
            singles = [e.generate(p, max_tokens=12, temperature=0) for p in prompts]
            self.assertEqual([b.text for b in batch], [s.text for s in singles])
            st = e.stats()
            self.assertEqual(st["n_finished"], 2 + 2 * len(prompts))
            self.assertGreater(st["kv"]["n_blocks_total"], 0)
            self.assertEqual(st["kv"]["n_seqs"], 0)

    def test_kv_cache_dtype(self):
        with inferx.Engine(self.model, kv_mem_mb=32) as e:
            f16 = e.generate(PROMPT, max_tokens=16, temperature=0).text
            f16_blocks = e.stats()["kv"]["n_blocks_total"]
        with inferx.Engine(self.model, kv_mem_mb=32, kv_cache_dtype="q8_0") as e:
            self.assertEqual(e.generate(PROMPT, max_tokens=16, temperature=0).text, f16)
            self.assertGreater(e.stats()["kv"]["n_blocks_total"], 1.8 * f16_blocks)
        with self.assertRaises(inferx.InferxError) as cm:
            inferx.Engine(self.model, kv_cache_dtype="q9")
        self.assertIn("q8_0", str(cm.exception))

    def test_greedy_matches_inferx_run(self):
        with inferx.Engine(self.model, kv_mem_mb=32) as e:
            text = e.generate(PROMPT, max_tokens=20, temperature=0).text
        out = subprocess.run([os.environ["INFERX_BIN"], "run", "-m", MODEL, "-p", PROMPT, "-n", "20", "--temp", "0"],
                             check=True, capture_output=True, text=True).stdout
        self.assertIn(text.strip(), out)

    def test_speculation_same_text(self):
        with inferx.Engine(self.model, kv_mem_mb=32) as e:
            ref = e.generate(PROMPT, max_tokens=24, temperature=0).text
        with inferx.Engine(self.model, kv_mem_mb=32, spec="ngram", spec_k=3) as e:
            self.assertEqual(e.generate(PROMPT, max_tokens=24, temperature=0).text, ref)
            self.assertEqual(e.generate(PROMPT, max_tokens=24, temperature=0, speculative=False).text, ref)
            self.assertIn("spec_n_accepted_tokens", e.stats())
        with self.assertRaises(ValueError):
            inferx.Engine(self.model, spec="eagle")
        draft = os.path.join(os.path.dirname(MODEL), "draft-f32.gguf")
        if os.path.exists(draft):  # the bundled draft model guesses; the text stays the target's
            with inferx.Engine(self.model, kv_mem_mb=32, draft_model=draft, spec_k=3) as e:
                self.assertEqual(e.generate(PROMPT, max_tokens=24, temperature=0).text, ref)
                self.assertEqual(e.stats()["spec_draft_blocks_used"], 0)
        with tempfile.TemporaryDirectory() as d:  # Medusa heads, trained in a second by inferx medusa-train
            text, heads = os.path.join(d, "text.txt"), os.path.join(d, "heads.gguf")
            with open(text, "w") as f:
                f.write((ref + " ") * 8)
            subprocess.run([os.environ["INFERX_BIN"], "medusa-train", "-m", MODEL, "-f", text, "-o", heads, "--prompts",
                            "4", "--prompt", "16", "--gen", "8", "--epochs", "1", "-t", "1"], check=True, capture_output=True)
            with inferx.Engine(self.model, kv_mem_mb=32, medusa=heads, spec_k=3) as e:
                self.assertEqual(e.generate(PROMPT, max_tokens=24, temperature=0).text, ref)
                self.assertIn("spec_n_draft_tokens", e.stats())  # how many: the adaptive k's timing decides

    def test_sampling_seed_stop_and_n(self):
        with inferx.Engine(self.model, kv_mem_mb=32) as e:
            a = e.generate(PROMPT, max_tokens=16, temperature=0.9, top_p=0.9, seed=7, n=3)
            b = e.generate(PROMPT, max_tokens=16, temperature=0.9, top_p=0.9, seed=7, n=3)
            self.assertEqual(len(a.texts), 3)
            self.assertEqual(a.texts, b.texts)
            full = e.generate(PROMPT, max_tokens=24, temperature=0).text
            word = full.split()[2]
            cut = e.generate(PROMPT, max_tokens=24, temperature=0, stop=[word])
            self.assertEqual(cut.finish_reasons, ["stop"])
            self.assertNotIn(word, cut.text)
            self.assertTrue(full.startswith(cut.text))
            with self.assertRaises(TypeError):
                e.generate(PROMPT, bogus=1)
            with self.assertRaises(inferx.InferxError):
                e.generate(PROMPT, temperature=-1)

    def test_constrained_outputs(self):
        schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                                   "age": {"type": "integer"}},
                  "required": ["name", "age"], "additionalProperties": False}
        with inferx.Engine(self.model, kv_mem_mb=32) as e:
            for seed in range(3):
                r = e.generate("Emma was", max_tokens=200, temperature=1.0, seed=seed, json_schema=schema)
                obj = json.loads(r.text)
                self.assertEqual(set(obj), {"name", "age"})
                self.assertIsInstance(obj["age"], int)
            r = e.generate("Emma was", max_tokens=50, temperature=0.8, seed=1, grammar='root ::= ("yes" | "no") "!"')
            self.assertIn(r.text, ("yes!", "no!"))
            r = e.generate("x", max_tokens=300, json_object=True, seed=2)
            self.assertTrue(r.text.lstrip().startswith("{"), r.text)
            if r.finish_reasons == ["stop"]:  # else max_tokens cut it
                self.assertIsInstance(json.loads(r.text), dict)
            with self.assertRaises(inferx.InferxError):
                e.generate("x", grammar="root ::= (")

    def test_stream_closed_early_cancels(self):
        with inferx.Engine(self.model, kv_mem_mb=32) as e:
            g = e.stream(PROMPT, max_tokens=200, temperature=0)
            next(g)
            g.close()
            st = e.stats()
            self.assertEqual(st["kv"]["n_seqs"], 0)
            self.assertEqual(st["n_running"] + st["n_waiting"], 0)

    def test_threads_share_one_engine(self):
        with inferx.Engine(self.model, kv_mem_mb=32) as e:
            want = e.generate("Emma was", max_tokens=10, temperature=0).text
            got = [None] * 4

            def run(i):
                got[i] = "".join(e.stream("Emma was", max_tokens=10, temperature=0))

            ts = [threading.Thread(target=run, args=(i,)) for i in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            self.assertEqual(got, [want] * 4)


if __name__ == "__main__":
    unittest.main()
