#!/usr/bin/env python3
"""KV tiers benchmark for `inferx serve`: what the disk tier and sessions are
worth, each figure beside a baseline measured in the same run.

1. Agent trace: AGENTS conversations at once, each a system prompt with tool
   definitions (shared by all) and a conversation that grows by one user turn
   and one answer per round, ROUNDS rounds, every turn under the agent's
   session_id; the RAM KV pool (--kv-cache-mem) is deliberately too small to
   hold every conversation. Time to first token (streamed, first content
   chunk) per turn after the first, p50 / p99, with the disk tier and without
   it: two servers on the same model and flags, the trace run on each,
   alternating (A, B, A, B ...) so that the machine's load falls on both.
2. Restart: a PREFIX-token shared prefix served once, the server stopped
   (SIGTERM) and started again on the same folder; TTFT of the prefix plus a
   short question right after the restart, against the same request on a
   cold server (no disk tier, empty cache), alternated REPS times.
3. The disk: the store's write and read rates from /metrics (bytes over the
   run's time in the tier) beside the device's own sequential rates measured
   with dd (oflag=direct / iflag=direct) in the same folder.

usage: kv_tiers.py INFERX_BINARY [-m MODEL] [--agents 8] [--rounds 4] [--kv-cache-mem 24M]
                   [--prefix 2000] [--reps 3] [--dir /tmp] [--json]
Python 3 standard library only. The machine is shared: run it when quiet
and print the load (it does) beside the figures.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tools", type=int, default=24, help="tool definitions in the shared system prompt")
    ap.add_argument("--kv-cache-mem", default="24M")
    ap.add_argument("--prefix", type=int, default=2000, help="tokens of the shared prefix after a restart")
    ap.add_argument("--restart-model", default=None,
                    help="the model of part 2 (default: -m); one where a 2,000-token prefill costs real time, "
                         "e.g. `inferx mkmodel --shape tinyllama --type q4_0 -o /tmp/tl.gguf`")
    ap.add_argument("--restart-kv-cache-mem", default="256M", help="the KV pool of part 2 (room for the prefix)")
    ap.add_argument("--parts", default="trace,restart", help="which parts to run")
    ap.add_argument("--reps", type=int, default=3, help="restarts (part 2)")
    ap.add_argument("--trace-reps", type=int, default=3, help="runs of the trace on each server, alternated")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--json", action="store_true")
    return ap.parse_args()


class Server:
    def __init__(self, args, disk_dir, model=None, kv_mem=None):
        self.args, self.disk_dir, self.model = args, disk_dir, model or args.model
        self.kv_mem = kv_mem or args.kv_cache_mem
        self.proc, self.port = None, None

    def start(self):
        cmd = [self.args.binary, "serve", "--port", "0", "-t", str(self.args.threads), "--access-log", "off",
               "--kv-cache-mem", self.kv_mem, "--max-num-seqs", "64"]
        if self.model:
            cmd += ["-m", self.model]
        if self.disk_dir:
            cmd += ["--kv-disk-dir", self.disk_dir]
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.err)
        for _ in range(6000):  # bounded: 10 minutes of loading at most
            self.err.seek(0)
            m = re.search(rb" on http://127\.0\.0\.1:(\d+)", self.err.read())
            if m:
                self.port = int(m.group(1))
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.err.seek(0)
        sys.exit("server did not start: " + self.err.read().decode(errors="replace")[-2000:])

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=600)
        if rc != 0:
            sys.exit(f"server exit status {rc} at SIGTERM")

    def metrics(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        out = {}
        for line in text.splitlines():
            m = re.match(r"^(inferx:[a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
            if m:  # keyed by name and labels, the model_name label left out
                labels = re.sub(r'model_name="[^"]*",?', "", m.group(2) or "").replace(",}", "}")
                out[m.group(1) + ("" if labels in ("", "{}") else labels)] = float(m.group(3))
        return out


def stream_ttft(port, body):
    """Seconds to the first content chunk of a streamed chat; the answer text."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", json.dumps(dict(body, stream=True)),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:300]}")
    ttft, text = None, []
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        delta = json.loads(line[6:])["choices"]
        if delta and delta[0].get("delta", {}).get("content"):
            if ttft is None:
                ttft = time.perf_counter() - t0
            text.append(delta[0]["delta"]["content"])
    return (ttft if ttft is not None else time.perf_counter() - t0), "".join(text)


def system_prompt(n_tools):
    return "You are an operations agent. Use the tools below when a question needs data.\n" + "".join(
        f"Tool {i}: name tool_{i}; description: looks up record kind {i} in the inventory and returns its fields "
        f"(id, name, owner, created, status, size and the notes attached); arguments: an object with 'id' "
        f"(string) and 'fields' (array of strings).\n" for i in range(n_tools))


