#!/usr/bin/env bash
# The chat page at / and CORS, end to end against `inferx serve`:
#   - GET / is the page; OPTIONS preflights are answered (204), with the
#     Access-Control-Allow-* headers only for an allowed origin, which JSON
#     and streamed (SSE) answers carry too
#   - headless Chromium opens /?prompt=...&temperature=0: the page streams the
#     reply, which must equal the same greedy chat completion fetched with
#     curl; the page shows tokens/s; a screenshot of it is not blank where
#     the reply is drawn
#   - with an API key and none given in the page, the page shows the error
# Exit 77 (skip) without chromium or curl.   web_test.sh INFERX_BINARY
set -uo pipefail
bin=$1
chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ] || ! command -v curl >/dev/null || ! command -v node >/dev/null; then
  echo "skip: chromium, node or curl is not installed (scripts/setup installs them)"; exit 77
fi
if ! node --experimental-websocket --no-warnings -e 'if (typeof WebSocket !== "function") process.exit(1)' 2>/dev/null; then
  echo "skip: this Node.js ($(node --version)) has no WebSocket client (Node 20.10 or later has one)"; exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
[ -x $py ] || py=python3
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

start() { # name args... -> sets port
  "$bin" serve --port 0 -t 2 --access-log off "${@:2}" 2>"$tmp/$1.log" &
  pids+=($!)
  port=""
  for _ in $(seq 300); do
    port=$(sed -n 's|.* on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$tmp/$1.log")
    [ -n "$port" ] && return 0
    sleep 0.1
  done
  cat "$tmp/$1.log"; fail "inferx serve did not start"
}
browse() { # url screenshot -> the page's replies as JSON on stdout
  timeout 150 node --experimental-websocket --no-warnings "$here/web_cdp.mjs" "$chromium" "$1" "$2" \
    "$tmp/profile-$RANDOM"
}

start main --cors-allow-origin "http://allowed.test, http://other.test"
base=http://127.0.0.1:$port
page=$(curl -s -D "$tmp/h" "$base/")
grep -qi '^content-type: text/html' "$tmp/h" || fail "GET / is not HTML"
case $page in *"<title>inferx chat</title>"*) ;; *) fail "GET / is not the chat page" ;; esac

pre() { curl -s -o /dev/null -D - -X OPTIONS "$base/v1/chat/completions" -H "Origin: $1" \
          -H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: authorization, content-type'; }
h=$(pre http://allowed.test)
grep -q '^HTTP/1.1 204' <<<"$h" || fail "preflight: $h"
grep -qi '^access-control-allow-origin: http://allowed.test' <<<"$h" || fail "preflight lacks the origin: $h"
grep -qi '^access-control-allow-methods: POST, OPTIONS' <<<"$h" || fail "preflight methods: $h"
grep -qi '^access-control-allow-headers: authorization, content-type' <<<"$h" || fail "preflight headers: $h"
h=$(pre http://evil.test)
grep -q '^HTTP/1.1 204' <<<"$h" || fail "preflight (other origin): $h"
grep -qi '^access-control-allow-origin' <<<"$h" && fail "an origin not allowed got CORS headers: $h"
body='{"messages":[{"role":"user","content":"Who is Emma?"}],"max_tokens":24,"temperature":0}'
curl -s -D "$tmp/h" -o "$tmp/chat.json" "$base/v1/chat/completions" -H 'content-type: application/json' \
  -H 'Origin: http://other.test' -d "$body"
grep -qi '^access-control-allow-origin: http://other.test' "$tmp/h" || fail "JSON answer lacks CORS: $(cat "$tmp/h")"
curl -s -N -D "$tmp/h" -o /dev/null "$base/v1/chat/completions" -H 'content-type: application/json' \
  -H 'Origin: http://allowed.test' -d "${body%\}},\"stream\":true}"
grep -qi '^access-control-allow-origin: http://allowed.test' "$tmp/h" || fail "SSE answer lacks CORS: $(cat "$tmp/h")"
want=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["message"]["content"])' "$tmp/chat.json")

url="$base/?prompt=Who%20is%20Emma%3F&temperature=0&max_tokens=24"
browse "$url" "$tmp/shot.png" >"$tmp/page.json" || fail "the browser run"
$py - "$tmp/page.json" "$want" <<'PY' || fail "the page's reply (see above)"
import json, sys
page = json.load(open(sys.argv[1]))
want = sys.argv[2]
print("page:", page)
assert len(page["replies"]) == 1, "one reply"
r = page["replies"][0]
assert not r["error"], r
assert r["text"] == want, f"page shows {r['text']!r}, the API answered {want!r}"
meta = page["metas"][0]
assert meta.startswith("length") and "24 tokens" in meta and "tokens/s" in meta, meta
PY

[ -s "$tmp/shot.png" ] || fail "no screenshot"
$py - "$tmp/shot.png" <<'PY' || fail "the screenshot"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, hdr = 8, b"", None
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    chunk = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR": hdr = struct.unpack(">IIBBBBB", chunk)
    if kind == b"IDAT": idat += chunk
    pos += 12 + n
w, h, depth, ctype = hdr[:4]
assert depth == 8 and ctype in (2, 6), hdr
bpp = 3 if ctype == 2 else 4
raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line); prev = line
# the conversation column (left of the 280 px settings panel), between header and input
dark = sum(1 for y in range(60, h - 90) for x in range(0, w - 290, 2)
           if sum(rows[y][x * bpp:x * bpp + 3]) < 3 * 140)
print(f"screenshot {w}x{h}: {dark} dark pixels (text) in the conversation")
assert dark > 500, "the conversation area is blank"
PY

start keyed --api-key sk-web-test
browse "http://127.0.0.1:$port/?prompt=Hello&max_tokens=4" "$tmp/shot2.png" >"$tmp/page2.json" ||
  fail "the browser run (API key)"
$py - "$tmp/page2.json" <<'PY' || fail "no clear error without the API key"
import json, sys
r = json.load(open(sys.argv[1]))["replies"][0]
assert r["error"] and "Incorrect or missing API key" in r["text"], r
PY
echo "web test: passed"
