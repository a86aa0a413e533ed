# Shared helpers of the tests that run `inferx serve` (sourced, bash). The
# caller sets bin (the inferx binary) first. Provides tmp (a scratch folder
# removed at exit, with any server still running), fail, and serve_start /
# serve_stop; exits 77 (skip) without curl.
command -v curl >/dev/null || { echo "skip: curl is not installed"; exit 77; }
tmp=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; echo "--- server log:"; cat "$tmp/err"; exit 1; }

# serve_start ARGS...: inferx serve --port 0 -t 2 --access-log off ARGS, its
# stderr in $tmp/err; sets pid, port and base (http://127.0.0.1:PORT) once
# the port is open.
serve_start() {
  : >"$tmp/err"
  "$bin" serve --port 0 -t 2 --access-log off "$@" 2>"$tmp/err" &
  pid=$!
  for _ in $(seq 600); do grep -q " on http://127.0.0.1:" "$tmp/err" 2>/dev/null && break; sleep 0.1; done
  port=$(sed -n 's|.* on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$tmp/err")
  [ -n "$port" ] || fail "did not start"
  base=http://127.0.0.1:$port
}

# serve_stop: SIGTERM, and the server must exit 0.
serve_stop() {
  kill -TERM $pid
  wait $pid || fail "exit status $? at SIGTERM"
  pid=""
}
