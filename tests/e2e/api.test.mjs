// End-to-end tests of the API features beyond plain generation, with the official openai
// client: tool calls, structured output, reasoning, n / best_of, logit_bias, stop_token_ids
// and the other request fields, and the extra endpoints. The server runs with
// --tool-call-parser auto --reasoning-parser qwen3 (api_test.sh). The bundled model never
// learned tool calls or JSON, so those replies come from constrained decoding; every one is
// checked here against its schema by the small validator below, not by the server's code.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.BASE_URL + "/v1", apiKey: "none", maxRetries: 0 });
const MODEL = process.env.SERVED_MODEL;
const prompt = "It is a truth universally acknowledged, that";

async function post(path, body, method = "POST") {
  const r = await fetch(process.env.BASE_URL + path, {
    method, headers: { "Content-Type": "application/json" },
    body: method === "POST" ? JSON.stringify(body) : undefined,
  });
  return { status: r.status, json: await r.json().catch(() => null) };
}
const tokenize = async (text) => (await post("/tokenize", { prompt: text })).json.tokens;
const detokenize = async (ids) => (await post("/detokenize", { tokens: ids })).json.prompt;

function golden() {
  const g = JSON.parse(readFileSync(process.env.GOLDEN_FILE, "utf8"));
  return g.prompts.find((p) => p.prompt === prompt);
}

// JSON Schema, the subset the tests use: type, properties, required, additionalProperties,
// items, min/maxItems, enum, const, anyOf, $ref into $defs, min/maxLength, minimum/maximum.
function validate(schema, v, root = schema, path = "$") {
  const fail = (why) => { throw new Error(`${path}: ${why} (${JSON.stringify(v)})`); };
  if (schema.$ref) return validate(root.$defs[schema.$ref.replace("#/$defs/", "")], v, root, path);
  if (schema.anyOf) {
    if (!schema.anyOf.some((s) => { try { validate(s, v, root, path); return true; } catch { return false; } })) fail("no anyOf branch");
    return;
  }
  if ("const" in schema && JSON.stringify(schema.const) !== JSON.stringify(v)) fail("const");
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) fail("enum");
  const type = v === null ? "null" : Array.isArray(v) ? "array" : Number.isInteger(v) ? "integer" : typeof v;
  if (schema.type && !(schema.type === type || (schema.type === "number" && type === "integer"))) fail(`type ${schema.type}`);
  if (type === "string") {
    const n = [...v].length;
    if (n < (schema.minLength ?? 0) || n > (schema.maxLength ?? Infinity)) fail("length");
  }
  if (type === "integer" || type === "number") {
    if (v < (schema.minimum ?? -Infinity) || v > (schema.maximum ?? Infinity)) fail("range");
  }
  if (type === "array") {
    if (v.length < (schema.minItems ?? 0) || v.length > (schema.maxItems ?? Infinity)) fail("items");
    v.forEach((x, i) => schema.items && validate(schema.items, x, root, `${path}[${i}]`));
  }
  if (type === "object") {
    for (const k of schema.required ?? []) if (!(k in v)) fail(`missing ${k}`);
    for (const [k, x] of Object.entries(v)) {
      if (schema.properties?.[k]) validate(schema.properties[k], x, root, `${path}.${k}`);
      else if (schema.additionalProperties === false) fail(`extra ${k}`);
    }
  }
}

const weather = {
  type: "function",
  function: {
    name: "get_weather", description: "Weather in a city",
    parameters: {
      type: "object", additionalProperties: false, required: ["city", "unit"],
      properties: { city: { type: "string", minLength: 1, maxLength: 12 }, unit: { enum: ["celsius", "fahrenheit"] } },
    },
  },
};
const clock = {
  type: "function",
  function: {
    name: "get_time",
    parameters: { type: "object", additionalProperties: false, required: ["zone"], properties: { zone: { type: "integer", minimum: -12, maximum: 14 } } },
  },
};
const tools = [weather, clock];
const schemaOf = (name) => tools.find((t) => t.function.name === name).function.parameters;
const ask = [{ role: "user", content: "What is the weather in Paris?" }];

function checkCall(call, name) {
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  assert.equal(call.type, "function");
  if (name) assert.equal(call.function.name, name);
  validate(schemaOf(call.function.name), JSON.parse(call.function.arguments));
}

