// What agent frameworks ask through the official `openai` npm client:
// structured outputs on 100 random schemas (parsed by the client; the texts
// are written to OUT_FILE for the reference validator), a forced tool call
// streamed as tool_calls deltas, n choices, and logit_bias / penalties.
// Usage: node agents.mjs BASE_URL MODEL OUT_FILE
import assert from "node:assert/strict";
import fs from "node:fs";
import OpenAI from "openai";

const [baseURL, model, outFile] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
const ask = (content) => [{ role: "user", content }];

// ---- structured outputs: 100 random schemas (objects at the root, as OpenAI's strict mode wants)
function random(seed) {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296);
}
function schemaOf(r, depth) {
  const pick = Math.floor(r() * (depth >= 2 ? 7 : 10));
  switch (pick) {
    case 0: return { type: "string", maxLength: 1 + Math.floor(r() * 12) };
    case 1: return { type: "integer" };
    case 2: return { type: "number" };
    case 3: return { type: "boolean" };
    case 4: return { type: ["string", "null"], maxLength: 6 };
    case 5: return { enum: ["low", "mid", "high", 7, null] };
    case 6: return { anyOf: [{ type: "integer" }, { type: "string", maxLength: 4 }] };
    case 7: case 8: return objectOf(r, depth + 1);
    default: return { type: "array", items: schemaOf(r, depth + 1), maxItems: 1 + Math.floor(r() * 3) };
  }
}
function objectOf(r, depth) {
  const names = ["id", "title", "count", "tags", "ok", "score", "note", "kind"];
  const properties = {};
  const n = 1 + Math.floor(r() * 4);
  for (let i = 0; i < n; i++) properties[names[Math.floor(r() * names.length)]] = schemaOf(r, depth);
  return { type: "object", properties, required: Object.keys(properties), additionalProperties: false };
}
const cases = [];
const batches = [];
for (let i = 0; i < 100; i++) cases.push({ i, schema: objectOf(random(1000 + i), 0) });
for (let b = 0; b < cases.length; b += 20) batches.push(cases.slice(b, b + 20));
const texts = [];
for (const batch of batches) {
  const answers = await Promise.all(batch.map(({ i, schema }) => client.chat.completions.parse({
    model, messages: ask(`Answer number ${i}`), max_tokens: 300, temperature: 0.8, seed: i,
    response_format: { type: "json_schema", json_schema: { name: `answer_${i}`, strict: true, schema } },
  })));
  answers.forEach((a, k) => {
    const message = a.choices[0].message;
    assert.notEqual(message.parsed, null, `answer ${batch[k].i} did not parse: ${message.content}`);
    assert.deepEqual(message.parsed, JSON.parse(message.content));
    texts.push(JSON.stringify({ schema: batch[k].schema, text: message.content }));
  });
}
fs.writeFileSync(outFile, texts.join("\n") + "\n");

// ---- a forced tool call, streamed: the client assembles the deltas
const tools = [{
  type: "function",
  function: {
    name: "get_weather", description: "Weather for a city",
    parameters: {
      type: "object", properties: { city: { type: "string", maxLength: 16 }, days: { type: "integer" } },
      required: ["city", "days"], additionalProperties: false,
    },
  },
}, { type: "function", function: { name: "get_time", parameters: { type: "object", properties: {} } } }];
const forced = { model, messages: ask("Weather in Paris?"), tools, max_tokens: 120, temperature: 0.7, seed: 5,
                 tool_choice: { type: "function", function: { name: "get_weather" } } };
const stream = client.chat.completions.stream(forced);
let argumentDeltas = 0;
stream.on("tool_calls.function.arguments.delta", () => argumentDeltas++);
const streamed = await stream.finalChatCompletion();
const call = streamed.choices[0].message.tool_calls[0];
assert.equal(streamed.choices[0].finish_reason, "tool_calls");
assert.equal(call.type, "function");
assert.equal(call.function.name, "get_weather");
const args = JSON.parse(call.function.arguments);
assert.equal(typeof args.city, "string");
assert.ok(Number.isInteger(args.days));
assert.ok(argumentDeltas >= 2, `arguments came in ${argumentDeltas} delta(s)`);
const whole = await client.chat.completions.create(forced);
assert.deepEqual(JSON.parse(whole.choices[0].message.tool_calls[0].function.arguments), args);
const required = await client.chat.completions.create({ ...forced, tool_choice: "required", seed: 9 });
assert.ok(["get_weather", "get_time"].includes(required.choices[0].message.tool_calls[0].function.name));

// ---- n choices
const four = await client.chat.completions.create({
  model, messages: ask("Say something"), max_tokens: 12, temperature: 0.9, seed: 3, n: 4 });
assert.deepEqual(four.choices.map((c) => c.index), [0, 1, 2, 3]);
assert.ok(new Set(four.choices.map((c) => c.message.content)).size >= 2, "four choices, one answer");
const one = await client.chat.completions.create({
  model, messages: ask("Say something"), max_tokens: 12, temperature: 0.9, seed: 3 });
assert.equal(four.choices[0].message.content, one.choices[0].message.content);
const fourStreamed = await client.chat.completions.stream({
  model, messages: ask("Say something"), max_tokens: 12, temperature: 0.9, seed: 3, n: 4 }).finalChatCompletion();
assert.deepEqual(fourStreamed.choices.map((c) => c.message.content), four.choices.map((c) => c.message.content));

// ---- logit_bias and penalties, seen in the token ids (tandem's return_token_ids)
const greedy = async (extra) => (await client.chat.completions.create({
  model, messages: ask("Count"), max_tokens: 12, temperature: 0, ignore_eos: true, return_token_ids: true, ...extra,
})).choices[0].token_ids;
const base = await greedy({});
assert.notEqual((await greedy({ logit_bias: { [base[0]]: -100 } }))[0], base[0]);
assert.ok((await greedy({ logit_bias: { 300: 100 } })).every((t) => t === 300));
let bias = 0;  // the least bias that makes token 300 the whole answer; a penalty then breaks the run
for (; bias <= 100 && !(await greedy({ logit_bias: { 300: bias } })).every((t) => t === 300); bias += 1);
assert.ok(bias <= 100);
assert.ok(!(await greedy({ logit_bias: { 300: bias }, frequency_penalty: 2 })).every((t) => t === 300));
assert.ok(!(await greedy({ logit_bias: { 300: bias }, presence_penalty: 2 })).every((t) => t === 300));
console.log(`openai client: 100 structured answers, a streamed forced tool call (${argumentDeltas} argument deltas), ` +
            "n = 4, logit_bias and penalties parsed");