def agent_trace(srv, args, tag):
    """Runs the trace on srv; returns the TTFTs of every turn after the first."""
    convs = [[{"role": "system", "content": system_prompt(args.tools)}] for _ in range(args.agents)]
    ttfts, errors, lock = [], [], threading.Lock()

    def turn(a, rnd):
        convs[a].append({"role": "user", "content": f"Agent {a}, round {rnd}: check record {a * 97 + rnd} and "
                                                    f"summarise what changed since the last round."})
        body = {"messages": convs[a], "max_tokens": args.max_tokens, "temperature": 0,
                "session_id": f"{tag}-agent-{a}"}
        try:
            t, text = stream_ttft(srv.port, body)
        except Exception as ex:  # counted, not fatal: the figures say how many turns they cover
            with lock:
                errors.append(str(ex)[:200])
            return
        convs[a].append({"role": "assistant", "content": text})
        if rnd > 0:
            with lock:
                ttfts.append(t)

    for rnd in range(args.rounds):
        th = [threading.Thread(target=turn, args=(a, rnd)) for a in range(args.agents)]
        for t in th:
            t.start()
        for t in th:
            t.join()
    if errors:
        print(f"  {tag}: {len(errors)} turns failed, e.g. {errors[0]}", file=sys.stderr)
    return ttfts


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))] if xs else float("nan")


WORDS = ("the quick brown fox jumps over a lazy dog near the river bank while seven tired sailors watch "
         "from their old wooden boat ").split()


def n_tokens(port, text):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/tokenize", json.dumps({"prompt": text}), {"Content-Type": "application/json"})
    return json.loads(c.getresponse().read())["count"]