test("tool call round trip: a required call, its result, then a final answer (not streamed)", async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages: ask, tools, tool_choice: "required", parallel_tool_calls: false, temperature: 0, max_tokens: 120,
  });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, "tool_calls");
  assert.equal(m.tool_calls.length, 1);
  checkCall(m.tool_calls[0]);
  const history = [...ask, { role: "assistant", content: null, tool_calls: m.tool_calls },
    { role: "tool", tool_call_id: m.tool_calls[0].id, content: '{"temperature": 21}' }];
  // The call and its result render back through the template, arguments as an object.
  const rendered = await detokenize((await post("/tokenize", { messages: history, tools })).json.tokens);
  assert.ok(rendered.includes(`<tool_call>\n{"name": "${m.tool_calls[0].function.name}", "arguments": {`), rendered);
  assert.ok(rendered.includes('<tool_response>\n{"temperature": 21}\n</tool_response>'), rendered);
  const done = await client.chat.completions.create({ model: MODEL, messages: history, tools, tool_choice: "none", temperature: 0, max_tokens: 8 });
  assert.equal(typeof done.choices[0].message.content, "string");
  assert.ok(!done.choices[0].message.tool_calls?.length);
  assert.notEqual(done.choices[0].finish_reason, "tool_calls");
});

test("tool call round trip, streamed: delta.tool_calls as vLLM sends them", async () => {
  const stream = await client.chat.completions.create({
    model: MODEL, messages: ask, tools, tool_choice: "required", parallel_tool_calls: false, temperature: 0, max_tokens: 120, stream: true,
  });
  const calls = [];
  let finish = null, content = "";
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    content += c.delta?.content ?? "";
    for (const d of c.delta?.tool_calls ?? []) {
      if (d.id) calls[d.index] = { id: d.id, type: d.type, function: { name: d.function.name, arguments: d.function.arguments ?? "" } };
      else calls[d.index].function.arguments += d.function.arguments;
    }
    finish = c.finish_reason ?? finish;
  }
  assert.equal(finish, "tool_calls");
  assert.equal(calls.length, 1);
  checkCall(calls[0]);
  assert.equal(content.trim(), "");
  // Streamed and whole replies carry the same call.
  const whole = await client.chat.completions.create({
    model: MODEL, messages: ask, tools, tool_choice: "required", parallel_tool_calls: false, temperature: 0, max_tokens: 120,
  });
  assert.equal(whole.choices[0].message.tool_calls[0].function.arguments, calls[0].function.arguments);
});

test("tool_choice required and named always produce a valid call", async () => {
  for (let seed = 1; seed <= 6; ++seed) {
    const named = seed % 2 === 0 ? "get_time" : "get_weather";
    for (const tool_choice of ["required", { type: "function", function: { name: named } }]) {
      const r = await client.chat.completions.create({
        model: MODEL, messages: ask, tools, tool_choice, parallel_tool_calls: false, temperature: 1, seed, max_tokens: 120,
      });
      const calls = r.choices[0].message.tool_calls;
      assert.equal(calls.length, 1, JSON.stringify(r.choices[0]));
      checkCall(calls[0], typeof tool_choice === "string" ? undefined : named);
    }
  }
  // A named function that is not among the tools is the client's error.
  await assert.rejects(client.chat.completions.create({ model: MODEL, messages: ask, tools, tool_choice: { type: "function", function: { name: "nope" } } }),
    (e) => e.status === 400);
});

const schemas = [
  { type: "object", additionalProperties: false, required: ["name", "age"],
    properties: { name: { type: "string", minLength: 1, maxLength: 10 }, age: { type: "integer", minimum: 0, maximum: 120 } } },
  { type: "array", items: { enum: ["red", "green", "blue"] }, minItems: 1, maxItems: 4 },
  { type: "object", additionalProperties: false, required: ["point", "label"],
    properties: { point: { $ref: "#/$defs/pt" }, label: { type: "string", maxLength: 8 } },
    $defs: { pt: { type: "object", additionalProperties: false, required: ["x", "y"],
      properties: { x: { type: "integer", minimum: -99, maximum: 99 }, y: { type: "integer", minimum: -99, maximum: 99 } } } } },
  { anyOf: [{ type: "boolean" }, { type: "null" }, { const: "yes" }, { type: "integer", minimum: 1, maximum: 9 }] },
  { type: "object", required: ["ok", "tags"], additionalProperties: false,
    properties: { ok: { type: "boolean" }, tags: { type: "array", maxItems: 3, items: { type: "string", maxLength: 5 } }, note: { type: "string", maxLength: 6 } } },
];

