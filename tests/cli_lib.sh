# Shared helpers of the CLI end-to-end tests (sourced, POSIX sh). The caller
# sets: bin (the inferx binary), errf (a scratch file for stderr) and out
# (the text a failure prints).

# fail MESSAGE: print it and the last output, exit 1.
fail() {
    echo "FAIL: $*" >&2
    printf '%s\n' "$out" >&2
    exit 1
}

# expect TEXT: the last output contains TEXT.
expect() {
    printf '%s\n' "$out" | grep -F -q -- "$1" || fail "output lacks '$1'"
}

# expect_exit CODE ARGS...: inferx ARGS exits with CODE and prints an error
# (kept in $out for expect).
expect_exit() {
    want=$1
    shift
    "$bin" "$@" >/dev/null 2>"$errf"
    rc=$?
    out=$(cat "$errf")
    [ "$rc" -eq "$want" ] || fail "inferx $* exited $rc, want $want"
    [ -s "$errf" ] || fail "inferx $* printed no error"
}
