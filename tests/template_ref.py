#!/usr/bin/env python3
"""Renders chat templates the way Hugging Face transformers does (jinja2's
ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
{% generation %}, raise_exception, strftime_now, a tojson that keeps key
order), to check inferx's template module against the reference.

  template_ref.py TEMPLATE CONTEXT.json          print the rendering
  template_ref.py --diff RENDER_BIN CASES.json   compare inferx's
      template_render binary with jinja2 on a list of
      {"template": ..., "context": {...}} cases; prints the differences
  template_ref.py --check DUMP.json   compare the expectations of the C
      tests with jinja2: run `IX_TEMPLATE_DUMP=DUMP.json test_template` (and
      test_template_models), which write their tables as {"name",
      "template", "context", "want" (null: an error), "differs" (why
      inferx differs on purpose, or null)} and skip the tests

The context holds messages, tools, add_generation_prompt, bos_token,
eos_token, now_unix_s (for strftime_now, UTC) and any other variables.
Needs only jinja2 (pip install jinja2). Not run by ctest: the expected
strings of tests/test_template*.c were checked with it when written."""
import datetime
import json
import subprocess
import sys
import tempfile

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Generation(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def render(template, context):
    ctx = dict(context)
    now = ctx.pop("now_unix_s", 0)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(now, datetime.timezone.utc).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    if now:
        env.globals["strftime_now"] = strftime_now
    return env.from_string(template).render(**ctx)


def check(path):
    bad = differs = 0
    cases = json.load(open(path))
    for case in cases:
        try:
            got = render(case["template"], case["context"])
        except Exception as e:  # noqa: BLE001
            got = None
            err = type(e).__name__ + ": " + str(e)
        if case.get("differs"):
            differs += 1
            continue
        if got != case["want"]:
            bad += 1
            print(f"{case['name']}: {case['template']!r}\n  jinja2: {got if got is not None else err!r}\n  table:  {case['want']!r}")
    print(f"{len(cases) - bad - differs}/{len(cases)} agree with jinja2 {jinja2.__version__}, "
          f"{differs} differ on purpose, {bad} disagree")
    return 1 if bad else 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        return check(sys.argv[2])
    if len(sys.argv) == 4 and sys.argv[1] == "--diff":
        cases = json.load(open(sys.argv[3]))
        bad = 0
        for i, case in enumerate(cases):
            try:
                want = render(case["template"], case["context"])
            except Exception as e:  # noqa: BLE001 - any jinja2 failure is an expected error
                want = "error: " + type(e).__name__ + ": " + str(e)
            with tempfile.NamedTemporaryFile("w", suffix=".jinja") as t, tempfile.NamedTemporaryFile("w", suffix=".json") as c:
                t.write(case["template"])
                t.flush()
                json.dump(case["context"], c)
                c.flush()
                got = subprocess.run([sys.argv[2], t.name, c.name], capture_output=True).stdout.decode("utf-8", "replace")
            if got != want and not (got.startswith("error:") and want.startswith("error:")):
                bad += 1
                print(f"case {i}: {case['template']!r}\n  jinja2: {want!r}\n  inferx: {got!r}")
        print(f"{len(cases) - bad}/{len(cases)} agree")
        return 1 if bad else 0
    template = open(sys.argv[1]).read()
    context = json.load(open(sys.argv[2]))
    sys.stdout.write(render(template, context))
    return 0


if __name__ == "__main__":
    sys.exit(main())
