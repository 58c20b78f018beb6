// End-to-end tests of `mxserve serve` with the official openai client (npm openai 6.x).
// The server runs in a separate process; BASE_URL, API_KEY, MXSERVE, MODEL_DIR (a directory or
// a GGUF), GOLDEN_FILE and SERVED_MODEL come from server_test.sh.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const baseURL = process.env.BASE_URL + "/v1";
const client = new OpenAI({ baseURL, apiKey: process.env.API_KEY, maxRetries: 0 });
const MODEL = process.env.SERVED_MODEL;
const prompt = "It is a truth universally acknowledged, that";

function tokenCount(text) {
  const out = execFileSync(process.env.MXSERVE, ["tokenize", "-m", process.env.MODEL_DIR, text]);
  return JSON.parse(out.toString()).length;
}

function decode(ids) {
  const out = execFileSync(process.env.MXSERVE, ["tokenize", "-m", process.env.MODEL_DIR, "--decode", JSON.stringify(ids)]);
  return out.toString().replace(/\n$/, "");
}

// Reference prompts with the reference model's top-5 log-probs at every position, and its
// greedy continuation as text.
function goldenPrompts() {
  const g = JSON.parse(readFileSync(process.env.GOLDEN_FILE, "utf8"));
  return g.prompts.map((p) => {
    const ids = p.greedy_32_ids ?? p.greedy_16_ids;
    return { prompt: p.prompt, ids: p.input_ids, top5: p.top5_per_position, text: p.greedy_32_text ?? decode(ids), greedy: ids, safe: p.greedy_safe_len };
  });
}

async function metric(name) {
  const text = await (await fetch(process.env.BASE_URL + "/metrics")).text();
  const line = text.split("\n").find((l) => l.startsWith(name + " "));
  return Number(line.split(" ")[1]);
}

test("models lists the served model", async () => {
  const models = await client.models.list();
  assert.equal(models.data[0].id, MODEL);
});

test("completion: text, finish_reason and usage equal to the tokenizer's count", async () => {
  const g = goldenPrompts().find((p) => p.prompt === prompt);
  assert.ok(g.safe >= 8);
  const r = await client.completions.create({ model: MODEL, prompt, max_tokens: 8, temperature: 0 });
  assert.equal(r.choices[0].text, decode(g.greedy.slice(0, 8)));
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.prompt_tokens, tokenCount(prompt));
  assert.equal(r.usage.completion_tokens, 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 8);
});

test("chat: non-streamed and streamed agree; usage in the stream", async () => {
  const messages = [{ role: "user", content: "Tell me about Emma." }];
  const full = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 12, temperature: 0 });
  assert.equal(full.choices[0].message.role, "assistant");
  const stream = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 12, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = "", usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta?.content ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, full.choices[0].message.content);
  assert.equal(finish, full.choices[0].finish_reason);
  assert.deepEqual(usage, full.usage);
});

test("stop strings end the text before the stop", async () => {
  // The stop is a piece of the model's own greedy continuation, so any model reaches it.
  const free = await client.completions.create({ model: MODEL, prompt, max_tokens: 16, temperature: 0 });
  const text = free.choices[0].text;
  const at = Math.floor(text.length / 2);
  const stop = text.slice(at, at + 2);
  const cut = text.indexOf(stop);
  const r = await client.completions.create({ model: MODEL, prompt, max_tokens: 16, temperature: 0, stop: [stop, "\u0000never"] });
  assert.equal(r.choices[0].finish_reason, "stop");
  assert.equal(r.choices[0].text, text.slice(0, cut));
});

// 48 tokens each, whatever the text: long enough that the 16 requests overlap however fast the
// machine, so that a tight KV cache must preempt some of them.
async function sixteenStreams(c) {
  const prompts = Array.from({ length: 16 }, (_, i) => `Chapter ${i + 1}. The ${["house", "sea", "king", "law"][i % 4]} was`);
  const one = async (p) => {
    const s = await c.completions.create({ model: MODEL, prompt: p, max_tokens: 48, temperature: 0, stream: true, ignore_eos: true });
    let t = "";
    for await (const chunk of s) t += chunk.choices[0]?.text ?? "";
    return t;
  };
  const sequential = [];
  for (const p of prompts) sequential.push(await one(p));
  const concurrent = await Promise.all(prompts.map(one));
  assert.deepEqual(concurrent, sequential);
}

test("16 concurrent greedy streams equal the same requests one at a time", async () => {
  await sixteenStreams(client);
});

test("16 concurrent greedy streams under preemption equal the same requests one at a time", async () => {
  // A KV cache smaller than 16 requests need: some are preempted and recomputed.
  const tight = new OpenAI({ baseURL: process.env.TIGHT_URL + "/v1", apiKey: "x", maxRetries: 0 });
  await sixteenStreams(tight);
  const text = await (await fetch(process.env.TIGHT_URL + "/metrics")).text();
  const line = text.split("\n").find((l) => l.startsWith("mxserve_preemptions_total "));
  assert.ok(Number(line.split(" ")[1]) > 0, line);
});

