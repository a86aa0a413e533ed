// End-to-end: the Vercel AI SDK's default OpenAI provider (`openai(model)`,
// which speaks the Responses API) against `inferx serve`.
// Usage: node ai_sdk_test.mjs BASE_URL API_KEY   (run by run_sdk_test.sh)
import assert from 'node:assert/strict';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText, generateObject, embed, embedMany, tool, stepCountIs } from 'ai';
import { z } from 'zod';

const [baseURL, apiKey] = process.argv.slice(2);
const models = await (await fetch(`${baseURL}/models`, { headers: { Authorization: `Bearer ${apiKey}` } })).json();
const modelId = models.data[0].id;
const openai = createOpenAI({ baseURL, apiKey });

// generateText through /v1/responses
const gen = await generateText({
  model: openai(modelId), system: 'Answer briefly.', prompt: 'Hello', maxOutputTokens: 8, temperature: 0,
  maxRetries: 0,
});
assert.equal(typeof gen.text, 'string');
assert.ok(gen.usage.outputTokens >= 1 && gen.usage.outputTokens <= 8);
assert.ok(['stop', 'length'].includes(gen.finishReason), gen.finishReason);
assert.ok(gen.response.id.startsWith('resp_'));

// streamText: the deltas add up to the same greedy text
const st = streamText({
  model: openai(modelId), system: 'Answer briefly.', prompt: 'Hello', maxOutputTokens: 8, temperature: 0,
  maxRetries: 0,
});
let streamed = '';
for await (const part of st.textStream) streamed += part;
assert.equal(streamed, gen.text);
assert.equal((await st.usage).outputTokens, gen.usage.outputTokens);

// Chat Completions through the same provider
const chat = await generateText({
  model: openai.chat(modelId), prompt: 'Hello', maxOutputTokens: 4, temperature: 0, maxRetries: 0,
});
assert.equal(typeof chat.text, 'string');

// generateObject: text.format json_schema on /v1/responses; the object validates
const Person = z.object({
  name: z.string().max(12),
  age: z.number().int().min(0).max(120),
  role: z.enum(['captain', 'sailor']),
});
const obj = await generateObject({
  model: openai(modelId), schema: Person, prompt: 'Who is on deck?', maxOutputTokens: 120, maxRetries: 0, temperature: 0,
});
Person.parse(obj.object);
const objChat = await generateObject({
  model: openai.chat(modelId), schema: Person, prompt: 'Who is on deck?', maxOutputTokens: 120, maxRetries: 0, temperature: 0,
});
Person.parse(objChat.object);

// Tools: a forced call, executed by the SDK, its result sent back in a second
// step; through the Responses API and through chat.
const weather = tool({
  description: 'The weather in a city',
  inputSchema: z.object({ city: z.string().max(12) }),
  execute: async ({ city }) => `Sunny in ${city}`,
});
for (const m of [openai(modelId), openai.chat(modelId)]) {
  const res = await generateText({
    model: m, tools: { get_weather: weather }, toolChoice: { type: 'tool', toolName: 'get_weather' },
    prompt: 'What is the weather in Bath?', maxOutputTokens: 200, maxRetries: 0, stopWhen: stepCountIs(1),
    providerOptions: { openai: { parallelToolCalls: false } },
  });
  assert.equal(res.finishReason, 'tool-calls');
  assert.equal(res.toolCalls.length, 1);
  assert.equal(res.toolCalls[0].toolName, 'get_weather');
  assert.equal(typeof res.toolCalls[0].input.city, 'string');
  assert.equal(res.toolResults[0].output, `Sunny in ${res.toolCalls[0].input.city}`);
  // the second step: the tool's result goes back; the model answers
  const next = await generateText({
    model: m, tools: { get_weather: weather }, messages: [
      { role: 'user', content: 'What is the weather in Bath?' }, ...res.response.messages],
    maxOutputTokens: 6, maxRetries: 0, toolChoice: 'none',
  });
  assert.equal(typeof next.text, 'string');
}

// Embeddings
const e1 = await embed({ model: openai.embedding(modelId), value: 'Mr. Darcy', maxRetries: 0 });
const many = await embedMany({ model: openai.embedding(modelId), values: ['Mr. Darcy', 'Pemberley'], maxRetries: 0 });
assert.equal(many.embeddings.length, 2);
assert.ok(e1.embedding.every((v, i) => Math.abs(v - many.embeddings[0][i]) < 1e-6));

console.log('ai sdk test: ok');
