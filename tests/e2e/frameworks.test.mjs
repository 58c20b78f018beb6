// The agent frameworks people use, pointed at `mxserve serve` started with no flags
// (agents_test.sh): the Vercel AI SDK with @ai-sdk/openai-compatible, LangChain's
// @langchain/openai, and the OpenAI Agents SDK over the Responses API. Tool calls forced and
// free with their results sent back, structured output from zod schemas, streaming. The
// bundled model never learned tools or JSON: what it writes comes from constrained decoding,
// and every argument and object is validated with zod itself.
import { test } from "node:test";
import assert from "node:assert/strict";
import { z } from "zod";
import { generateText, streamText, Output, tool, stepCountIs } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { ChatOpenAI } from "@langchain/openai";
import { tool as lcTool } from "@langchain/core/tools";
import { HumanMessage, ToolMessage } from "@langchain/core/messages";
import OpenAI from "openai";
import { Agent, Runner, OpenAIResponsesModel, tool as agentTool, setTracingDisabled } from "@openai/agents";

const BASE = process.env.BASE_URL + "/v1";
const MODEL = process.env.SERVED_MODEL;
const City = z.object({ city: z.string().max(16), days: z.number().int().min(1).max(7) });
const Person = z.object({ name: z.string().max(20), age: z.number().int().min(0).max(120), tags: z.array(z.enum(["a", "b"])).max(2) });

const provider = createOpenAICompatible({ name: "mxserve", baseURL: BASE, supportsStructuredOutputs: true });
const model = provider(MODEL);

test("AI SDK: forced tool call, its result sent back, then text", async () => {
  const seen = [];
  const weather = tool({ description: "Weather in a city", inputSchema: City, execute: async (input) => { seen.push(input); return { temp: 21 }; } });
  const r = await generateText({
    model, prompt: "Weather in Paris?", tools: { weather }, maxOutputTokens: 200,
    stopWhen: stepCountIs(2),
    prepareStep: ({ stepNumber }) => (stepNumber === 0 ? { toolChoice: "required" } : { toolChoice: "none", maxOutputTokens: 6 }),
    providerOptions: { mxserve: { parallel_tool_calls: false } },
  });
  assert.equal(r.steps.length, 2);
  assert.equal(r.steps[0].toolCalls.length, 1);
  assert.equal(seen.length, 1);
  City.parse(seen[0]);
  assert.equal(r.steps[0].toolResults[0].output.temp, 21);
  assert.ok(r.text.length > 0);
});

test("AI SDK: named tool choice, free choice, Output.object from zod, streaming", async () => {
  const weather = tool({ inputSchema: City });
  const clock = tool({ inputSchema: z.object({ zone: z.number().int().min(-12).max(14) }) });
  const named = await generateText({ model, prompt: "Time?", tools: { weather, clock }, toolChoice: { type: "tool", toolName: "clock" }, maxOutputTokens: 60 });
  assert.equal(named.toolCalls[0].toolName, "clock");
  const free = await generateText({ model, prompt: "Hello", tools: { weather }, maxOutputTokens: 8 });
  assert.ok(free.text.length > 0 || free.toolCalls.length > 0);
  const obj = await generateText({ model, prompt: "A person", output: Output.object({ schema: Person }), maxOutputTokens: 200 });
  Person.parse(obj.output);
  const s = streamText({ model, prompt: "Hello", maxOutputTokens: 8 });
  let text = "";
  for await (const d of s.textStream) text += d;
  assert.ok(text.length > 0);
});

const lc = new ChatOpenAI({ model: MODEL, apiKey: "k", configuration: { baseURL: BASE }, maxTokens: 200, maxRetries: 0 });

test("LangChain: bindTools with tool_choice any, the ToolMessage round trip", async () => {
  const weather = lcTool(async (input) => JSON.stringify({ temp: 21, ...input }), { name: "weather", description: "Weather in a city", schema: City });
  const bound = lc.bindTools([weather], { tool_choice: "any", parallel_tool_calls: false });
  const ask = new HumanMessage("Weather in Paris?");
  const ai = await bound.invoke([ask]);
  assert.equal(ai.tool_calls.length, 1);
  City.parse(ai.tool_calls[0].args);
  const result = await weather.invoke(ai.tool_calls[0]);
  assert.ok(result instanceof ToolMessage);
  const done = await lc.bindTools([weather], { tool_choice: "none" }).withConfig({}).invoke([ask, ai, result], { max_tokens: 6 });
  assert.ok(typeof done.content === "string" && done.content.length > 0);
  const named = await lc.bindTools([weather], { tool_choice: "weather" }).invoke([ask]);
  assert.equal(named.tool_calls[0].name, "weather");
});

test("LangChain: withStructuredOutput from zod, and streaming", async () => {
  const person = await lc.withStructuredOutput(Person, { name: "person" }).invoke("A person");
  Person.parse(person);
  let text = "";
  for await (const chunk of await lc.stream("Hello", { max_tokens: 8 })) text += chunk.content;
  assert.ok(text.length > 0);
});

setTracingDisabled(true);
const client = new OpenAI({ baseURL: BASE, apiKey: "k", maxRetries: 0 });
const agentModel = new OpenAIResponsesModel(client, MODEL);
const runner = new Runner();

// The SDK treats a reply cut at max_output_tokens as a failure, and the bundled model's free
// text runs to the limit; a structured final output ends where its grammar does, as a real
// model's answer ends at its stop token.
const Forecast = z.object({ summary: z.string().max(24), celsius: z.number().int().min(-50).max(50) });

test("Agents SDK: a tool the agent must call, its output back, then a structured answer", async () => {
  const seen = [];
  const weather = agentTool({ name: "weather", description: "Weather in a city", parameters: City, execute: async (input) => { seen.push(input); return "21 C"; } });
  const agent = new Agent({
    name: "forecaster", instructions: "Answer with the weather.", model: agentModel, tools: [weather],
    outputType: Forecast, modelSettings: { toolChoice: "required", parallelToolCalls: false, maxTokens: 300 },
  });
  const r = await runner.run(agent, "Weather in Paris?", { maxTurns: 3 });
  assert.equal(seen.length, 1);
  City.parse(seen[0]);
  assert.ok(r.newItems.some((i) => i.type === "tool_call_output_item"));
  Forecast.parse(r.finalOutput);
});

test("Agents SDK: structured outputType from zod, and a streamed run", async () => {
  const agent = new Agent({ name: "extractor", instructions: "Describe a person.", model: agentModel, outputType: Person, modelSettings: { maxTokens: 200 } });
  const r = await runner.run(agent, "A person");
  Person.parse(r.finalOutput);
  const s = await runner.run(agent, "Another person", { stream: true });
  let text = "";
  for await (const chunk of s.toTextStream()) text += chunk;
  await s.completed;
  assert.deepEqual(s.finalOutput, Person.parse(JSON.parse(text)));
});
