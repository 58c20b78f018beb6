// The Responses and Embeddings APIs (official openai client) and the Messages API (official
// @anthropic-ai/sdk) against `mxserve serve` started with no flags (agents_test.sh). The
// bundled model never learned tools or JSON: calls and objects come from constrained
// decoding, and every one is checked with ajv against its schema.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import Ajv2020 from "ajv/dist/2020.js";
import { readFileSync } from "node:fs";

const BASE = process.env.BASE_URL;
const MODEL = process.env.SERVED_MODEL;
const openai = new OpenAI({ baseURL: BASE + "/v1", apiKey: "k", maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: BASE, apiKey: "k", maxRetries: 0 });
const ajv = new Ajv2020({ strict: false });

const cityParams = {
  type: "object", additionalProperties: false, required: ["city", "days"],
  properties: { city: { type: "string", maxLength: 16 }, days: { type: "integer", minimum: 1, maximum: 7 } },
};
const checkArgs = (schema, args) => {
  const ok = ajv.validate(schema, typeof args === "string" ? JSON.parse(args) : args);
  assert.ok(ok, ajv.errorsText() + " " + JSON.stringify(args));
};

async function raw(path, body) {
  const r = await fetch(BASE + path, { method: "POST", headers: { "Content-Type": "application/json" }, body });
  return { status: r.status, json: await r.json() };
}

test("responses: text, instructions, usage and incomplete at max_output_tokens", async () => {
  const r = await openai.responses.create({ model: MODEL, input: "Say hello.", instructions: "Be brief.", max_output_tokens: 6 });
  assert.equal(r.object, "response");
  assert.equal(r.status, "incomplete");
  assert.equal(r.incomplete_details.reason, "max_output_tokens");
  assert.equal(r.usage.output_tokens, 6);
  assert.ok(r.output_text.length > 0);
  assert.equal(r.instructions, "Be brief.");
});

test("responses: a forced function call, its output, then previous_response_id", async () => {
  const tools = [{ type: "function", name: "weather", description: "Weather", parameters: cityParams, strict: true }];
  const r = await openai.responses.create({ model: MODEL, input: "Weather in Paris?", tools, tool_choice: "required", parallel_tool_calls: false, max_output_tokens: 200 });
  const calls = r.output.filter((o) => o.type === "function_call");
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, "weather");
  assert.match(calls[0].call_id, /^call_/);
  checkArgs(cityParams, calls[0].arguments);
  const next = await openai.responses.create({
    model: MODEL, previous_response_id: r.id, tools, tool_choice: "none", max_output_tokens: 5,
    input: [{ type: "function_call_output", call_id: calls[0].call_id, output: '{"temp": 21}' }],
  });
  assert.equal(next.previous_response_id, r.id);
  assert.ok(next.output_text.length > 0);
  const gone = await raw("/v1/responses", JSON.stringify({ model: MODEL, input: "x", previous_response_id: "resp_nope" }));
  assert.equal(gone.status, 400);
  assert.equal(gone.json.error.param, "previous_response_id");
});

test("responses: streamed typed events, a named call and text.format json_schema", async () => {
  const tools = [{ type: "function", name: "weather", parameters: cityParams }];
  const stream = await openai.responses.create({ model: MODEL, input: "Weather?", tools, tool_choice: { type: "function", name: "weather" }, parallel_tool_calls: false, max_output_tokens: 200, stream: true });
  const types = [];
  let args = "", done;
  for await (const e of stream) {
    types.push(e.type);
    if (e.type === "response.function_call_arguments.delta") args += e.delta;
    if (e.type === "response.completed") done = e.response;
  }
  assert.equal(types[0], "response.created");
  assert.ok(types.includes("response.output_item.added") && types.includes("response.output_item.done"));
  assert.ok(done, "response.completed arrives: " + types.join(","));
  const call = done.output.find((o) => o.type === "function_call");
  assert.equal(call.arguments, args);
  checkArgs(cityParams, args);
  const schema = { type: "object", properties: { answer: { type: "integer", minimum: 0, maximum: 100 } }, required: ["answer"], additionalProperties: false };
  const s = await openai.responses.create({ model: MODEL, input: "Pick a number", max_output_tokens: 60, text: { format: { type: "json_schema", name: "pick", schema, strict: true } } });
  checkArgs(schema, s.output_text);
  let text = "";
  for await (const e of await openai.responses.create({ model: MODEL, input: "Hi", max_output_tokens: 5, stream: true })) {
    if (e.type === "response.output_text.delta") text += e.delta;
  }
  assert.ok(text.length > 0);
});

