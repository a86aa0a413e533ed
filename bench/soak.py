#!/usr/bin/env python3
"""Soak test of `inferx serve`: many concurrent streams with random client
disconnects, overload (a small --max-waiting) and, with --keys-file, requests
under a tightly limited key, for a fixed time; then checks what a long-running
service must keep true:

  - every stream that was read to its end is well formed (SSE events of
    valid JSON, one finish_reason per choice, a usage chunk, then [DONE]),
    every whole answer is valid JSON with usage;
  - every refusal is a 429 or 503 with an OpenAI error body and Retry-After;
  - once the load stops, no KV block stays referenced (kv_cache_usage_perc
    0), nothing runs or waits;
  - resident memory is flat: the mean of the run's last fifth is within
    --rss-tolerance of the mean of its second fifth (after warm-up), not
    counting the KV pool's pages (resident as its blocks are first used, up
    to its size; inferx:kv_cache_pool_resident_bytes);
  - the server exits 0 at SIGTERM.

usage: soak.py INFERX_BINARY [--seconds 1800] [--streams 256] [--max-waiting 64]
               [--keys-file FILE --limited-key KEY] [--json] [-- SERVE_ARGS...]
Prints figures (requests by outcome, tokens/s, RSS samples) and exits 1 when
a check fails. Python 3 standard library only.
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("--seconds", type=float, default=1800)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--max-waiting", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--disconnect-rate", type=float, default=0.15)
    ap.add_argument("--keys-file", default=None, help="serve with this keys file (per-key limits)")
    ap.add_argument("--key", default=None, help="the key every ordinary request uses")
    ap.add_argument("--limited-key", default=None, help="a key with tight limits: some requests use it")
    ap.add_argument("--with-limited-key", action="store_true",
                    help="make a keys file with a key limited to 6 requests/min (sk-soak-limited) and use a plain "
                         "--api-key sk-soak for the rest")
    ap.add_argument("--rss-tolerance", type=float, default=0.10)
    ap.add_argument("--sample-every", type=float, default=2.0)
    ap.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:  # what follows goes to inferx serve
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    args = ap.parse_args(argv)
    args.serve_args = extra
    return args


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.tokens = 0
        self.failures = []

    def count(self, what, tokens=0):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1
            self.tokens += tokens

    def fail(self, msg):
        with self.lock:
            if len(self.failures) < 50:
                self.failures.append(msg)
            self.counts["malformed"] = self.counts.get("malformed", 0) + 1


PROMPTS = [
    "Emma Woodhouse, handsome, clever, and rich,",
    "Tell me about Mr. Knightley.",
    "Write one sentence about Highbury.",
    "What did Harriet say to Emma about the letter?",
]


def check_refusal(st, status, headers, body):
    try:
        err = json.loads(body)["error"]
        assert isinstance(err["message"], str) and err["message"]
    except Exception:
        st.fail(f"{status} without an OpenAI error body: {body[:200]!r}")
        return
    if not headers.get("Retry-After", "").strip().isdigit():
        st.fail(f"{status} without a Retry-After in seconds: {headers.get('Retry-After')!r}")
        return
    st.count(f"refused_{status}")


def one_stream(port, key, st, rnd, args):
    body = {"messages": [{"role": "user", "content": rnd.choice(PROMPTS)}], "max_tokens": rnd.randint(4, args.max_tokens),
            "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.8, "n": rnd.choice([1, 1, 1, 2])}
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
        r = conn.getresponse()
        if r.status != 200:
            check_refusal(st, r.status, r.headers, r.read().decode("utf-8", "replace"))
            return
        if rnd.random() < args.disconnect_rate:  # leave after a few events
            for _ in range(rnd.randint(0, 6)):
                if not r.readline():
                    break
            conn.sock.close()
            st.count("disconnected")
            return
        finished, usage, done, n = {}, None, False, body["n"]
        while True:
            line = r.readline()
            if not line:
                break
            line = line.decode("utf-8").rstrip("\r\n")
            if not line:
                continue
            if not line.startswith("data: "):
                st.fail(f"an SSE line that is not data: {line[:100]!r}")
                return
            data = line[6:]
            if data == "[DONE]":
                done = True
                continue
            if done:
                st.fail("events after [DONE]")
                return
            ev = json.loads(data)
            for c in ev.get("choices", []):
                if not 0 <= c["index"] < n:
                    st.fail(f"choice index {c['index']} of n={n}")
                    return
                if c.get("finish_reason"):
                    if c["index"] in finished:
                        st.fail("two finish_reasons for one choice")
                        return
                    finished[c["index"]] = c["finish_reason"]
            if ev.get("usage"):
                usage = ev["usage"]
        if not done or len(finished) != n or not usage or usage["completion_tokens"] < 1:
            st.fail(f"incomplete stream: done={done} finished={finished} usage={usage}")
            return
        st.count("streamed", usage["completion_tokens"])
    except (ConnectionError, http.client.HTTPException, OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        st.fail(f"stream: {type(e).__name__}: {e}")
    finally:
        conn.close()


def one_whole(port, key, st, rnd, args):
    body = {"model": "soak", "prompt": rnd.choice(PROMPTS), "max_tokens": rnd.randint(1, args.max_tokens)}
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", "/v1/completions", json.dumps(body), headers)
        r = conn.getresponse()
        text = r.read().decode("utf-8", "replace")
        if r.status != 200:
            if key == args.limited_key and r.status == 429:
                st.count("key_limited")
            check_refusal(st, r.status, r.headers, text)
            return
        ans = json.loads(text)
        if ans["usage"]["completion_tokens"] < 1 or not ans["choices"][0]["finish_reason"]:
            st.fail(f"a whole answer without usage or finish_reason: {text[:200]!r}")
            return
        st.count("answered", ans["usage"]["completion_tokens"])
    except (ConnectionError, http.client.HTTPException, OSError, json.JSONDecodeError, KeyError) as e:
        st.fail(f"whole: {type(e).__name__}: {e}")
    finally:
        conn.close()


def metrics(port, key):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": "Bearer " + key} if key else {}
    conn.request("GET", "/metrics", headers=headers)
    text = conn.getresponse().read().decode()
    conn.close()
    out = {}
    for m in re.finditer(r"^(inferx:[a-z_]+)(?:\{[^}]*\})? (\S+)$", text, re.M):
        out.setdefault(m.group(1), float(m.group(2)))
    return out


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    args = parse_args()
    cmd = [args.binary, "serve", "--port", "0", "--max-waiting", str(args.max_waiting), "--access-log", "off",
           "--served-model-name", "soak"]
    tmpdir = None
    if args.with_limited_key:
        import tempfile
        tmpdir = tempfile.mkdtemp(prefix="soak.")
        args.keys_file = os.path.join(tmpdir, "keys.json")
        with open(args.keys_file, "w") as f:
            json.dump({"keys": [{"name": "limited", "key": "sk-soak-limited", "requests_per_minute": 6}]}, f)
        args.key, args.limited_key = "sk-soak", "sk-soak-limited"
    if args.keys_file:
        cmd += ["--keys-file", args.keys_file]
    if args.key:
        cmd += ["--api-key", args.key]
    cmd += args.serve_args
    srv = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    port = None
    log = []
    for line in srv.stderr:
        log.append(line)
        m = re.search(r" on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("soak: inferx serve did not start:\n" + "".join(log))
    threading.Thread(target=lambda: [log.append(l) for l in srv.stderr], daemon=True).start()

    st = Stats()
    stop = threading.Event()
    t_end = time.time() + args.seconds

    def worker(i):
        rnd = random.Random(i)
        while not stop.is_set() and time.time() < t_end:
            key = args.key
            if args.limited_key and rnd.random() < 0.05:
                one_whole(port, args.limited_key, st, rnd, args)
            elif rnd.random() < 0.15:
                one_whole(port, key, st, rnd, args)
            else:
                one_stream(port, key, st, rnd, args)

    samples = []
    t0 = time.time()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.streams)]
    for t in threads:
        t.start()
    while time.time() < t_end:
        time.sleep(min(args.sample_every, max(0.0, t_end - time.time())))
        try:
            m = metrics(port, args.key)
        except OSError:
            m = {}
        rss = rss_kb(srv.pid)
        pool_kb = (m.get("inferx:kv_cache_pool_resident_bytes") or 0) / 1024
        samples.append({"t": round(time.time() - t0, 1), "rss_kb": rss, "rss_kb_no_pool": rss - pool_kb,
                        "running": m.get("inferx:num_requests_running"), "waiting": m.get("inferx:num_requests_waiting"),
                        "kv_usage": m.get("inferx:kv_cache_usage_perc")})
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.time() - t0

    # Quiet: nothing may stay referenced.
    idle = None
    for _ in range(120):
        idle = metrics(port, args.key)
        if idle.get("inferx:num_requests_running") == 0 and idle.get("inferx:num_requests_waiting") == 0 and \
                idle.get("inferx:kv_cache_usage_perc") == 0:
            break
        time.sleep(0.5)
    rss_idle = rss_kb(srv.pid)
    srv.send_signal(signal.SIGTERM)
    try:
        code = srv.wait(timeout=120)
    except subprocess.TimeoutExpired:
        srv.kill()
        code = "hung"

    fails = list(st.failures)
    if idle.get("inferx:kv_cache_usage_perc") != 0 or idle.get("inferx:num_requests_running") != 0:
        fails.append(f"after the load: kv_cache_usage_perc {idle.get('inferx:kv_cache_usage_perc')}, "
                     f"running {idle.get('inferx:num_requests_running')}")
    n = len(samples)
    # The KV pool's pages become resident as its blocks are first written
    # (bounded by the pool's size): the check is on everything else.
    second = [s["rss_kb_no_pool"] for s in samples[n // 5:2 * n // 5]] or [samples[0]["rss_kb_no_pool"]]
    last = [s["rss_kb_no_pool"] for s in samples[4 * n // 5:]] or [samples[-1]["rss_kb_no_pool"]]
    growth = (sum(last) / len(last)) / (sum(second) / len(second)) - 1
    if growth > args.rss_tolerance:
        fails.append(f"resident memory grew {growth * 100:.1f}% from the second fifth of the run to the last")
    if code != 0:
        fails.append(f"inferx serve exited {code} at SIGTERM")
    if tmpdir:
        import shutil
        shutil.rmtree(tmpdir, ignore_errors=True)
    needs = ("streamed", "disconnected", "key_limited") if args.limited_key else ("streamed", "disconnected")
    for need in needs:
        if st.counts.get(need, 0) == 0 and args.seconds >= 10:
            fails.append(f"no request ended as {need}: the load did not exercise it")
    summary = {"seconds": round(elapsed, 1), "streams": args.streams, "max_waiting": args.max_waiting,
               "counts": st.counts, "completion_tokens": st.tokens,
               "tokens_per_s": round(st.tokens / elapsed, 1), "rss_mb_first": round(samples[0]["rss_kb"] / 1024, 1),
               "rss_mb_no_pool_second_fifth": round(sum(second) / len(second) / 1024, 1),
               "rss_mb_no_pool_last_fifth": round(sum(last) / len(last) / 1024, 1), "rss_growth": round(growth, 4),
               "rss_mb_last": round(samples[-1]["rss_kb"] / 1024, 1),
               "rss_mb_idle": round(rss_idle / 1024, 1), "exit": code, "failures": fails,
               "load_avg": os.getloadavg()[0]}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"soak: {summary['seconds']} s, {args.streams} streams, --max-waiting {args.max_waiting} "
              f"(load {summary['load_avg']:.1f})")
        print("  outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(st.counts.items())))
        print(f"  {st.tokens} completion tokens, {summary['tokens_per_s']} tokens/s")
        print(f"  RSS MB: first {summary['rss_mb_first']}, last {summary['rss_mb_last']}, idle after "
              f"{summary['rss_mb_idle']}; without the KV pool's pages: second fifth "
              f"{summary['rss_mb_no_pool_second_fifth']}, last fifth {summary['rss_mb_no_pool_last_fifth']} "
              f"({growth * 100:+.1f}%)")
        for f in fails:
            print("  FAIL: " + f)
    if fails:
        sys.stdout.write("".join(log[-20:]))
        sys.exit(1)


if __name__ == "__main__":
    main()
