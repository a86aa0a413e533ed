// inferx serve's OpenTelemetry spans, received by a small OTLP/HTTP collector
// that decodes every payload with the official OTLP protobuf definitions (the
// code @opentelemetry/otlp-transformer 0.52 generated from them, installed
// as "otlp-proto"), then checked: W3C traceparent/tracestate honoured, the
// sampled flag obeyed, the span tree (server span; queue, prefill chunks and
// decode under it), the GenAI attributes against the answers' usage, the
// access log's trace_id, the exporter metrics; and a collector that never
// answers delays no request.
//   node otlp_test.mjs INFERX_BINARY     (exit 77: the decoder is not installed)
import assert from "node:assert/strict";
import http from "node:http";
import net from "node:net";
import { spawn } from "node:child_process";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
let root;
try {
  root = require("otlp-proto/build/src/generated/root.js");
} catch {
  console.log("skip: tests/js/node_modules/otlp-proto is absent (run: npm ci --prefix tests/js)");
  process.exit(77);
}
const ExportReq = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;
const ExportResp = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse;
const bin = process.argv[2];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const hex = (b64) => Buffer.from(b64 || "", "base64").toString("hex");

function attrValue(v) {
  if (!v) return undefined;
  if ("stringValue" in v) return v.stringValue;
  if ("intValue" in v) return Number(v.intValue);
  if ("doubleValue" in v) return v.doubleValue;
  if ("boolValue" in v) return v.boolValue;
  if ("arrayValue" in v) return (v.arrayValue.values || []).map(attrValue);
  return undefined;
}
const attrs = (list) => Object.fromEntries((list || []).map((kv) => [kv.key, attrValue(kv.value)]));

// ---- the collector ---------------------------------------------------------
const spans = [];
const resources = [];
const ctypes = new Set();
const collector = http.createServer((req, res) => {
  const parts = [];
  req.on("data", (c) => parts.push(c));
  req.on("end", () => {
    try {
      assert.equal(req.method, "POST");
      assert.equal(req.url, "/v1/traces");
      ctypes.add(req.headers["content-type"]);
      const msg = ExportReq.decode(Buffer.concat(parts));
      const obj = ExportReq.toObject(msg, { longs: String, bytes: String, enums: String });
      for (const rs of obj.resourceSpans || []) {
        resources.push(attrs(rs.resource && rs.resource.attributes));
        for (const ss of rs.scopeSpans || [])
          for (const s of ss.spans || [])
            spans.push({
              trace: hex(s.traceId), id: hex(s.spanId), parent: hex(s.parentSpanId), name: s.name, kind: s.kind,
              start: BigInt(s.startTimeUnixNano), end: BigInt(s.endTimeUnixNano), traceState: s.traceState || "",
              attrs: attrs(s.attributes), status: s.status || {}, scope: ss.scope && ss.scope.name,
            });
      }
      res.writeHead(200, { "Content-Type": "application/x-protobuf" });
      res.end(Buffer.from(ExportResp.encode(ExportResp.create({})).finish()));
    } catch (e) {
      console.error("collector: bad payload:", e);
      res.writeHead(400);
      res.end();
      process.exitCode = 1;
    }
  });
});
await new Promise((r) => collector.listen(0, "127.0.0.1", r));
const cport = collector.address().port;