test("a client that disconnects mid-stream frees its KV blocks; the server stays healthy", async () => {
  const controller = new AbortController();
  const s = await client.completions.create(
    { model: MODEL, prompt, max_tokens: 600, temperature: 0.8, stream: true, ignore_eos: true },
    { signal: controller.signal });
  let chunks = 0;
  try {
    for await (const _ of s) {
      if (++chunks === 3) {
        assert.ok((await metric("mxserve_kv_cache_blocks_used")) > 0);
        controller.abort();
      }
    }
  } catch (e) {
    assert.ok(e.name === "AbortError" || e.constructor.name === "APIUserAbortError", String(e));
  }
  let used = -1;
  for (let i = 0; i < 100 && used !== 0; i++) {
    await new Promise((r) => setTimeout(r, 50));
    used = await metric("mxserve_kv_cache_blocks_used");
  }
  assert.equal(used, 0);
  assert.equal(await (await fetch(process.env.BASE_URL + "/health")).text(), "ok");
});

test("errors carry their status and an OpenAI error object", async () => {
  const bad = new OpenAI({ baseURL, apiKey: "wrong-key", maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401 && e.error?.type === "authentication_error");
  await assert.rejects(client.completions.create({ model: "nope", prompt }), (e) => e.status === 404);
  await assert.rejects(client.completions.create({ model: MODEL, prompt, temperature: "hot" }), (e) => e.status === 400);
  await assert.rejects(client.completions.create({ model: MODEL, prompt, max_tokens: 100000 }),
    (e) => e.status === 400 && /context length/.test(e.message));
  await assert.rejects(client.completions.create({ model: MODEL, prompt, n: 17 }), (e) => e.status === 400);
  const headers = { "Content-Type": "application/json", Authorization: "Bearer " + process.env.API_KEY };
  let r = await fetch(process.env.BASE_URL + "/v1/completions", { method: "POST", headers, body: "{not json" });
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.code, 400);
  r = await fetch(process.env.BASE_URL + "/v1/completions", { method: "POST", headers, body: JSON.stringify({ prompt: "x".repeat(9 << 20) }) });
  assert.equal(r.status, 413);
  assert.equal(await (await fetch(process.env.BASE_URL + "/health")).text(), "ok");
});

test("every bad sampling value is a 400 naming its parameter; the server stays healthy", async () => {
  const headers = { "Content-Type": "application/json", Authorization: "Bearer " + process.env.API_KEY };
  const post = (path, body, url = process.env.BASE_URL) =>
    fetch(url + path, { method: "POST", headers, body: typeof body === "string" ? body : JSON.stringify(body) });
  const completion = { model: MODEL, prompt: "hi", max_tokens: 2 };
  const chat = { model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 2 };
  // [param, value, chat?]; raw strings are sent as written (JSON.stringify cannot write 2^64-1).
  const cases = [
    ["temperature", -1], ["temperature", 3], ["temperature", "hot"],
    ["top_p", 0], ["top_p", 1.5], ["top_k", -2], ["top_k", 1.5], ["top_k", 1e30],
    ["min_p", -0.1], ["min_p", 2], ["presence_penalty", 3], ["frequency_penalty", -2.5],
    ["repetition_penalty", 0], ["repetition_penalty", -1],
    ["max_tokens", 0], ["max_tokens", -0.5], ["max_tokens", 1.5], ["max_tokens", 1e30],
    ["max_tokens", "18446744073709551615"], ["max_tokens", -5],
    ["max_completion_tokens", 0, true], ["max_completion_tokens", 1e30, true],
    ["seed", 1.5], ["seed", "18446744073709551615"], ["n", 17], ["n", 0], ["n", 1.5], ["best_of", 17], ["min_tokens", -1],
    ["logprobs", -1], ["logprobs", 6], ["logprobs", 2.5],
    ["top_logprobs", 21, true], ["top_logprobs", -1, true], ["stop", [""]],
  ];
  for (const [param, value, isChat] of cases) {
    const base = isChat ? { ...chat, logprobs: param === "top_logprobs" } : completion;
    if (param === "max_completion_tokens") delete base.max_tokens;
    const body = typeof value === "string" && /^[0-9]+$/.test(value)
      ? JSON.stringify(base).replace(/}$/, `,"${param}":${value}}`)
      : { ...base, [param]: value };
    const r = await post(isChat ? "/v1/chat/completions" : "/v1/completions", body);
    const label = `${param}=${JSON.stringify(value)}`;
    assert.equal(r.status, 400, label);
    const e = (await r.json()).error;
    assert.equal(e.param, param, label);
    assert.equal(e.code, 400, label);
    assert.match(e.message, new RegExp(param), label);
  }
  // In range, the same fields serve (top_k -1 and 0 both mean off, as in vLLM).
  for (const extra of [{ top_k: -1 }, { top_k: 0, seed: -3 }, { max_tokens: 2.0, n: 1.0, repetition_penalty: 1.5 }]) {
    const r = await post("/v1/completions", { ...completion, ...extra });
    assert.equal(r.status, 200, JSON.stringify(extra));
  }
  // A prompt that leaves no room in the context is the client's error, named, not a 503.
  const long = { ...completion, prompt: Array(2000).fill(1), max_tokens: undefined };
  let r = await post("/v1/completions", long);
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.param, "prompt");
  // Beyond the tight server's KV cache: a 400 (it can never run), not a 503 (retry later).
  r = await post("/v1/completions", { ...completion, max_tokens: 200 }, process.env.TIGHT_URL);
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.param, "max_tokens");
  assert.equal(await (await fetch(process.env.BASE_URL + "/health")).text(), "ok");
});

