// inferx serve's Ollama API through the npm `ollama` client library.
//   node ollama_test.mjs http://127.0.0.1:PORT/v1 API_KEY
import assert from "node:assert/strict";
import { Ollama } from "ollama";

const [v1, key] = process.argv.slice(2);
const host = v1.replace(/\/v1$/, "");
const ollama = new Ollama({ host, headers: { Authorization: `Bearer ${key}` } });

const { version } = await ollama.version();
assert.match(version, /^\d+\.\d+\.\d+/);

const { models } = await ollama.list();
assert.equal(models.length, 1);
const model = models[0].name;
assert.match(model, /:latest$/);
assert.equal(models[0].details.format, "gguf");
assert.ok(models[0].size > 0);

const show = await ollama.show({ model });
assert.equal(show.details.family, show.model_info["general.architecture"]);
assert.ok(show.model_info["general.parameter_count"] > 0);
const ps = await ollama.ps();
assert.equal(ps.models[0].name, model);

// chat, whole and streamed: the same greedy text, Ollama's counters
const messages = [{ role: "user", content: "Who is Emma?" }];
const options = { temperature: 0, num_predict: 12 };
const whole = await ollama.chat({ model, messages, options, stream: false });
assert.equal(whole.done, true);
assert.equal(whole.done_reason, "length");
assert.equal(whole.eval_count, 12);
assert.ok(whole.prompt_eval_count > 0 && whole.total_duration > 0);
assert.ok(whole.message.content.length > 0);
let streamed = "", last = null, parts = 0;
for await (const part of await ollama.chat({ model, messages, options, stream: true })) {
  streamed += part.message.content;
  last = part;
  parts++;
}
assert.equal(streamed, whole.message.content);
assert.ok(parts > 2, "streamed in pieces");
assert.equal(last.done, true);
assert.equal(last.eval_count, 12);

// generate, whole and streamed; raw prompts too
const gen = await ollama.generate({ model, prompt: "Emma was", options: { temperature: 0, num_predict: 8 }, stream: false });
assert.equal(gen.done, true);
assert.equal(gen.eval_count, 8);
let gtext = "";
for await (const part of await ollama.generate({ model, prompt: "Emma was", options: { temperature: 0, num_predict: 8 }, stream: true }))
  gtext += part.response;
assert.equal(gtext, gen.response);
const raw = await ollama.generate({ model, prompt: "It was on this point that she had", raw: true, stream: false,
  options: { temperature: 0, num_predict: 8 } });
assert.ok(raw.response.length > 0);

// structured output: format as a JSON Schema
const schema = { type: "object", properties: { name: { type: "string", maxLength: 16 }, age: { type: "integer" } },
  required: ["name", "age"], additionalProperties: false };
const structured = await ollama.chat({ model, messages, format: schema, stream: false, options: { seed: 3, num_predict: 200 } });
const obj = JSON.parse(structured.message.content);
assert.deepEqual(Object.keys(obj).sort(), ["age", "name"]);
assert.equal(typeof obj.age, "number");

// a conversation with a tool call and its result in the history
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather of a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
const followup = await ollama.chat({ model, tools, stream: false, options: { num_predict: 8, temperature: 0 }, messages: [
  { role: "user", content: "Weather in Bath?" },
  { role: "assistant", content: "", tool_calls: [{ function: { name: "get_weather", arguments: { city: "Bath" } } }] },
  { role: "tool", content: "Rainy, 12 C" },
] });
assert.equal(followup.done, true);
assert.equal(typeof followup.message.content, "string");

// errors as Ollama gives them
await assert.rejects(ollama.chat({ model: "nope", messages, stream: false }), (e) => e.status_code === 404 && /not found/.test(e.message));
await assert.rejects(ollama.chat({ model, messages, stream: false, options: { mirostat: 2 } }),
  (e) => e.status_code === 400 && /mirostat/.test(e.message));
await assert.rejects(ollama.chat({ model, stream: false, messages: [{ role: "user", content: "x", images: ["aGk="] }] }),
  (e) => e.status_code === 400 && /images/.test(e.message));
console.log("ollama client test: passed");
