// Images through `mxserve serve` on the VL fixture (started with no flags), with the official
// openai client: each golden case sent as a data URI gives the golden input ids and greedy
// tokens and the tokens `mxserve run --image` gives; 16 concurrent image requests equal the
// same requests one at a time; every bad image is a 400 naming its cause.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { readFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import http from "node:http";
import https from "node:https";

const BASE = process.env.BASE_URL;
const MODEL = process.env.SERVED_MODEL;
const VL = process.env.VL_DIR;
const BIN = process.env.MXSERVE;
const openai = new OpenAI({ baseURL: BASE + "/v1", apiKey: "k", maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: BASE, apiKey: "k", maxRetries: 0 });
const golden = JSON.parse(readFileSync(`${VL}/golden/golden.json`, "utf8"));
const ids = (v) => (typeof v === "string" ? JSON.parse(v) : v);

const dataUri = (bytes, type = "image/png") => `data:${type};base64,${Buffer.from(bytes).toString("base64")}`;
const png = (name) => readFileSync(`${VL}/golden/${name}`);

// The case's messages with each image part carrying the case's PNG.
function caseMessages(c, url = dataUri(png(c.image_file))) {
  return c.messages.map((m) => ({
    role: m.role,
    content: typeof m.content === "string" ? m.content
      : m.content.map((p) => (p.type === "image" ? { type: "image_url", image_url: { url } } : p)),
  }));
}

async function chat(messages, extra = {}) {
  return openai.chat.completions.create({
    model: MODEL, messages, temperature: 0, max_tokens: 16, return_token_ids: true, ...extra,
  });
}

for (const c of golden.cases) {
  test(`${c.name}: golden input ids and greedy tokens, and run --image's tokens`, async () => {
    const r = await chat(caseMessages(c), { chat_template_kwargs: { enable_thinking: c.enable_thinking } });
    assert.deepEqual(r.prompt_token_ids, ids(c.input_ids));
    assert.equal(r.usage.prompt_tokens, c.num_tokens);  // image tokens counted
    const got = r.choices[0].token_ids;
    const n = c.greedy_safe_len;
    assert.deepEqual(got.slice(0, n), c.greedy_16_ids.slice(0, n));
    const run = JSON.parse(execFileSync(BIN, ["run", "-m", VL, "-p", c.rendered_prompt, "--image",
      `${VL}/golden/${c.image_file}`, "--temp", "0", "-n", "16", "--json"], { stdio: ["ignore", "pipe", "ignore"] }));
    assert.deepEqual(got, run.token_ids);
  });
}

test("an image request streamed gives the text it gives whole", async () => {
  const c = golden.cases[1];
  const whole = await chat(caseMessages(c), { max_tokens: 10 });
  const stream = await openai.chat.completions.create({
    model: MODEL, messages: caseMessages(c), temperature: 0, max_tokens: 10, stream: true,
  });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
  assert.equal(text, whole.choices[0].message.content);
});

test("16 concurrent image requests equal the same requests one at a time", async () => {
  const reqs = [];
  for (let i = 0; i < 16; ++i) {
    const c = golden.cases[i % 3];
    const msgs = caseMessages(c);
    msgs[msgs.length - 1].content.push({ type: "text", text: ` (question ${i})` });
    reqs.push(msgs);
  }
  const together = await Promise.all(reqs.map((m) => chat(m, { max_tokens: 12 })));
  for (let i = 0; i < reqs.length; ++i) {
    const alone = await chat(reqs[i], { max_tokens: 12 });
    assert.deepEqual(together[i].choices[0].token_ids, alone.choices[0].token_ids, `request ${i}`);
    assert.deepEqual(together[i].prompt_token_ids, alone.prompt_token_ids);
  }
});

test("the Responses and Messages APIs take images too, as chat does", async () => {
  const c = golden.cases[0];  // [image, question]: the golden prompt with thinking on
  const png64 = png(c.image_file).toString("base64");
  const question = c.messages[0].content[1].text;
  const r = await openai.responses.create({
    model: MODEL, max_output_tokens: 8, temperature: 0,
    input: [{ role: "user", content: [{ type: "input_image", image_url: `data:image/png;base64,${png64}` },
      { type: "input_text", text: question }] }],
  });
  assert.equal(r.usage.input_tokens, c.num_tokens);
  // Messages renders with thinking off unless asked: the same as chat with enable_thinking false.
  const m = await anthropic.messages.create({
    model: MODEL, max_tokens: 8, temperature: 0,
    messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: png64 } },
      { type: "text", text: question }] }],
  });
  const viaChat = await chat(caseMessages(c), { max_tokens: 8, chat_template_kwargs: { enable_thinking: false } });
  assert.equal(m.usage.input_tokens, viaChat.usage.prompt_tokens);
  assert.equal(m.content.filter((b) => b.type === "text").map((b) => b.text).join(""), viaChat.choices[0].message.content);
});

test("a text-only request to the VL model renders and answers as text", async () => {
  const r = await chat([{ role: "user", content: [{ type: "text", text: "Hello" }] }], { max_tokens: 4 });
  const s = await chat([{ role: "user", content: "Hello" }], { max_tokens: 4 });
  assert.deepEqual(r.prompt_token_ids, s.prompt_token_ids);
  assert.deepEqual(r.choices[0].token_ids, s.choices[0].token_ids);
});

function crc32(buf) {
  let c = ~0;
  for (const b of buf) {
    c ^= b;
    for (let k = 0; k < 8; ++k) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
  }
  return ~c >>> 0;
}