// ---- a server under test ---------------------------------------------------
async function startServer(args, env) {
  const p = spawn(bin, ["serve", "--port", "0", "-t", "2", ...args], {
    env: { ...process.env, ...env }, stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  p.stderr.on("data", (d) => (log += d));
  const exited = new Promise((r) => p.on("exit", (code) => r(code)));
  for (let i = 0; i < 600; i++) {
    const m = log.match(/ on http:\/\/127\.0\.0\.1:(\d+)/);
    if (m) return { p, port: Number(m[1]), log: () => log, exited };
    if (p.exitCode !== null) break;
    await sleep(100);
  }
  p.kill("SIGKILL");
  throw new Error("inferx serve did not start:\n" + log);
}

async function post(port, path, body, headers = {}) {
  const r = await fetch(`http://127.0.0.1:${port}${path}`, {
    method: "POST", headers: { "Content-Type": "application/json", ...headers }, body: JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, text, json: text.startsWith("{") ? JSON.parse(text) : null };
}

async function metric(port, name) {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const m = text.match(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, "m"));
  return m ? Number(m[1]) : NaN;
}

async function stop(srv) {
  srv.p.kill("SIGTERM");
  const code = await srv.exited;
  assert.equal(code, 0, "inferx serve exits 0 at SIGTERM:\n" + srv.log());
}

const srv = await startServer(["--otlp-endpoint", `http://127.0.0.1:${cport}`, "--max-num-batched-tokens", "32", "--served-model-name", "tm"],
  { OTEL_SERVICE_NAME: "inferx-otlp-test", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "" });

// A: a chat request in a caller's sampled trace
const tidA = "4bf92f3577b34da6a3ce929d0e0e4736", pidA = "00f067aa0ba902b7";
const a = await post(srv.port, "/v1/chat/completions",
  { model: "tm", messages: [{ role: "user", content: "Who is Emma?" }], max_tokens: 8, temperature: 0, seed: 7 },
  { traceparent: `00-${tidA}-${pidA}-01`, tracestate: "vendor=abc,other=1" });
assert.equal(a.status, 200, a.text);
// B: a streamed completion with a long prompt (several 32-token prefill chunks), no caller trace
const longPrompt = "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition, ".repeat(6);
const b = await post(srv.port, "/v1/completions",
  { model: "tm", prompt: longPrompt, max_tokens: 4, temperature: 0, stream: true, stream_options: { include_usage: true } });
assert.equal(b.status, 200);
const bUsage = JSON.parse(b.text.split("\n").filter((l) => l.startsWith("data: {")).pop().slice(6)).usage;
// C: the caller's trace is not sampled: no spans
const tidC = "0af7651916cd43dd8448eb211c80319c";
const c = await post(srv.port, "/v1/completions", { model: "tm", prompt: "Emma", max_tokens: 2 },
  { traceparent: `00-${tidC}-b7ad6b7169203331-00` });
assert.equal(c.status, 200);
// D: a refused request: its server span only, status 400 (not an error on a server span)
const tidD = "11111111111111111111111111111111";
const d = await post(srv.port, "/v1/completions", { model: "tm", prompt: "Emma", max_tokens: 2, temperature: -1 },
  { traceparent: `00-${tidD}-2222222222222222-01` });
assert.equal(d.status, 400);
// E: an invalid traceparent (upper-case hex) is ignored: a new trace
const e = await post(srv.port, "/v1/completions", { model: "tm", prompt: "Emma", max_tokens: 2 },
  { traceparent: `00-${tidA.toUpperCase()}-${pidA}-01` });
assert.equal(e.status, 200);

const want = () => spans.filter((s) => s.kind === "SPAN_KIND_SERVER").length >= 4;
for (let i = 0; i < 150 && !want(); i++) await sleep(100);
await sleep(1500); // a straggling batch would show up now
const server = spans.filter((s) => s.kind === "SPAN_KIND_SERVER");
assert.equal(server.length, 4, "four traced requests: " + JSON.stringify(server.map((s) => s.name)));
assert.deepEqual([...ctypes], ["application/x-protobuf"]);
for (const r of resources) {
  assert.equal(r["service.name"], "inferx-otlp-test");
  assert.equal(r["telemetry.sdk.name"], "inferx");
  assert.ok(r["service.version"]);
}
assert.ok(spans.every((s) => s.scope === "inferx" && s.end >= s.start && /^[0-9a-f]{16}$/.test(s.id)));
assert.equal(new Set(spans.map((s) => s.id)).size, spans.length, "span ids are unique");
assert.equal(spans.filter((s) => s.trace === tidC).length, 0, "an unsampled caller trace records nothing");

function tree(root) {
  const kids = spans.filter((s) => s.trace === root.trace && s.parent === root.id);
  for (const k of kids) {
    assert.equal(k.kind, "SPAN_KIND_INTERNAL");
    assert.ok(k.start >= root.start - 1000000n && k.end <= root.end + 1000000n, `${k.name} lies within its request`);
  }
  return {
    queue: kids.filter((k) => k.name === "queue"),
    prefill: kids.filter((k) => k.name === "prefill").sort((x, y) => x.attrs["inferx.prefill.position"] - y.attrs["inferx.prefill.position"]),
    decode: kids.filter((k) => k.name === "decode"),
    all: kids,
  };
}

// A
const sa = server.find((s) => s.trace === tidA);
assert.ok(sa, "the caller's trace id is kept");
assert.equal(sa.parent, pidA);
assert.equal(sa.traceState, "vendor=abc,other=1");
assert.equal(sa.name, "POST /v1/chat/completions");
assert.equal(sa.attrs["http.request.method"], "POST");
assert.equal(sa.attrs["http.response.status_code"], 200);
assert.equal(sa.attrs["gen_ai.operation.name"], "chat");
assert.equal(sa.attrs["gen_ai.request.model"], "tm");
assert.equal(sa.attrs["gen_ai.response.id"], a.json.id);
assert.equal(sa.attrs["gen_ai.response.model"], a.json.model);
assert.equal(sa.attrs["gen_ai.usage.input_tokens"], a.json.usage.prompt_tokens);
assert.equal(sa.attrs["gen_ai.usage.output_tokens"], a.json.usage.completion_tokens);
assert.equal(sa.attrs["gen_ai.request.max_tokens"], 8);
assert.equal(sa.attrs["gen_ai.request.temperature"], 0);
assert.equal(sa.attrs["gen_ai.request.seed"], 7);
assert.deepEqual(sa.attrs["gen_ai.response.finish_reasons"], [a.json.choices[0].finish_reason]);
assert.equal(sa.status.code, undefined, "an answered request's span has no error status");
const ta = tree(sa);
assert.equal(ta.queue.length, 1);
assert.equal(ta.decode.length, 1);
assert.equal(ta.decode[0].attrs["gen_ai.usage.output_tokens"], a.json.usage.completion_tokens);
assert.ok(ta.prefill.length >= 1);
const cachedA = sa.attrs["inferx.usage.cached_tokens"];
assert.equal(ta.prefill.reduce((n, s) => n + s.attrs["inferx.prefill.tokens"], 0), a.json.usage.prompt_tokens - cachedA,
  "prefill spans cover the prompt's uncached tokens");
assert.ok(ta.queue[0].end <= ta.prefill[0].end && ta.prefill.at(-1).end <= ta.decode[0].end, "queue, prefill, decode in order");
assert.match(srv.log(), new RegExp(`"trace_id":"${tidA}"`), "the access log names the trace");

// B: chunked prefill, one span per step, positions contiguous
const sb = server.find((s) => s.name === "POST /v1/completions" && s.attrs["inferx.stream"] === true);
assert.ok(sb);
assert.equal(sb.parent, "", "a trace the server starts has a root server span");
const tb = tree(sb);
assert.ok(tb.prefill.length >= 3, `a ${bUsage.prompt_tokens}-token prompt in 32-token steps: ${tb.prefill.length} prefill spans`);
let pos = tb.prefill[0].attrs["inferx.prefill.position"];
for (const p of tb.prefill) {
  assert.equal(p.attrs["inferx.prefill.position"], pos);
  assert.ok(p.attrs["inferx.prefill.tokens"] <= 32);
  assert.ok(p.attrs["inferx.step.tokens"] >= p.attrs["inferx.prefill.tokens"]);
  pos += p.attrs["inferx.prefill.tokens"];
}
assert.equal(pos, bUsage.prompt_tokens);
assert.equal(sb.attrs["gen_ai.usage.output_tokens"], bUsage.completion_tokens);

// D: refused
const sd = server.find((s) => s.trace === tidD);
assert.ok(sd);
assert.equal(sd.attrs["http.response.status_code"], 400);
assert.equal(sd.status.code, undefined);
assert.equal(tree(sd).all.length, 0);

// E: the invalid header started a new trace
const se = server.filter((s) => s.trace !== tidA && s.trace !== tidD && s !== sb);
assert.equal(se.length, 1);
assert.equal(se[0].parent, "");

assert.equal(await metric(srv.port, "inferx:trace_spans_exported_total"), spans.length);
assert.equal(await metric(srv.port, "inferx:trace_spans_dropped_total"), 0);
await stop(srv);

// ---- a collector that accepts and never answers -----------------------------
const held = [];
const sink = net.createServer((s) => held.push(s));
await new Promise((r) => sink.listen(0, "127.0.0.1", r));
const srv2 = await startServer(["--otlp-endpoint", `http://127.0.0.1:${sink.address().port}/v1/traces`, "--served-model-name", "tm"], {});
const t0 = Date.now();
for (let i = 0; i < 3; i++) {
  const r = await post(srv2.port, "/v1/completions", { model: "tm", prompt: "Emma", max_tokens: 4 });
  assert.equal(r.status, 200);
  await sleep(1200); // each request's spans are due in a batch while the previous export hangs
}
const spent = Date.now() - t0 - 3 * 1200;
// Three 4-token requests take milliseconds; an export blocking them would
// cost its 5 s timeout. The bound is loose on purpose.
assert.ok(spent < 4000, `requests were not held up by the stuck collector (${spent} ms)`);
let failed = 0;
for (let i = 0; i < 200 && !(failed >= 1); i++) {
  failed = await metric(srv2.port, "inferx:trace_exports_failed_total");
  if (!(failed >= 1)) await sleep(100);
}
assert.ok(failed >= 1, "a batch the collector never answered counts as failed");
assert.match(srv2.log(), /tracing: \d+ spans not exported/);
await stop(srv2);
for (const s of held) s.destroy();
sink.close();
collector.close();
console.log(`otlp_test: ok (${spans.length} spans decoded)`);
