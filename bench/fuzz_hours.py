#!/usr/bin/env python3
"""A fuzzing campaign measured in CPU time: runs the libFuzzer targets of a
fuzz build until each has used a given number of CPU seconds, counted over
every run of the campaign (the corpus and a ledger persist in --work, so a
campaign can be spread over several sittings and resumed).

    cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DINFERX_FUZZ=ON
    cmake --build build-fuzz --target fuzz_gguf fuzz_tokenizer ...
    bench/fuzz_hours.py --goal 3600                  # every target to one CPU-hour
    bench/fuzz_hours.py --report                     # the ledger only

Each target runs as one process at the idle scheduling class (it takes only
CPU time nothing else wants; fuzz_http: see OPTS), its CPU time read from
/proc (user + system, all threads -- the HTTP targets' server threads count
-- and reaped children, fork mode's jobs). A target is stopped
with SIGINT when its total reaches the goal (fork mode, which goes on starting
jobs after SIGINT, has its process group killed 30 s later); SIGINT or SIGTERM
to this script stops them all and records what they used. To pause a campaign, stop it and
run it again later: a SIGSTOP of the fuzzers trips their wall-clock deadlines
(libFuzzer's -timeout, fuzz_http's 120 s) when they resume. Crashes are kept as
--work/<target>/crash-* and reported; the run then fails.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = ["gguf", "tokenizer", "template", "grammar", "http", "request"]
TICK = os.sysconf("SC_CLK_TCK")
# Per-target libFuzzer options: the HTTP targets run a server in-process
# (no per-input leak check; an input may legitimately take up to the
# target's own 120 s deadline on a starved machine). fuzz_http spends most
# of an input waiting on its server's threads (about a fifth of a core when
# nothing else runs), so it runs as parallel jobs (libFuzzer's fork mode),
# and at the lowest normal priority rather than the idle class, where each
# hand-off between its threads would wait behind the other targets.
OPTS = {
    "http": ["-detect_leaks=0", "-timeout=180", "-fork=8"],
    "request": ["-detect_leaks=0", "-timeout=180"],
}
NICE_ONLY = {"http"}
# libFuzzer's -timeout is wall-clock time, and an idle-class process on a
# machine loaded by builds can wait over a minute for a core: one input of
# fuzz_grammar that needs 3.5 CPU s was reported as a 66 s timeout at load 18.
DEFAULT_OPTS = ["-timeout=300", "-malloc_limit_mb=1024"]
# "#N  NEW    cov: C ft: F corp: K/SIZE ..." and fork mode's "#N: cov: C ft: F corp: K ..."
STATUS = re.compile(r"^#(\d+)(?::|\s+\S+)\s+cov: (\d+) ft: (\d+) corp: (\d+)")


def cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # utime, stime, and cutime, cstime: fork mode's jobs, once reaped
        return sum(int(x) for x in fields[11:15]) / TICK
    except (OSError, IndexError, ValueError):
        return None


def load_ledger(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"cpu_s": 0.0, "runs": []}


def save_ledger(path, ledger):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(ledger, f, indent=1)
    os.replace(tmp, path)


def last_status(log_path):
    """execs, cov, ft, corpus size from the last status line of a log."""
    best = fork = None  # fork mode: the parent's "#N:" lines, not its jobs' echoed ones
    try:
        with open(log_path, errors="replace") as f:
            for line in f:
                m = STATUS.match(line)
                if m:
                    st = tuple(int(x) for x in m.groups())
                    if re.match(r"^#\d+:", line):
                        fork = st
                    else:
                        best = st
    except OSError:
        pass
    return fork or best


class Run:
    def __init__(self, name, args):
        self.name = name
        self.dir = os.path.join(args.work, name)
        self.corpus = os.path.join(self.dir, "corpus")
        os.makedirs(self.corpus, exist_ok=True)
        self.ledger_path = os.path.join(self.dir, "ledger.json")
        self.ledger = load_ledger(self.ledger_path)
        self.log = os.path.join(self.dir, time.strftime("log-%Y%m%d-%H%M%S.txt"))
        self.exe = os.path.join(args.build, "bin", "fuzz_" + name)
        self.proc = None
        self.used = 0.0
        self.stopping = 0.0  # when SIGINT was sent

    def remaining(self, goal):
        return goal - self.ledger["cpu_s"]

    def start(self, idle):
        seeds = os.path.join(ROOT, "tests", "corpus", self.name)
        cmd = [self.exe, *OPTS.get(self.name, DEFAULT_OPTS), "-print_final_stats=1",
               f"-artifact_prefix={self.dir}/", self.corpus, seeds]
        if idle and self.name in NICE_ONLY:
            cmd = ["nice", "-n", "19", *cmd]
        elif idle:
            cmd = ["chrt", "--idle", "0", *cmd]
        self.logf = open(self.log, "w")
        # a process group of its own: fork mode's jobs go with it (below)
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT, cwd=self.dir,
                                     start_new_session=True)

    def poll(self):
        c = cpu_seconds(self.proc.pid)
        if c is not None:
            self.used = c
        return self.proc.poll()

    def stop(self):
        if self.proc.poll() is not None:
            return
        if not self.stopping:
            self.stopping = time.time()
            self.proc.send_signal(signal.SIGINT)
        elif time.time() - self.stopping > 30:
            # libFuzzer's fork mode goes on starting jobs after SIGINT: end
            # the group (the CPU time is the last reading, two seconds old)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass

    def record(self):
        self.logf.close()
        st = last_status(self.log)
        crashes = sorted(f for f in os.listdir(self.dir) if f.startswith(("crash-", "timeout-", "oom-", "leak-")))
        self.ledger["cpu_s"] += self.used
        self.ledger["runs"].append({
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "cpu_s": round(self.used, 1),
            "execs": st[0] if st else 0,
            "cov": st[1] if st else 0,
            "ft": st[2] if st else 0,
            "corpus": st[3] if st else 0,
            "exit": self.proc.returncode,
            "log": os.path.basename(self.log),
        })
        self.ledger["artifacts"] = crashes
        save_ledger(self.ledger_path, self.ledger)


def report(work, goal, names):
    print(f"{'target':<10} {'CPU h':>6} {'goal':>5} {'runs':>4} {'execs':>11} {'cov':>6} {'ft':>7} {'corpus':>6}  artifacts")
    bad = False
    for n in names:
        led = load_ledger(os.path.join(work, n, "ledger.json"))
        runs = led["runs"]
        execs = sum(r["execs"] for r in runs)
        last = runs[-1] if runs else {}
        arts = led.get("artifacts", [])
        bad |= bool(arts)
        print(f"{n:<10} {led['cpu_s'] / 3600:6.2f} {'met' if led['cpu_s'] >= goal else 'no':>5} {len(runs):>4} "
              f"{execs:>11} {last.get('cov', 0):>6} {last.get('ft', 0):>7} {last.get('corpus', 0):>6}  "
              f"{', '.join(arts) if arts else 'none'}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build-fuzz"), help="the fuzz build (default build-fuzz)")
    ap.add_argument("--work", default=None, help="corpora, logs and ledgers (default BUILD/fuzz-work)")
    ap.add_argument("--goal", type=float, default=3600, help="CPU seconds per target over the campaign (3600)")
    ap.add_argument("--targets", default=",".join(TARGETS), help="comma-separated (default: all six)")
    ap.add_argument("--no-idle", action="store_true", help="run at normal priority, not the idle class")
    ap.add_argument("--http-jobs", type=int, default=8,
                    help="fuzz_http's parallel jobs (8); more when it is the last target left, so that it keeps "
                         "the cores busy while its inputs wait on its server's threads")
    ap.add_argument("--report", action="store_true", help="print the ledger and exit")
    args = ap.parse_args()
    args.work = args.work or os.path.join(args.build, "fuzz-work")
    if args.http_jobs < 1:
        sys.exit("fuzz_hours: --http-jobs must be at least 1")
    OPTS["http"] = [o for o in OPTS["http"] if not o.startswith("-fork=")] + [f"-fork={args.http_jobs}"]
    names = [t for t in args.targets.split(",") if t]
    for n in names:
        if n not in TARGETS:
            sys.exit(f"fuzz_hours: unknown target '{n}' (known: {', '.join(TARGETS)})")
    if args.report:
        sys.exit(1 if report(args.work, args.goal, names) else 0)

    runs = []
    for n in names:
        r = Run(n, args)
        if not os.access(r.exe, os.X_OK):
            sys.exit(f"fuzz_hours: {r.exe} is missing: build it with -DINFERX_FUZZ=ON (see --help)")
        if r.remaining(args.goal) > 0:
            runs.append(r)
    stop_all = False

    def on_signal(signum, frame):
        nonlocal stop_all
        stop_all = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    for r in runs:
        r.start(not args.no_idle)
        print(f"fuzz_hours: {r.name}: {r.ledger['cpu_s']:.0f} s so far, running to {args.goal:.0f} s ({r.log})",
              flush=True)
    live = list(runs)
    last_print = time.time()
    while live:
        time.sleep(2)
        for r in list(live):
            if r.poll() is not None:
                r.record()
                live.remove(r)
                print(f"fuzz_hours: {r.name}: stopped (exit {r.proc.returncode}) at "
                      f"{r.ledger['cpu_s']:.0f} CPU s", flush=True)
            elif stop_all or r.used >= r.remaining(args.goal):
                r.stop()
        if time.time() - last_print > 600:
            last_print = time.time()
            print("fuzz_hours: " + ", ".join(f"{r.name} {r.ledger['cpu_s'] + r.used:.0f} s" for r in live), flush=True)
    sys.exit(1 if report(args.work, args.goal, names) else 0)


if __name__ == "__main__":
    main()
