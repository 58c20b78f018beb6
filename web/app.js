// The chat page of `mxserve serve`: talks to this server's own OpenAI API only (GET v1/models,
// POST v1/chat/completions streamed as server-sent events).
"use strict";

const $ = (id) => document.getElementById(id);
let history = []; // the conversation sent with each request: {role, content}
let modelId = null;
let controller = null; // the running request's AbortController

function authHeaders() {
  const key = $("api-key").value.trim();
  return key ? { Authorization: "Bearer " + key } : {};
}

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

async function errorText(response) {
  try {
    const body = await response.json();
    return body.error?.message ?? response.statusText;
  } catch {
    return response.status + " " + response.statusText;
  }
}

async function loadModel() {
  try {
    const response = await fetch("v1/models", { headers: authHeaders() });
    if (!response.ok) throw new Error(await errorText(response));
    const card = (await response.json()).data[0];
    modelId = card.id;
    $("model-name").textContent = card.id;
    $("model-context").textContent = card.max_model_len
      ? `context ${card.max_model_len} tokens` : "";
    setStatus("");
  } catch (e) {
    $("model-name").textContent = "no model";
    setStatus("Cannot read the model: " + e.message, true);
  }
}

// Runs `update`, then keeps the conversation scrolled to its end if it was there before.
function following(update) {
  const list = $("messages");
  const atEnd = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  update();
  if (atEnd) list.scrollTop = list.scrollHeight;
}

// A message bubble; an assistant's has a folded <details> for its reasoning, hidden until some
// reasoning arrives.
function addMessage(role, text = "") {
  const el = document.createElement("article");
  el.className = "message " + role;
  el.setAttribute("aria-label", role === "user" ? "You" : "Assistant");
  const label = document.createElement("div");
  label.className = "role";
  label.textContent = role === "user" ? "You" : "Assistant";
  el.append(label);
  const view = { el };
  if (role === "assistant") {
    view.reasoning = document.createElement("details");
    view.reasoning.className = "reasoning";
    view.reasoning.hidden = true;
    const summary = document.createElement("summary");
    summary.textContent = "Reasoning";
    view.reasoningText = document.createElement("div");
    view.reasoningText.className = "reasoning-text";
    view.reasoning.append(summary, view.reasoningText);
    el.append(view.reasoning);
  }
  view.content = document.createElement("div");
  view.content.className = "content";
  view.content.textContent = text;
  el.append(view.content);
  following(() => $("messages").append(el));
  return view;
}

// The data of each server-sent event in a response body.
async function* sseData(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const lines = buffer.slice(0, end).split("\n");
      buffer = buffer.slice(end + 2);
      const data = lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart());
      if (data.length) yield data.join("\n");
    }
  }
}

// The sampling settings; a field left empty or invalid is left to the server's default.
function sampling() {
  const out = {};
  const fields = [["temperature", "temperature"], ["top_p", "top-p"], ["max_tokens", "max-tokens"]];
  for (const [name, id] of fields) {
    const input = $(id);
    if (input.value !== "" && input.checkValidity()) out[name] = Number(input.value);
  }
  return out;
}

function requestBody() {
  const system = $("system").value.trim();
  const messages = system ? [{ role: "system", content: system }, ...history] : [...history];
  return { model: modelId ?? undefined, messages, stream: true,
    stream_options: { include_usage: true }, ...sampling() };
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

// Streams one reply into `view`; returns its content and how it ended.
async function streamReply(view, signal) {
  const response = await fetch("v1/chat/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json", ...authHeaders() },
    body: JSON.stringify(requestBody()),
    signal,
  });
  if (!response.ok) throw new Error(await errorText(response));
  let content = "";
  let finish = null;
  let usage = null;
  for await (const data of sseData(response.body)) {
    if (data === "[DONE]") break;
    const chunk = JSON.parse(data);
    if (chunk.error) throw new Error(chunk.error.message);
    usage = chunk.usage ?? usage;
    const choice = chunk.choices?.[0];
    const delta = choice?.delta ?? {};
    following(() => {
      if (delta.reasoning_content) {
        view.reasoning.hidden = false;
        view.reasoningText.textContent += delta.reasoning_content;
      }
      if (delta.content) {
        content += delta.content;
        view.content.textContent = content;
      }
    });
    finish = choice?.finish_reason ?? finish;
  }
  return { content, finish, usage };
}

async function send(text) {
  const turns = history; // "New chat" during the reply starts another list
  turns.push({ role: "user", content: text });
  addMessage("user", text);
  const view = addMessage("assistant");
  controller = new AbortController();
  setBusy(true);
  setStatus("Generating…");
  let content = "";
  try {
    const reply = await streamReply(view, controller.signal);
    content = reply.content;
    const tokens = reply.usage ? `, ${reply.usage.completion_tokens} tokens` : "";
    setStatus(`Done (${reply.finish ?? "no finish reason"}${tokens})`);
  } catch (e) {
    content = view.content.textContent;
    if (e.name === "AbortError") {
      setStatus("Stopped");
    } else {
      setStatus("Error: " + e.message, true);
    }
  } finally {
    turns.push({ role: "assistant", content });
    controller = null;
    setBusy(false);
  }
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("prompt").value.trim();
  if (!text || controller) return;
  $("prompt").value = "";
  send(text);
});
$("prompt").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});
$("stop").addEventListener("click", () => controller?.abort());
$("clear").addEventListener("click", () => {
  controller?.abort();
  history = [];
  $("messages").replaceChildren();
  setStatus("");
});
$("api-key").addEventListener("change", loadModel);
loadModel();
