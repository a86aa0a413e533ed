// End-to-end: the official OpenAI Node SDK against `inferx serve`.
// Usage: node sdk_test.mjs BASE_URL API_KEY   (run by run_sdk_test.sh)
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { zodResponseFormat, zodTextFormat } from 'openai/helpers/zod';
import { z } from 'zod';

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30000 });

const models = await client.models.list();
assert.equal(models.data.length, 1);
const model = models.data[0].id;

const cmpl = await client.completions.create({ model, prompt: 'Mr. Darcy', max_tokens: 8, temperature: 0 });
assert.equal(cmpl.object, 'text_completion');
assert.ok(cmpl.id.startsWith('cmpl-'));
assert.equal(typeof cmpl.choices[0].text, 'string');
assert.ok(cmpl.usage.completion_tokens >= 1 && cmpl.usage.completion_tokens <= 8);

const chat = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, temperature: 0,
  logprobs: true, top_logprobs: 2,
});
assert.equal(chat.object, 'chat.completion');
assert.equal(chat.choices[0].message.role, 'assistant');
assert.equal(chat.choices[0].logprobs.content.length, chat.usage.completion_tokens);

// Streaming: the SDK parses the SSE; deltas add up to the non-streaming answer.
const stream = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, temperature: 0,
  stream: true, stream_options: { include_usage: true },
});
let text = '', usage = null, finish = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    text += c.delta.content ?? '';
    if (c.finish_reason) finish = c.finish_reason;
  }
}
assert.equal(text, chat.choices[0].message.content);
assert.equal(usage.completion_tokens, chat.usage.completion_tokens);
assert.ok(finish === 'length' || finish === 'stop');

// GET /v1/models/{id}
const retrieved = await client.models.retrieve(model);
assert.equal(retrieved.id, model);
await assert.rejects(client.models.retrieve('gpt-4o'), (e) => e instanceof OpenAI.NotFoundError);

// Responses API: the whole object, then the same request streamed.
const rsp = await client.responses.create({
  model, instructions: 'Answer briefly.', input: 'Hello', max_output_tokens: 8, temperature: 0,
});
assert.equal(rsp.object, 'response');
assert.ok(rsp.id.startsWith('resp_'));
assert.ok(rsp.status === 'completed' || rsp.status === 'incomplete');
assert.equal(rsp.output[0].type, 'message');
assert.equal(typeof rsp.output_text, 'string'); // the SDK's own concatenation of the output_text parts
assert.ok(rsp.usage.output_tokens >= 1 && rsp.usage.output_tokens <= 8);
assert.equal(rsp.usage.total_tokens, rsp.usage.input_tokens + rsp.usage.output_tokens);

const rstream = await client.responses.create({
  model, instructions: 'Answer briefly.', input: [{ role: 'user', content: 'Hello' }],
  max_output_tokens: 8, temperature: 0, stream: true,
});
const types = [];
let rtext = '', last = null;
for await (const ev of rstream) {
  types.push(ev.type);
  if (ev.type === 'response.output_text.delta') rtext += ev.delta;
  last = ev;
}
assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress',
  'response.output_item.added', 'response.content_part.added']);
assert.deepEqual(types.slice(-4, -1), ['response.output_text.done', 'response.content_part.done',
  'response.output_item.done']);
assert.ok(last.type === 'response.completed' || last.type === 'response.incomplete');
assert.equal(rtext, rsp.output_text);
assert.equal(last.response.usage.output_tokens, rsp.usage.output_tokens);

// The SDK's stream helper accumulates the events into the final response.
const helper = client.responses.stream({ model, input: 'Hello', max_output_tokens: 4, temperature: 0 });
const final = await helper.finalResponse();
assert.equal(final.output[0].content[0].type, 'output_text');