test("response_format json_schema: five schemas, every reply valid", async () => {
  for (const [i, schema] of schemas.entries()) {
    for (const seed of [1, 2, 3]) {
      const r = await client.chat.completions.create({
        model: MODEL, messages: [{ role: "user", content: "Answer in JSON." }], temperature: 1, seed, max_tokens: 200,
        response_format: { type: "json_schema", json_schema: { name: `s${i}`, schema, strict: true } },
      });
      const text = r.choices[0].message.content;
      assert.equal(r.choices[0].finish_reason, "stop", `schema ${i}: ${text}`);
      const value = JSON.parse(text);
      validate(schema, value);
      // Members come in the schema's order, as OpenAI's strict mode writes them.
      if (schema.properties) {
        const order = Object.keys(schema.properties);
        assert.deepEqual(Object.keys(value), order.filter((k) => k in value), text);
      }
    }
  }
  // A schema outside the subset is refused naming the keyword, never loosened.
  await assert.rejects(client.chat.completions.create({ model: MODEL, messages: ask,
    response_format: { type: "json_schema", json_schema: { name: "x", schema: { not: { type: "string" } } } } }),
  (e) => e.status === 400 && /not/.test(e.message));
});

test("structured outputs: json_object, regex and choice", async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages: ask, temperature: 0, max_tokens: 300, response_format: { type: "json_object" } });
  if (r.choices[0].finish_reason === "stop") assert.equal(typeof JSON.parse(r.choices[0].message.content), "object");
  else assert.match(r.choices[0].message.content, /^\{/);
  for (const seed of [1, 2, 3, 4]) {
    const c = await client.completions.create({ model: MODEL, prompt, temperature: 1, seed, max_tokens: 20, guided_regex: "[0-9]{3}-[a-z]{2}" });
    assert.match(c.choices[0].text, /^[0-9]{3}-[a-z]{2}$/);
    const d = await client.completions.create({ model: MODEL, prompt, temperature: 1, seed, max_tokens: 20, structured_outputs: { choice: ["yes", "no", "maybe"] } });
    assert.ok(["yes", "no", "maybe"].includes(d.choices[0].text), d.choices[0].text);
  }
});

test("reasoning: <think> goes to reasoning_content, streamed and not", async () => {
  // The bundled model does not think by itself: a regex makes it write a think block.
  const body = { model: MODEL, messages: ask, temperature: 1, seed: 5, max_tokens: 80,
    guided_regex: "<think>\n[a-z ]{1,24}\n</think>\n\n[A-Za-z ]{1,16}" };
  const r = await client.chat.completions.create(body);
  const m = r.choices[0].message;
  assert.match(m.reasoning_content, /^[a-z ]{1,24}$/);
  assert.match(m.content, /^[A-Za-z ]{1,16}$/);
  let reasoning = "", content = "";
  for await (const chunk of await client.chat.completions.create({ ...body, stream: true })) {
    reasoning += chunk.choices[0]?.delta?.reasoning_content ?? "";
    content += chunk.choices[0]?.delta?.content ?? "";
  }
  assert.equal(reasoning, m.reasoning_content);
  assert.equal(content, m.content);
  // enable_thinking false closes an empty think block in the prompt, as the template says.
  const off = await post("/tokenize", { messages: ask, chat_template_kwargs: { enable_thinking: false } });
  assert.ok((await detokenize(off.json.tokens)).endsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
});

test("n = 4: four choices, seeded, usage over all of them; streamed with indexes", async () => {
  const body = { model: MODEL, prompt, n: 4, temperature: 1, seed: 7, max_tokens: 6 };
  const a = await client.completions.create(body);
  const b = await client.completions.create(body);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2, 3]);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  assert.ok(new Set(a.choices.map((c) => c.text)).size > 1, "four samples, all equal");
  assert.equal(a.usage.completion_tokens, 24);
  const texts = ["", "", "", ""], reasons = [];
  for await (const chunk of await client.completions.create({ ...body, stream: true })) {
    for (const c of chunk.choices) {
      texts[c.index] += c.text;
      if (c.finish_reason) reasons[c.index] = c.finish_reason;
    }
  }
  assert.deepEqual(texts, a.choices.map((c) => c.text));
  assert.deepEqual(reasons, ["length", "length", "length", "length"]);
  const chat = await client.chat.completions.create({ model: MODEL, messages: ask, n: 3, temperature: 0, max_tokens: 5 });
  assert.equal(chat.choices.length, 3);
  assert.equal(new Set(chat.choices.map((c) => c.message.content)).size, 1, "greedy choices differ");
});

