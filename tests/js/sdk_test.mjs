// End-to-end: the official OpenAI Node SDK against `inferx serve`.
// Usage: node sdk_test.mjs BASE_URL API_KEY   (run by run_sdk_test.sh)
import assert from 'node:assert/strict';
import OpenAI from 'openai';

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