// Embeddings: float (the SDK asks for base64 and decodes it) and a batch.
const emb = await client.embeddings.create({ model, input: ['Mr. Darcy', 'Mr. Darcy', 'Pemberley'] });
assert.equal(emb.data.length, 3);
const [a, b, c] = emb.data.map((d) => d.embedding);
const dot = (x, y) => x.reduce((s, v, i) => s + v * y[i], 0);
assert.ok(Math.abs(dot(a, a) - 1) < 1e-4, 'unit norm');
assert.deepEqual(a, b);
assert.ok(dot(a, c) < 0.9999, 'different texts differ');
assert.equal(emb.usage.prompt_tokens, emb.usage.total_tokens);
const single = await client.embeddings.create({ model, input: 'Pemberley', encoding_format: 'float' });
assert.ok(single.data[0].embedding.every((v, i) => Math.abs(v - c[i]) < 1e-6));
await assert.rejects(client.embeddings.create({ model, input: 'x', dimensions: 3 }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === 'dimensions');

// Structured outputs: a zod schema through chat.completions.parse and
// responses.parse. The bundled model writes nonsense; constrained decoding
// keeps it to the schema, so the SDK's parse (JSON.parse + zod) succeeds.
const Person = z.object({
  name: z.string().max(12),
  age: z.number().int().min(0).max(120),
  role: z.enum(['captain', 'sailor']),
});
const parsed = await client.chat.completions.parse({
  model, messages: [{ role: 'user', content: 'Who is on deck?' }], max_tokens: 120, seed: 1,
  response_format: zodResponseFormat(Person, 'person'),
});
assert.equal(parsed.choices[0].finish_reason, 'stop');
Person.parse(parsed.choices[0].message.parsed);
// Greedy, so the answer is the same every run (110 tokens on AVX-512), with
// room to spare: sampled, the bundled model's schema-bound answers ran
// 41-120 tokens, and one run in ~80 hit a limit of 120.
const rparsed = await client.responses.parse({
  model, input: 'Who is on deck?', max_output_tokens: 400, temperature: 0,
  text: { format: zodTextFormat(Person, 'person') },
});
assert.equal(rparsed.status, 'completed');
Person.parse(rparsed.output_parsed);

// Tool calls: forced by tool_choice (constrained decoding keeps the call to
// the function's schema), answered by a tool message, whole and streamed.
// Sampled, so 200 tokens of room: the schema-bound answers above ran up to
// 120 tokens of the bundled model's whitespace and short pieces.
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'],
      additionalProperties: false },
  },
}];
const question = { role: 'user', content: 'What is the weather in Bath?' };
const forced = { type: 'function', function: { name: 'get_weather' } };
const checkCall = (call) => {
  assert.equal(call.type, 'function');
  assert.ok(call.id.length > 0);
  assert.equal(call.function.name, 'get_weather');
  const args = JSON.parse(call.function.arguments);
  assert.deepEqual(Object.keys(args), ['city']);
  assert.equal(typeof args.city, 'string');
};
const tc = await client.chat.completions.create({ model, messages: [question], tools, tool_choice: forced,
  max_tokens: 200 });
assert.equal(tc.choices[0].finish_reason, 'tool_calls');
assert.equal(tc.choices[0].message.tool_calls.length, 1);
checkCall(tc.choices[0].message.tool_calls[0]);
const back = await client.chat.completions.create({
  model, tools, max_tokens: 6,
  messages: [question, tc.choices[0].message,
    { role: 'tool', tool_call_id: tc.choices[0].message.tool_calls[0].id, content: 'Sunny, 21 C' }],
});
assert.equal(back.choices[0].message.role, 'assistant');
assert.ok(back.usage.prompt_tokens > tc.usage.prompt_tokens);
// streamed: the SDK's helper assembles the tool_calls deltas
const tstream = client.chat.completions.stream({ model, messages: [question], tools, tool_choice: 'required',
  parallel_tool_calls: false, max_tokens: 200 });
const tfinal = await tstream.finalChatCompletion();
assert.equal(tfinal.choices[0].finish_reason, 'tool_calls');
checkCall(tfinal.choices[0].message.tool_calls[0]);
// Responses: a function_call item; its output goes back as function_call_output
const rtools = [{ type: 'function', ...tools[0].function, strict: true }];
const rcall = await client.responses.create({ model, input: [question], tools: rtools,
  tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 200 });
const fc = rcall.output.find((o) => o.type === 'function_call');
assert.equal(fc.name, 'get_weather');
assert.equal(typeof JSON.parse(fc.arguments).city, 'string');
const rback = await client.responses.create({ model, tools: rtools, max_output_tokens: 6,
  input: [question, fc, { type: 'function_call_output', call_id: fc.call_id, output: 'Sunny' }] });
assert.equal(rback.output[0].type, 'message');

// Errors map to the SDK's exception classes.
await assert.rejects(
  client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], temperature: 9 }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature');
await assert.rejects(
  client.completions.create({ model: 'no-such-model', prompt: 'x' }),
  (e) => e instanceof OpenAI.NotFoundError);
const bad = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);

console.log('openai sdk test: ok');