test("n = 4 shares the prompt's KV: three choices find it in the prefix cache", async () => {
  const metric = async (name) => {
    const text = await (await fetch(process.env.BASE_URL + "/metrics")).text();
    return Number(text.split("\n").find((l) => l.startsWith(name + " ")).split(" ")[1]);
  };
  const long = Array(12).fill(prompt).join(" ") + " and so";
  const n = (await tokenize(long)).length;
  const before = await metric("mxserve_prefix_cache_hits_total");
  await client.completions.create({ model: MODEL, prompt: long, n: 4, temperature: 1, seed: 2, max_tokens: 4 });
  const hits = (await metric("mxserve_prefix_cache_hits_total")) - before;
  // Full 16-token blocks only, and the last prompt token is always computed.
  assert.ok(hits >= 3 * 16 * Math.floor((n - 1) / 16), `${hits} hits for a ${n}-token prompt`);
});

test("best_of returns the candidate with the highest cumulative log-probability", async () => {
  const base = { model: MODEL, prompt, temperature: 1, seed: 11, max_tokens: 6 };
  const all = await client.completions.create({ ...base, n: 3, logprobs: 0 });
  const sums = all.choices.map((c) => c.logprobs.token_logprobs.reduce((x, y) => x + y, 0));
  const best = all.choices[sums.indexOf(Math.max(...sums))].text;
  const r = await client.completions.create({ ...base, n: 1, best_of: 3 });
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].text, best);
  await assert.rejects(client.completions.create({ ...base, n: 2, best_of: 1 }), (e) => e.status === 400 && /best_of/.test(e.message));
});

test("logit_bias forces a token", async () => {
  const [id] = await tokenize(" the");
  const r = await client.completions.create({ model: MODEL, prompt, temperature: 1, seed: 1, max_tokens: 5, logit_bias: { [id]: 100 } });
  assert.equal(r.choices[0].text, " the".repeat(5));
  await assert.rejects(client.completions.create({ model: MODEL, prompt, logit_bias: { 999999: 5 } }), (e) => e.status === 400 && /logit_bias/.test(e.message));
  await assert.rejects(client.completions.create({ model: MODEL, prompt, logit_bias: { [id]: 101 } }), (e) => e.status === 400);
});

test("stop_token_ids, min_tokens, ignore_eos and include_stop_str_in_output", async () => {
  const g = golden();
  const ids = g.greedy_32_ids, k = ids.findIndex((t, i) => i >= 2 && !ids.slice(0, i).includes(t));
  const base = { model: MODEL, prompt, temperature: 0, max_tokens: 8 };
  let r = await client.completions.create({ ...base, stop_token_ids: [ids[k]] });
  assert.equal(r.choices[0].text, await detokenize(ids.slice(0, k)));
  assert.equal(r.choices[0].finish_reason, "stop");
  assert.equal(r.choices[0].stop_reason, ids[k]);
  // min_tokens: the stop token cannot come before it.
  r = await client.completions.create({ ...base, stop_token_ids: [ids[0]], max_tokens: 6 });
  assert.equal(r.usage.completion_tokens, 1);
  r = await client.completions.create({ ...base, stop_token_ids: [ids[0]], max_tokens: 6, min_tokens: 4 });
  assert.ok(r.usage.completion_tokens >= 5, JSON.stringify(r.usage));
  // ignore_eos: the end token forced by logit_bias no longer ends the output.
  const [eos] = await tokenize("<|endoftext|>");
  r = await client.completions.create({ ...base, logit_bias: { [eos]: 100 } });
  assert.equal(r.choices[0].finish_reason, "stop");
  assert.equal(r.usage.completion_tokens, 1);
  r = await client.completions.create({ ...base, logit_bias: { [eos]: 100 }, ignore_eos: true, max_tokens: 4 });
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.completion_tokens, 4);
  // A stop string: cut before it, or kept with include_stop_str_in_output.
  const text = await detokenize(ids.slice(0, 8));
  const stop = text.slice(6, 9);
  r = await client.completions.create({ ...base, stop: [stop] });
  assert.equal(r.choices[0].text, text.slice(0, text.indexOf(stop)));
  assert.equal(r.choices[0].stop_reason, stop);
  r = await client.completions.create({ ...base, stop: [stop], include_stop_str_in_output: true });
  assert.equal(r.choices[0].text, text.slice(0, text.indexOf(stop) + stop.length));
});