def prefix_text(port, want):
    """About `want` tokens of text (measured with the server's tokenizer)."""
    n_words = want
    for _ in range(3):
        text = " ".join(WORDS[i % len(WORDS)] for i in range(n_words))
        got = n_tokens(port, text)
        if abs(got - want) <= want // 50:
            break
        n_words = max(1, n_words * want // got)
    return text


def evict_page_cache(folder):
    """Drops the page-cache pages of every block file under folder
    (POSIX_FADV_DONTNEED; they are clean once written), so the next read of
    them comes from the device. Returns the bytes concerned."""
    total = 0
    for dirpath, _, files in os.walk(folder):
        for f in files:
            if f.endswith(".kvb"):
                fd = os.open(os.path.join(dirpath, f), os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                total += os.fstat(fd).st_size
                os.close(fd)
    return total


def dd_rates(folder):
    """Sequential write and read rates of the device under folder (MB/s), direct I/O, 256 MiB."""
    path = os.path.join(folder, "dd.bin")
    rates = {}
    for what, cmd in (("write", ["dd", "if=/dev/zero", f"of={path}", "bs=1M", "count=256", "oflag=direct",
                                 "conv=fsync"]),
                      ("read", ["dd", f"if={path}", "of=/dev/null", "bs=1M", "iflag=direct"])):
        r = subprocess.run(cmd, capture_output=True, text=True)
        m = re.search(r"copied, ([0-9.]+) s", r.stderr)
        rates[what] = 256 * 1.048576 / float(m.group(1)) if r.returncode == 0 and m else float("nan")
    os.unlink(path)
    return rates


def main():
    args = parse_args()
    load0 = os.getloadavg()
    root = tempfile.mkdtemp(prefix="kv_tiers_", dir=args.dir)
    out = {"load_before": load0, "agents": args.agents, "rounds": args.rounds, "kv_cache_mem": args.kv_cache_mem,
           "model": args.model or "bundled"}
    try:
        if "trace" in args.parts:
            trace(args, root, out)
        if "restart" in args.parts:
            restart(args, root, out)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report(args, out, load0)


def trace(args, root, out):
    """1. agent trace, disk tier vs none, alternated."""
    disk = Server(args, os.path.join(root, "kv")).start()
    ram = Server(args, None).start()
    res = {"disk": [], "ram": []}
    for rep in range(args.trace_reps):
        for name, srv in (("disk", disk), ("ram", ram)):
            res[name] += agent_trace(srv, args, f"{name}{rep}")
    m = disk.metrics()
    disk.stop()
    ram.stop()
    out["trace"] = {k: {"turns": len(v), "p50_s": pct(v, 50), "p99_s": pct(v, 99)} for k, v in res.items()}
    out["trace_disk_metrics"] = {k: v for k, v in m.items() if "kv_disk" in k or "session" in k}


def restart(args, root, out):
    """2. restart: a long shared prefix from disk vs cold; 3. the disk."""
    model = args.restart_model or args.model
    out["restart_model"] = model or "bundled"
    rdir = os.path.join(root, "restart")
    mem = args.restart_kv_cache_mem
    warm = Server(args, rdir, model, mem).start()
    body = {"messages": [{"role": "user", "content": prefix_text(warm.port, args.prefix) + "\nWhat is it about?"}],
            "max_tokens": 4, "temperature": 0}
    stream_ttft(warm.port, body)
    t_stop = time.perf_counter()
    warm.stop()  # writes every cached block (one file and fsync each)
    t_stop = time.perf_counter() - t_stop
    after, after_dev, cold, mm_dev = [], [], [], {}
    for rep in range(args.reps):
        s = Server(args, rdir, model, mem).start()
        after.append(stream_ttft(s.port, body)[0])
        mm = s.metrics()
        s.stop()
        # the same with the blocks out of the page cache: read from the device (read-ahead at work)
        s = Server(args, rdir, model, mem).start()
        evicted = evict_page_cache(rdir)
        after_dev.append(stream_ttft(s.port, body)[0])
        mm_dev = s.metrics()
        s.stop()
        c = Server(args, None, model, mem).start()
        cold.append(stream_ttft(c.port, body)[0])
        c.stop()
    out["restart"] = {"prefix_tokens": args.prefix, "after_restart_s": after, "cold_s": cold,
                      "after_restart_device_s": after_dev, "evicted_bytes": evicted,
                      "device_read_s_per_block": mm_dev.get("inferx:kv_disk_read_seconds_per_block", 0),
                      "read_ahead_blocks": mm_dev.get("inferx:kv_disk_read_ahead_blocks_total", 0),
                      "speedup_median": pct(cold, 50) / pct(after, 50),
                      "hit_tokens": mm.get("inferx:kv_disk_hit_tokens_total", 0),
                      "read_s_per_block": mm.get("inferx:kv_disk_read_seconds_per_block", 0)}
    # 3. the disk
    # the tier's read rate while loading: bytes read over (blocks read x mean read time)
    rb = mm.get("inferx:kv_disk_read_bytes_total", 0)
    read_s = mm.get("inferx:kv_disk_read_seconds_per_block", 0) * mm.get("inferx:kv_disk_blocks_in_total", 0)
    on_disk = mm.get("inferx:kv_disk_bytes", 0)
    dev_s = mm_dev.get("inferx:kv_disk_read_seconds_per_block", 0) * mm_dev.get("inferx:kv_disk_blocks_in_total", 0)
    out["disk_device_read_MBps"] = mm_dev.get("inferx:kv_disk_read_bytes_total", 0) / 1e6 / dev_s if dev_s else 0
    out["disk"] = {"dd_MBps": dd_rates(root), "tier_read_bytes": rb, "tier_bytes": on_disk,
                   "tier_read_MBps": rb / 1e6 / read_s if read_s > 0 else float("nan"),
                   "tier_write_MBps_at_stop": on_disk / 1e6 / t_stop if t_stop > 0 else float("nan")}


def report(args, out, load0):
    out["load_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"kv_tiers: model {out['model']}, {args.agents} agents x {args.rounds} rounds, KV pool "
          f"{args.kv_cache_mem}; load average before {load0[0]:.1f}, after {out['load_after'][0]:.1f} "
          f"({os.cpu_count()} CPUs)")
    for k in ("ram", "disk") if "trace" in out else ():
        t = out["trace"][k]
        print(f"  agent trace TTFT, {'disk tier ' if k == 'disk' else 'RAM only  '}: p50 {t['p50_s'] * 1e3:8.1f} ms"
              f"  p99 {t['p99_s'] * 1e3:8.1f} ms  ({t['turns']} turns)")
    if "restart" not in out:
        return
    r = out["restart"]
    print(f"  restart model: {out['restart_model']}")
    print(f"  {args.prefix}-token prefix TTFT: after a restart (disk) median {pct(r['after_restart_s'], 50):.3f} s, "
          f"cold {pct(r['cold_s'], 50):.3f} s: x{r['speedup_median']:.1f} "
          f"({r['hit_tokens']:.0f} tokens from disk, {r['read_s_per_block'] * 1e6:.0f} us a block)")
    print(f"  the same with the blocks out of the page cache ({r['evicted_bytes'] / 1e6:.1f} MB read from the "
          f"device): median {pct(r['after_restart_device_s'], 50):.3f} s, "
          f"{r['device_read_s_per_block'] * 1e6:.0f} us a block, {r['read_ahead_blocks']:.0f} blocks read ahead")
    d = out["disk"]
    print(f"  disk: dd write {d['dd_MBps']['write']:.0f} MB/s, read {d['dd_MBps']['read']:.0f} MB/s (direct I/O); "
          f"the tier read {d['tier_read_MBps']:.0f} MB/s loading blocks, wrote {d['tier_bytes'] / 1e6:.1f} MB at "
          f"{d['tier_write_MBps_at_stop']:.0f} MB/s at shutdown (a file and an fsync per block, process exit "
          f"included); from the device {out['disk_device_read_MBps']:.0f} MB/s")


if __name__ == "__main__":
    main()