test("responses: bad bodies get 400s naming the field", async () => {
  for (const [body, field] of [
    [{ model: MODEL }, "input"],
    [{ model: MODEL, input: [{ role: "robot", content: "x" }] }, "input[0].role"],
    [{ model: MODEL, input: "x", tools: [{ type: "web_search" }] }, "tools[0].type"],
    [{ model: MODEL, input: "x", text: { format: { type: "yaml" } } }, "text.format"],
  ]) {
    const r = await raw("/v1/responses", JSON.stringify(body));
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.equal(r.json.error.param, field);
  }
  assert.equal((await raw("/v1/responses", "{not json")).status, 400);
});

test("messages: text, stop_reason, usage; streamed events", async () => {
  const m = await anthropic.messages.create({ model: MODEL, max_tokens: 6, system: "Be brief.", messages: [{ role: "user", content: "Hello" }] });
  assert.equal(m.type, "message");
  assert.equal(m.role, "assistant");
  assert.equal(m.stop_reason, "max_tokens");
  assert.equal(m.usage.output_tokens, 6);
  assert.equal(m.content[0].type, "text");
  const stream = anthropic.messages.stream({ model: MODEL, max_tokens: 6, messages: [{ role: "user", content: "Hello" }] });
  let text = "";
  stream.on("text", (t) => { text += t; });
  const final = await stream.finalMessage();
  assert.equal(final.content[0].text, text);
  assert.equal(final.stop_reason, "max_tokens");
});

test("messages: forced tool_use round trip with tool_result, streamed input_json", async () => {
  const tools = [{ name: "weather", description: "Weather", input_schema: cityParams }];
  const m = await anthropic.messages.create({ model: MODEL, max_tokens: 200, tools, tool_choice: { type: "any", disable_parallel_tool_use: true }, messages: [{ role: "user", content: "Weather in Paris?" }] });
  const uses = m.content.filter((b) => b.type === "tool_use");
  assert.equal(uses.length, 1);
  assert.equal(m.stop_reason, "tool_use");
  checkArgs(cityParams, uses[0].input);
  const after = await anthropic.messages.create({
    model: MODEL, max_tokens: 5, tools,
    messages: [{ role: "user", content: "Weather in Paris?" }, { role: "assistant", content: m.content },
      { role: "user", content: [{ type: "tool_result", tool_use_id: uses[0].id, content: "21 C" }] }],
  });
  assert.ok(after.content.length > 0);
  const stream = anthropic.messages.stream({ model: MODEL, max_tokens: 200, tools, tool_choice: { type: "tool", name: "weather", disable_parallel_tool_use: true }, messages: [{ role: "user", content: "Weather?" }] });
  const final = await stream.finalMessage();
  const use = final.content.find((b) => b.type === "tool_use");
  assert.equal(use.name, "weather");
  checkArgs(cityParams, use.input);
});

test("messages: bad bodies get 400s in Anthropic's error shape naming the field", async () => {
  for (const [body, field] of [
    [{ model: MODEL, messages: [{ role: "user", content: "x" }] }, "max_tokens"],
    [{ model: MODEL, max_tokens: 5, messages: [{ role: "robot", content: "x" }] }, "messages[0].role"],
    [{ model: MODEL, max_tokens: 5, messages: [{ role: "user", content: [{ type: "image", source: {} }] }] }, "messages[0].content[0]"],
  ]) {
    const r = await raw("/v1/messages", JSON.stringify(body));
    assert.equal(r.status, 400);
    assert.equal(r.json.type, "error");
    assert.equal(r.json.error.type, "invalid_request_error");
    assert.ok(r.json.error.message.startsWith(field + ":"), r.json.error.message);
  }
  await assert.rejects(anthropic.messages.create({ model: "nope", max_tokens: 5, messages: [{ role: "user", content: "x" }] }), (e) => e.status === 404);
});