test("echo, and prompts given as lists of strings or of token lists", async () => {
  const base = { model: MODEL, temperature: 0, max_tokens: 4 };
  const one = await client.completions.create({ ...base, prompt });
  const echoed = await client.completions.create({ ...base, prompt, echo: true });
  assert.equal(echoed.choices[0].text, prompt + one.choices[0].text);
  let streamed = "";
  for await (const chunk of await client.completions.create({ ...base, prompt, echo: true, stream: true })) streamed += chunk.choices[0]?.text ?? "";
  assert.equal(streamed, prompt + one.choices[0].text);
  const other = "The Devil's Dictionary defines";
  const two = await client.completions.create({ ...base, prompt: [prompt, other] });
  const alone = await client.completions.create({ ...base, prompt: other });
  assert.deepEqual(two.choices.map((c) => [c.index, c.text]), [[0, one.choices[0].text], [1, alone.choices[0].text]]);
  const lists = await client.completions.create({ ...base, prompt: [await tokenize(prompt), await tokenize(other)] });
  assert.deepEqual(lists.choices.map((c) => c.text), two.choices.map((c) => c.text));
  await assert.rejects(client.completions.create({ ...base, prompt, echo: true, logprobs: 1 }), (e) => e.status === 400 && /echo/.test(e.message));
});

test("unsupported fields are a 400 naming them; unknown ones are ignored", async () => {
  const base = { model: MODEL, prompt, max_tokens: 2 };
  for (const [field, value] of [["suffix", "x"], ["use_beam_search", true], ["prompt_logprobs", 1], ["guided_grammar", "root ::= \"a\""]]) {
    const r = await post("/v1/completions", { ...base, [field]: value });
    assert.equal(r.status, 400, field);
    assert.equal(r.json.error.param, field);
    assert.match(r.json.error.message, new RegExp(field));
  }
  assert.equal((await post("/v1/completions", { ...base, use_beam_search: false, suffix: null })).status, 200);
  assert.equal((await post("/v1/completions", { ...base, some_future_field: { a: 1 } })).status, 200);
  assert.equal((await post("/v1/chat/completions", { ...base, prompt: undefined, messages: ask, echo: true })).status, 400);
});

test("endpoints: models.retrieve, /tokenize, /detokenize, /version, 405, random ids", async () => {
  assert.equal((await client.models.retrieve(MODEL)).id, MODEL);
  await assert.rejects(client.models.retrieve("nope"), (e) => e.status === 404);
  const t = await post("/tokenize", { prompt });
  assert.equal(t.status, 200);
  assert.equal(t.json.count, t.json.tokens.length);
  assert.deepEqual(t.json.tokens, golden().input_ids);
  assert.ok(t.json.max_model_len > 0);
  assert.equal(await detokenize(t.json.tokens), prompt);
  assert.equal((await post("/detokenize", { tokens: [1e9] })).status, 400);
  const v = await post("/version", null, "GET");
  assert.match(v.json.version, /^\d+\.\d+\.\d+/);
  assert.equal((await post("/tokenize", null, "GET")).status, 405);
  const a = await client.chat.completions.create({ model: MODEL, messages: ask, max_tokens: 1 });
  const b = await client.chat.completions.create({ model: MODEL, messages: ask, max_tokens: 1 });
  assert.match(a.id, /^chatcmpl-[0-9a-f]{32}$/);
  assert.notEqual(a.id, b.id);
});
