// End-to-end: LangChain JS (@langchain/openai) against `inferx serve`.
// Usage: node langchain_test.mjs BASE_URL API_KEY   (run by run_sdk_test.sh)
import assert from 'node:assert/strict';
import { ChatOpenAI, OpenAIEmbeddings } from '@langchain/openai';
import { z } from 'zod';

const [baseURL, apiKey] = process.argv.slice(2);
const models = await (await fetch(`${baseURL}/models`, { headers: { Authorization: `Bearer ${apiKey}` } })).json();
const model = models.data[0].id;
const configuration = { baseURL };

// Chat Completions and, with useResponsesApi, the Responses API
for (const useResponsesApi of [false, true]) {
  const llm = new ChatOpenAI({ model, apiKey, configuration, temperature: 0, maxTokens: 8, maxRetries: 0,
    useResponsesApi });
  const msg = await llm.invoke([['system', 'Answer briefly.'], ['human', 'Hello']]);
  assert.equal(typeof msg.content === 'string' ? msg.content : msg.text, msg.text);
  assert.ok(msg.usage_metadata.output_tokens >= 1 && msg.usage_metadata.output_tokens <= 8);
  let streamed = '';
  for await (const chunk of await llm.stream('Hello')) streamed += chunk.text;
  assert.equal(typeof streamed, 'string');
}

// withStructuredOutput (json_schema response_format / text.format): validates
const Person = z.object({
  name: z.string().max(12),
  age: z.number().int().min(0).max(120),
  role: z.enum(['captain', 'sailor']),
});
// Greedy, with room: sampled at temperature 1 the bundled model may spend its tokens on the whitespace
// the JSON grammar allows between tokens and end at the length limit (a truncated object, which the
// client cannot parse: about 1 run in 20 at 120 tokens); greedy takes 110 tokens here.
for (const useResponsesApi of [false, true]) {
  const llm = new ChatOpenAI({ model, apiKey, configuration, temperature: 0, maxTokens: 400, maxRetries: 0,
    useResponsesApi });
  const person = await llm.withStructuredOutput(Person, { name: 'person', method: 'jsonSchema' })
    .invoke('Who is on deck?');
  Person.parse(person);
}

// bindTools: a forced call, well formed, with and without the Responses API
const getWeather = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'],
      additionalProperties: false },
  },
};
for (const useResponsesApi of [false, true]) {
  const llm = new ChatOpenAI({ model, apiKey, configuration, maxTokens: 200, maxRetries: 0, useResponsesApi });
  const msg = await llm.bindTools([getWeather], { tool_choice: 'get_weather', parallel_tool_calls: false })
    .invoke('What is the weather in Bath?');
  assert.equal(msg.tool_calls.length, 1);
  assert.equal(msg.tool_calls[0].name, 'get_weather');
  assert.equal(typeof msg.tool_calls[0].args.city, 'string');
  assert.ok(msg.tool_calls[0].id);
}

// Embeddings
const emb = new OpenAIEmbeddings({ model, apiKey, configuration, maxRetries: 0 });
const [v1, v2] = await emb.embedDocuments(['Mr. Darcy', 'Pemberley']);
const q = await emb.embedQuery('Mr. Darcy');
assert.ok(q.every((v, i) => Math.abs(v - v1[i]) < 1e-6));
assert.notDeepEqual(v1, v2);

console.log('langchain test: ok');
