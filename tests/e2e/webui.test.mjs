// The chat page at / of `mxserve serve`, in a real headless browser: Debian's chromium driven by
// playwright-core (which downloads no browser). From webui_test.sh: BASE_URL serves the page
// (scalar kernels on one thread, so that a long generation lasts seconds and Stop lands in it),
// SERVER_LOG is that server's log, NO_WEBUI_URL a server started with --no-webui, MODEL_DIR the
// model both serve. Without /usr/bin/chromium (or $CHROMIUM) the browser tests are skipped.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { chromium } from "playwright-core";

const BASE = process.env.BASE_URL;
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const noBrowser = existsSync(CHROMIUM)
  ? false
  : `${CHROMIUM} is absent (scripts/install-deps.sh installs Debian's chromium)`;
const config = JSON.parse(readFileSync(process.env.MODEL_DIR + "/config.json", "utf8"));
const FILES = [
  ["/", "text/html; charset=utf-8"],
  ["/app.js", "text/javascript; charset=utf-8"],
  ["/style.css", "text/css; charset=utf-8"],
];

test("the page, its script and style: their types and a policy of this origin only", async () => {
  for (const [path, type] of FILES) {
    const r = await fetch(BASE + path);
    assert.equal(r.status, 200, path);
    assert.equal(r.headers.get("content-type"), type, path);
    const csp = r.headers.get("content-security-policy");
    for (const d of ["default-src", "script-src", "style-src", "connect-src"]) {
      assert.match(csp, new RegExp(`(^|; )${d} 'self'(;|$)`), `${path}: ${csp}`);
    }
    assert.doesNotMatch(csp, /unsafe|\*|https?:|data:/, path);
    assert.equal(r.headers.get("x-content-type-options"), "nosniff", path);
    // Nothing fetched from elsewhere: no absolute URL, import or inline code.
    const text = await r.text();
    assert.doesNotMatch(text, /https?:\/\/|\/\/cdn|@import|url\(|<script>|<style|style=/, path);
  }
  assert.equal((await fetch(BASE + "/", { method: "POST" })).status, 405);
});

test("/v1/models gives the model's context length", async () => {
  const models = await (await fetch(BASE + "/v1/models")).json();
  assert.equal(models.data[0].max_model_len, config.max_position_embeddings);
});

test("--no-webui: no page, the API still served", async () => {
  for (const [path] of FILES) {
    assert.equal((await fetch(process.env.NO_WEBUI_URL + path)).status, 404, path);
  }
  assert.equal((await fetch(process.env.NO_WEBUI_URL + "/v1/models")).status, 200);
});

describe("in a browser", { skip: noBrowser }, () => {
  let browser;
  let page;
  const requests = []; // every URL the page asked for
  const problems = []; // script errors and Content-Security-Policy reports
  const lastReply = () => page.locator(".message.assistant .content").last();
  const sendButton = () => page.getByRole("button", { name: "Send" });
  const stopButton = () => page.getByRole("button", { name: "Stop" });

  before(async () => {
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    });
    page = await browser.newPage();
    page.setDefaultTimeout(30000);
    page.on("request", (r) => requests.push(r.url()));
    page.on("pageerror", (e) => problems.push(e.message));
    page.on("console", (m) => {
      if (/Content Security Policy/i.test(m.text())) problems.push(m.text());
    });
    await page.goto(BASE + "/");
  });
  after(async () => browser?.close());

  test("shows the model's name and context length", async () => {
    await page.locator("#model-name", { hasText: /^tiny-qwen3-moe$/ }).waitFor();
    const context = await page.locator("#model-context").textContent();
    assert.match(context, new RegExp(`\\b${config.max_position_embeddings}\\b`));
  });

  test("a reply streams in, and ends as the same request unstreamed", async (t) => {
    await page.getByLabel("Temperature").fill("0");
    await page.getByLabel("Max tokens").fill("64");
    await page.getByLabel("Message").fill("Tell me about Emma.");
    // Every text the reply takes on its way, from the DOM's mutation records.
    await page.evaluate(() => {
      window.replyTexts = [];
      new MutationObserver((records) => {
        for (const r of records) {
          if (!r.target.matches?.(".assistant .content")) continue;
          for (const n of r.addedNodes) window.replyTexts.push(n.data);
        }
      }).observe(document.getElementById("messages"), { childList: true, subtree: true });
    });
    const [request] = await Promise.all([
      page.waitForRequest("**/v1/chat/completions"),
      sendButton().click(),
    ]);
    const body = request.postDataJSON();
    assert.equal(body.stream, true);
    assert.deepEqual([body.temperature, body.top_p, body.max_tokens], [0, 0.95, 64]);
    assert.deepEqual(body.messages, [{ role: "user", content: "Tell me about Emma." }]);
    await page.getByRole("status").filter({ hasText: /^Done/ }).waitFor();
    assert.ok(await sendButton().isEnabled());

    const texts = await page.evaluate(() => window.replyTexts);
    const final = await lastReply().textContent();
    assert.ok(texts.length >= 2, `the reply came in ${texts.length} piece(s)`);
    t.diagnostic(`the reply came in ${texts.length} pieces`);
    for (let i = 1; i < texts.length; ++i) {
      assert.ok(texts[i].length > texts[i - 1].length && texts[i].startsWith(texts[i - 1]));
    }
    assert.equal(texts.at(-1), final);
    const { stream, stream_options, ...plain } = body;
    const r = await fetch(BASE + "/v1/chat/completions", {
      method: "POST",
      body: JSON.stringify(plain),
    });
    assert.equal(final, (await r.json()).choices[0].message.content);
  });

  test("Stop ends a long generation, and Send works again", async (t) => {
    // Past the end-of-sequence token too, so the reply runs to its 800 tokens unless stopped.
    await page.route("**/v1/chat/completions", (route) => route.continue({
      postData: JSON.stringify({ ...route.request().postDataJSON(), ignore_eos: true }),
    }));
    await page.getByLabel("Max tokens").fill("800");
    await page.getByLabel("Message").fill("Write a long story.");
    const [request] = await Promise.all([
      page.waitForRequest("**/v1/chat/completions"),
      sendButton().click(),
    ]);
    assert.deepEqual(request.postDataJSON().messages.map((m) => m.role),
      ["user", "assistant", "user"]);
    await page.waitForFunction(
      () => [...document.querySelectorAll(".assistant .content")].at(-1).textContent.length > 0);
    assert.ok(await sendButton().isDisabled());
    await stopButton().click();
    await page.getByRole("status").filter({ hasText: /^Stopped$/ }).waitFor();
    assert.ok(await sendButton().isEnabled());
    assert.ok(await stopButton().isDisabled());
    const stopped = await lastReply().textContent();
    await sleep(1000);
    assert.equal(await lastReply().textContent(), stopped, "the reply grew after Stop");
    // The server saw the client go: the request ended 499, short of its 800 tokens.
    let line;
    for (let i = 0; i < 50 && !line; ++i, await sleep(100)) {
      line = readFileSync(process.env.SERVER_LOG, "utf8")
        .match(/\/v1\/chat\/completions: 499, \d+ prompt \+ (\d+) completion/);
    }
    assert.ok(line, "no 499 in the server's log");
    assert.ok(Number(line[1]) < 800, line[0]);
    t.diagnostic(line[0]);
    await page.unroute("**/v1/chat/completions");

    await page.getByLabel("Max tokens").fill("8");
    await page.getByLabel("Message").fill("And then?");
    await sendButton().click();
    await page.getByRole("status").filter({ hasText: /^Done/ }).waitFor();
    assert.ok((await lastReply().textContent()).length > 0);
  });

  test("reasoning is shown folded, apart from the answer", async () => {
    // A reasoning model's stream (the bundled model has no reasoning to show).
    const chunk = (delta, finish = null) => "data: " + JSON.stringify({
      object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }],
    }) + "\n\n";
    const sse = chunk({ role: "assistant" }) + chunk({ reasoning_content: "Let me think." }) +
      chunk({ reasoning_content: " Done thinking." }) + chunk({ content: "Hello" }) +
      chunk({ content: " there." }) + chunk({}, "stop") + "data: [DONE]\n\n";
    await page.route("**/v1/chat/completions", (route) => route.fulfill({
      status: 200, contentType: "text/event-stream", body: sse,
    }));
    await page.getByLabel("Message").fill("Think first.");
    await sendButton().click();
    await page.getByRole("status").filter({ hasText: /^Done \(stop/ }).waitFor();
    await page.unroute("**/v1/chat/completions");
    const details = page.locator(".message.assistant").last().locator("details");
    assert.equal(await details.evaluate((d) => d.open), false);
    assert.equal(await details.locator("summary").textContent(), "Reasoning");
    assert.equal(await details.locator(".reasoning-text").textContent(),
      "Let me think. Done thinking.");
    assert.equal(await lastReply().textContent(), "Hello there.");
    await details.locator("summary").click();
    assert.equal(await details.evaluate((d) => d.open), true);
  });

  test("every request of the page went to the server's origin", () => {
    const origin = new URL(BASE).origin;
    assert.ok(requests.length >= 6, requests.join("\n"));
    for (const url of requests) assert.equal(new URL(url).origin, origin, url);
    assert.deepEqual(problems, []);
  });
});