test("chat: an image part sent to a text-only model gets a 400 naming it, never an answer that ignored it", async () => {
  const png = readFileSync(`${process.env.SHARED_DIR}/fixtures/tiny-qwen3_5-moe-vl/golden/quadrants_64x64.png`);
  const url = `data:image/png;base64,${png.toString("base64")}`;
  await assert.rejects(
    openai.chat.completions.create({
      model: MODEL, max_tokens: 5,
      messages: [{ role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image_url", image_url: { url } }] }],
    }),
    (e) => e.status === 400 && e.message.includes("image_url") && e.message.includes("vision tower"));
});

// A safetensors tensor as Float32Array (F32 or BF16).
function readTensor(dir, file, name) {
  const buf = readFileSync(`${dir}/${file}`);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString());
  const t = header[name];
  const [a, b] = t.data_offsets;
  const raw = buf.subarray(8 + n + a, 8 + n + b);
  const out = new Float32Array(t.shape.reduce((x, y) => x * y, 1));
  if (t.dtype === "F32") {
    for (let i = 0; i < out.length; ++i) out[i] = raw.readFloatLE(4 * i);
  } else {
    const u = new Uint32Array(1), f = new Float32Array(u.buffer);
    for (let i = 0; i < out.length; ++i) { u[0] = raw.readUInt16LE(2 * i) << 16; out[i] = f[0]; }
  }
  return { data: out, shape: t.shape };
}

test("embeddings: mean-pooled hidden states agree with the reference logits through lm_head", async () => {
  // The model is linear after its final norm: lm_head(mean of h) = mean of the logits, so the
  // pooled vector is checked against the PyTorch reference's logits at every position.
  const fixture = `${process.env.SHARED_DIR}/fixtures/tiny-qwen3-moe`;
  const golden = JSON.parse(readFileSync(`${fixture}/golden/golden.json`, "utf8"));
  const index = JSON.parse(readFileSync(`${fixture}/model.safetensors.index.json`, "utf8"));
  const W = readTensor(fixture, index.weight_map["lm_head.weight"], "lm_head.weight");
  const [vocab, hidden] = W.shape;
  for (const [p, prompt] of golden.prompts.slice(0, 3).entries()) {
    const r = await openai.embeddings.create({ model: MODEL, input: prompt.input_ids, normalize: false });
    const e = r.data[0].embedding;
    assert.equal(e.length, hidden);
    assert.equal(r.usage.prompt_tokens, prompt.input_ids.length);
    const L = readTensor(`${fixture}/golden`, "logits.safetensors", `prompt${p}.logits`);
    const [positions] = L.shape;
    let worst = 0, scale = 0;
    for (let v = 0; v < vocab; ++v) {
      let got = 0, want = 0;
      for (let d = 0; d < hidden; ++d) got += W.data[v * hidden + d] * e[d];
      for (let t = 0; t < positions; ++t) want += L.data[t * vocab + v] / positions;
      worst = Math.max(worst, Math.abs(got - want));
      scale = Math.max(scale, Math.abs(want));
    }
    assert.ok(worst <= 1e-4 * scale, `prompt ${p}: max |W e - mean logits| ${worst} of ${scale}`);
  }
});

test("embeddings: batched equals one by one, unit length, dimensions, base64, errors", async () => {
  const texts = ["The cat sat.", "A much longer sentence about embeddings and batching here.", "x"];
  const all = await openai.embeddings.create({ model: MODEL, input: texts });
  assert.equal(all.data.length, 3);
  for (const [i, t] of texts.entries()) {
    const one = (await openai.embeddings.create({ model: MODEL, input: t })).data[0].embedding;
    const got = all.data[i].embedding;
    assert.equal(all.data[i].index, i);
    assert.ok(Math.abs(Math.hypot(...got) - 1) < 1e-5);
    for (let d = 0; d < got.length; ++d) assert.ok(Math.abs(got[d] - one[d]) < 1e-4, `${i}:${d}`);
  }
  const short = await openai.embeddings.create({ model: MODEL, input: texts[0], dimensions: 8 });
  assert.equal(short.data[0].embedding.length, 8);
  assert.ok(Math.abs(Math.hypot(...short.data[0].embedding) - 1) < 1e-5);
  const b64 = await raw("/v1/embeddings", JSON.stringify({ input: texts[0], encoding_format: "base64" }));
  const bytes = Buffer.from(b64.json.data[0].embedding, "base64");
  const floats = Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(4 * i));
  assert.deepEqual(floats.map((x) => x.toFixed(5)), all.data[0].embedding.map((x) => x.toFixed(5)));
  for (const [body, field] of [[{ input: [] }, "input"], [{ input: "x", encoding_format: "hex" }, "encoding_format"],
    [{ input: "x", dimensions: 0 }, "dimensions"], [{ input: [[1, -2]] }, "input"], [{}, "input"]]) {
    const r = await raw("/v1/embeddings", JSON.stringify(body));
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.equal(r.json.error.param, field);
  }
});
