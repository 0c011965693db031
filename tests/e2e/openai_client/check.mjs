// The official `openai` npm client against a tandem server: what it parses
// must be what tandem sends. Usage: node check.mjs BASE_URL MODEL
import assert from "node:assert/strict";
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused" });

// Chat logprobs: one entry per generated token, alternatives most likely first.
const chat = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Tell me about the sea" }],
  max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2,
});
const content = chat.choices[0].logprobs.content;
assert.equal(content.length, chat.usage.completion_tokens);
for (const e of content) {
  assert.equal(typeof e.token, "string");
  assert.ok(e.logprob <= 0);
  assert.equal(e.top_logprobs.length, 2);
  assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
  assert.ok(Array.isArray(e.bytes));
}
assert.equal(content.map((e) => e.token).join(""), chat.choices[0].message.content);

// Streamed, the same entries arrive with the text they belong to.
const stream = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Tell me about the sea" }],
  max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2, stream: true,
});
const streamed = [];
for await (const chunk of stream) {
  const lp = chunk.choices[0]?.logprobs;
  if (lp?.content) streamed.push(...lp.content);
}
assert.deepEqual(streamed, content);

// Completions with echo: the prompt's tokens first, the first without a logprob.
const echo = await client.completions.create({
  model, prompt: "Once upon a time", max_tokens: 4, temperature: 0, logprobs: 2, echo: true,
});
const lp = echo.choices[0].logprobs;
assert.equal(lp.tokens.length, echo.usage.prompt_tokens + 4);
assert.equal(lp.token_logprobs[0], null);
assert.ok(lp.token_logprobs.slice(1).every((v) => v <= 0));
assert.ok(echo.choices[0].text.startsWith("Once upon a time"));
console.log("openai client: chat logprobs, streamed logprobs and completions echo parsed");
