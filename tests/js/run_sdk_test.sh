#!/bin/sh
# Runs the client-library tests of tests/js -- sdk_test.mjs (the official
# OpenAI Node SDK), ai_sdk_test.mjs (the Vercel AI SDK), langchain_test.mjs
# (LangChain JS), ollama_test.mjs (the ollama library, /api/...) -- against one real `inferx serve` on 127.0.0.1, each in
# turn; fails when any fails. Exit 77 (skip) without node or node_modules.
# usage: run_sdk_test.sh INFERX_BINARY TESTS_JS_DIR
set -u
bin=$1
dir=$2
if ! command -v node >/dev/null 2>&1; then
    echo "skip: node is not installed"
    exit 77
fi
if [ ! -d "$dir/node_modules/openai" ] || [ ! -d "$dir/node_modules/ai" ] ||
   [ ! -d "$dir/node_modules/@langchain/openai" ]; then
    echo "skip: $dir/node_modules is absent (run: npm ci --prefix $dir)"
    exit 77
fi
log=$(mktemp)
key=sk-sdk-test
"$bin" serve --port 0 --api-key "$key" -t 2 2>"$log" &
pid=$!
port=""
i=0
while [ $i -lt 300 ] && [ -z "$port" ]; do
    port=$(sed -n 's|.* on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$log")
    kill -0 $pid 2>/dev/null || break
    [ -z "$port" ] && sleep 0.1
    i=$((i + 1))
done
if [ -z "$port" ]; then
    echo "inferx serve did not start:"; cat "$log"; kill $pid 2>/dev/null; rm -f "$log"; exit 1
fi
rc=0
for t in sdk_test.mjs ai_sdk_test.mjs langchain_test.mjs ollama_test.mjs; do
    timeout 90 node "$dir/$t" "http://127.0.0.1:$port/v1" "$key" || { echo "FAILED: $t"; rc=1; }
done
kill -TERM $pid
wait $pid
src=$?
cat "$log"
rm -f "$log"
if [ $src -ne 0 ]; then echo "inferx serve exited with $src after SIGTERM"; exit 1; fi
exit $rc