// A PNG whose header claims w x h, with a valid CRC and a tiny IDAT: a decompression bomb's head.
function pngBomb(w, h) {
  const chunk = (type, body) => {
    const len = Buffer.alloc(4); len.writeUInt32BE(body.length);
    const tb = Buffer.concat([Buffer.from(type, "latin1"), body]);
    const crc = Buffer.alloc(4); crc.writeUInt32BE(crc32(tb));
    return Buffer.concat([len, tb, crc]);
  };
  const ihdr = Buffer.alloc(13); ihdr.writeUInt32BE(w, 0); ihdr.writeUInt32BE(h, 4); ihdr.set([8, 2, 0, 0, 0], 8);
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk("IHDR", ihdr),
    chunk("IDAT", Buffer.from([0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01])), chunk("IEND", Buffer.alloc(0))]);
}

const oneImage = (url) => [{ role: "user", content: [{ type: "image_url", image_url: { url } }, { type: "text", text: "What is it?" }] }];
const refused = (messages, re) => assert.rejects(chat(messages, { max_tokens: 2 }),
  (e) => e.status === 400 && re.test(e.message) ? true : assert.fail(`${e.status}: ${e.message}`));

test("bad images get a 400 naming the cause, and the server goes on", async () => {
  const rings = png("rings_128x96.png");
  await refused(oneImage(dataUri(rings.subarray(0, 200))), /image 1: .*(truncated|PNG)/);
  await refused(oneImage(dataUri(Buffer.from("GIF89a not really an image at all"))), /image 1: .*unsupported image type \(not PNG, JPEG or WebP\)/);
  await refused(oneImage(dataUri(pngBomb(100000, 100000))), /image 1: .*image 100000x100000 exceeds the limit of \d+ pixels/);
  await refused(oneImage(dataUri(pngBomb(20000, 2))), /pixels per side/);
  await refused(oneImage(`data:text/plain;base64,${Buffer.from("hello").toString("base64")}`), /image 1: .*data URI media type/);
  await refused(oneImage("data:image/png;base64,@@@@"), /image 1: .*base64: invalid character/);
  await refused(oneImage("file:///etc/passwd"), /image 1: the URL is neither/);
  await refused([{ role: "user", content: [{ type: "image_url", image_url: {} }] }], /needs 'image_url'/);
  const many = [{ role: "user", content: Array.from({ length: 17 }, () => ({ type: "image_url", image_url: { url: dataUri(rings) } })) }];
  await refused(many, /holds 17 images; this server takes at most 16/);
  await refused([{ role: "system", content: [{ type: "image_url", image_url: { url: dataUri(rings) } }] },
    { role: "user", content: "hi" }], /System message cannot contain images/);
  await refused([{ role: "user", content: "look: <|vision_start|><|image_pad|><|vision_end|>" }], /image placeholders for 0 images/);
  // A second image is the second one named.
  await refused([{ role: "user", content: [{ type: "image_url", image_url: { url: dataUri(rings) } },
    { type: "image_url", image_url: { url: dataUri(rings.subarray(0, 100)) } }] }], /image 2: /);
  const ok = await chat(caseMessages(golden.cases[0]), { max_tokens: 2 });
  assert.equal(ok.choices[0].token_ids.length, 2);
});

// A real HTTP server on loopback for image URLs: the PNG, a redirect to it, a 404, a body
// above the fetch limit, and a server that never answers.
async function withImageServer(fn, tls) {
  const rings = png("rings_128x96.png");
  const handler = (req, res) => {
    if (req.url === "/rings.png") return res.writeHead(200, { "Content-Type": "image/png" }).end(rings);
    if (req.url === "/moved") return res.writeHead(302, { Location: "/rings.png" }).end();
    if (req.url === "/huge") return res.writeHead(200, { "Content-Length": String(64 << 20) }).end(Buffer.alloc(1 << 16));
    if (req.url === "/never") return;  // the fetch's time limit ends it
    res.writeHead(404).end("no");
  };
  const server = tls ? https.createServer(tls, handler) : http.createServer(handler);
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const base = `${tls ? "https" : "http"}://127.0.0.1:${server.address().port}`;
  try { return await fn(base); } finally { server.closeAllConnections(); server.close(); }
}

test("http image URLs are fetched: the same tokens as the data URI; redirects followed; bad fetches named", async () => {
  const c = golden.cases[1];
  const inline = await chat(caseMessages(c), { max_tokens: 8 });
  await withImageServer(async (base) => {
    for (const path of ["/rings.png", "/moved"]) {
      const r = await chat(caseMessages(c, base + path), { max_tokens: 8 });
      assert.deepEqual(r.choices[0].token_ids, inline.choices[0].token_ids, path);
      assert.deepEqual(r.prompt_token_ids, inline.prompt_token_ids);
    }
    await refused(oneImage(base + "/missing.png"), /image 1: .*HTTP 404/);
    await refused(oneImage(base + "/huge"), /image 1: .*above the limit of 20971520/);
    const t0 = Date.now();
    await refused(oneImage(base + "/never"), /image 1: .*cannot fetch the image/);
    assert.ok(Date.now() - t0 < 30000);
  });
  await refused(oneImage("http://127.0.0.1:1/nothing-listens.png"), /image 1: .*cannot fetch the image/);
});

test("https image URLs: a certificate that does not verify is named", { skip: !process.env.TLS_DIR }, async () => {
  const tls = { key: readFileSync(`${process.env.TLS_DIR}/key.pem`), cert: readFileSync(`${process.env.TLS_DIR}/cert.pem`) };
  await withImageServer(async (base) => {
    await refused(oneImage(base + "/rings.png"), /image 1: .*certificate does not verify/);
  }, tls);
});