// LOGPROB_TOL: 2e-3 by default; servers whose ranks exchange BF16 rows are held to that
// rounding's bound (tests/ep_test.cpp).
const LOGPROB_TOL = Number(process.env.LOGPROB_TOL ?? 2e-3);

test("logprobs equal the reference model's log-probs (golden top-5), streamed and not", async () => {
  for (const g of goldenPrompts()) {
    const r = await client.completions.create({ model: MODEL, prompt: g.ids, max_tokens: g.safe, temperature: 0, logprobs: 5 });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, g.safe);
    assert.ok(g.text.startsWith(lp.tokens.join("")), lp.tokens.join(""));
    const want = g.top5[g.top5.length - 1].logprobs;
    // Digit keys come first in a JS object, whatever their order in the JSON.
    const got = Object.values(lp.top_logprobs[0]).sort((a, b) => b - a);
    assert.equal(got.length, 5);
    for (let i = 0; i < 5; i++) assert.ok(Math.abs(got[i] - want[i]) < LOGPROB_TOL, `${got[i]} vs ${want[i]}`);
    assert.ok(Math.abs(lp.token_logprobs[0] - want[0]) < LOGPROB_TOL);
    for (let i = 0; i < g.safe; i++) {
      // Greedy: the chosen token is the most likely one.
      assert.equal(lp.token_logprobs[i], Math.max(...Object.values(lp.top_logprobs[i])));
      assert.equal(lp.text_offset[i], lp.tokens.slice(0, i).join("").length);
    }
  }
  const messages = [{ role: "user", content: "Tell me about Emma." }];
  const full = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3 });
  const content = full.choices[0].logprobs.content;
  assert.equal(content.length, 6);
  assert.equal(content.map((c) => c.token).join(""), full.choices[0].message.content);
  for (const c of content) {
    assert.equal(c.top_logprobs.length, 3);
    assert.equal(c.top_logprobs[0].logprob, c.logprob);
    assert.deepEqual(c.bytes, [...Buffer.from(c.token, "utf8")]);
  }
  const stream = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3, stream: true });
  const streamed = [];
  for await (const chunk of stream) for (const c of chunk.choices) streamed.push(...(c.logprobs?.content ?? []));
  assert.deepEqual(streamed, content);
  await assert.rejects(client.chat.completions.create({ model: MODEL, messages, top_logprobs: 3 }), (e) => e.status === 400);
  await assert.rejects(client.completions.create({ model: MODEL, prompt, logprobs: 9 }), (e) => e.status === 400);
});

test("/metrics has time-to-first-token and inter-token latency histograms", async () => {
  const text = await (await fetch(process.env.BASE_URL + "/metrics")).text();
  for (const name of ["mxserve_time_to_first_token_seconds", "mxserve_inter_token_latency_seconds", "mxserve_e2e_request_latency_seconds"]) {
    assert.match(text, new RegExp(`# TYPE ${name} histogram`));
    const inf = Number(text.match(new RegExp(`${name}_bucket\\{le="\\+Inf"\\} (\\d+)`))[1]);
    const count = Number(text.match(new RegExp(`${name}_count (\\d+)`))[1]);
    assert.ok(count > 0);
    assert.equal(inf, count);
  }
});

test("a full waiting queue answers 503 and the server keeps serving", async () => {
  const busy = new OpenAI({ baseURL: process.env.BUSY_URL + "/v1", apiKey: "x", maxRetries: 0 });
  const results = await Promise.allSettled(Array.from({ length: 6 }, () =>
    busy.completions.create({ model: MODEL, prompt, max_tokens: 300, temperature: 0, ignore_eos: true })));
  const rejected = results.filter((r) => r.status === "rejected");
  assert.ok(rejected.length >= 1, "no request was refused");
  for (const r of rejected) {
    assert.equal(r.reason.status, 503);
    assert.equal(r.reason.error?.type, "server_busy");
  }
  assert.ok(results.some((r) => r.status === "fulfilled"));
  const after = await busy.completions.create({ model: MODEL, prompt, max_tokens: 4, temperature: 0 });
  assert.equal(after.choices[0].text.length > 0, true);
});
