#!/bin/sh
# `inferx run` end to end on the bundled model: stdout is exactly the
# completion, the engine's text -- greedy, the continuation in
# ../shared/models/golden.json (32 tokens of the PyTorch reference, the
# leading space kept); the timings go to stderr; stop strings, a prompt on
# stdin and seeds work; --chat / --chat-template render the prompt as a chat;
# bad input fails with a message.
# usage: cli_run_test.sh INFERX SOURCE_DIR TMP_DIR
set -u
bin=$1 src=$2 tmp=$3
model=$src/models/target-f16.gguf
prompt="It was on this point that she had"
out=

errf="$tmp/cli_run_err"
. "$(dirname "$0")/cli_lib.sh"

# run ARGS...: stdout into $got, stderr into $out; fails on a non-zero exit.
run() {
    "$bin" run -m "$model" "$@" >"$tmp/cli_run_out" 2>"$errf"
    rc=$?
    out=$(cat "$errf")
    [ "$rc" -eq 0 ] || fail "inferx run $* exited $rc"
    got=$(cat "$tmp/cli_run_out")
    out=$(cat "$errf")
}

# $got lacks the final newline (command substitution drops it); the file has it.
golden=" been able to give up the whole party.
Their visit was to be done, and the two gentlemen were to be at home, and the two girls"
run -p "$prompt" -n 32 --temp 0 -t 2
[ "$got" = "$golden" ] || fail "greedy output differs: '$got'"
[ "$(tail -c 1 "$tmp/cli_run_out" | od -An -c | tr -d ' ')" = '\n' ] || fail "stdout does not end in a newline"
expect "prompt 9 tokens in"
expect "time to first token"
expect "generated 32 tokens"
expect "2 threads"

# A quantized KV cache: q8_0 (and bf16) keep the 32 greedy tokens of the f16
# cache's golden text on this model; an unknown type is refused by name.
run -p "$prompt" -n 32 --temp 0 -t 2 --kv-cache-dtype q8_0
[ "$got" = "$golden" ] || fail "--kv-cache-dtype q8_0: greedy output differs: '$got'"
run -p "$prompt" -n 32 --temp 0 -t 2 --kv-cache-dtype bf16
[ "$got" = "$golden" ] || fail "--kv-cache-dtype bf16: greedy output differs: '$got'"
run -p "$prompt" -n 8 --temp 0 --kv-cache-dtype q4_0
run -p "$prompt" -n 8 --temp 0 --kv-cache-dtype fp8_e4m3
expect_exit 2 run -m "$model" -p "$prompt" --kv-cache-dtype q9
expect "--kv-cache-dtype expects f16, bf16, q8_0, fp8_e4m3, q4_0 or f32, got 'q9'"
expect_exit 2 run -m "$model" -p "$prompt" --kv-cache-dtype

# A stop string spanning tokens ("▁the" "▁whole"): the text before it, nothing of it.
run -p "$prompt" -n 32 --temp 0 --stop "e whole" --stop "never"
[ "$got" = " been able to give up th" ] || fail "--stop: '$got'"

# The prompt from stdin; -n caps the tokens.
printf '%s' "$prompt" | "$bin" run -m "$model" -p - -n 4 --temp 0 >"$tmp/cli_run_out" 2>"$errf" || fail "-p - exited $?"
got=$(cat "$tmp/cli_run_out")
[ "$got" = " been able to give" ] || fail "-p -: '$got'"

# The context bounds the completion: prompt + completion <= --ctx.
run -p "$prompt" -n 100 --temp 0 -c 12
expect "generated 3 tokens"

# Same seed, same text; sampling is on by default.
run -p "$prompt" -n 24 --seed 7
a=$got
run -p "$prompt" -n 24 --seed 7
[ "$got" = "$a" ] || fail "--seed 7 twice gave different text"

# --chat: the prompt as a user message through a chat template. The built-in
# ChatML renderer and ChatML's Jinja template give the same prompt, hence the
# same greedy text, which differs from the raw prompt's.
run -p "Hello" -n 8 --temp 0 --chat-template chatml
expect "chat template: built-in chatml (--chat-template)"
a=$got
n_prompt=$(printf '%s\n' "$out" | grep -o 'prompt [0-9]* tokens')
cat >"$tmp/cli_run_chatml.jinja" <<'EOF'
{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
EOF
run -p "Hello" -n 8 --temp 0 --chat-template "$tmp/cli_run_chatml.jinja"
expect "chat template: jinja from --chat-template"
expect "$n_prompt"
[ "$got" = "$a" ] || fail "the ChatML Jinja file and the built-in differ: '$got' vs '$a'"
run -p "Hello" -n 8 --temp 0
[ "$got" != "$a" ] || fail "--chat-template changed nothing"
run -p "Hello" -n 4 --temp 0 --chat
expect "chat template: built-in plain (the model has no tokenizer.chat_template)"
run -p "Hello" -n 4 --temp 0 --chat-template llama2 --system "Be brief."
printf '{%% for m in messages %%}{{ m.content }' >"$tmp/cli_run_bad.jinja"
expect_exit 1 run -m "$model" -p x --chat-template "$tmp/cli_run_bad.jinja"
expect "--chat-template: line 1"
expect_exit 2 run -m "$model" -p x --chat-template no-such-template
expect "neither a built-in (plain, chatml, llama3"
expect_exit 2 run -m "$model" -p x --system "Be brief."
rm -f "$tmp/cli_run_chatml.jinja" "$tmp/cli_run_bad.jinja"

out=$("$bin" run --help) || fail "--help exited $?"
expect "usage: inferx run"

expect_exit 2 run -m "$model"
expect_exit 2 run -m "$model" -p "$prompt" -n 0
expect_exit 2 run -m "$model" -p "$prompt" --top-p 2
expect "top_p"
expect_exit 2 run -m "$model" -p "$prompt" --temp x
expect_exit 2 run -m "$model" -p "$prompt" --bogus
expect_exit 1 run -m "$tmp/cli_run_missing.gguf" -p "$prompt"
expect "cannot open"
expect_exit 1 run -m "$model" -p "$prompt" -c 9
expect "context"
rm -f "$tmp/cli_run_out" "$errf"
echo ok
