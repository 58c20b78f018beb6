// Peer renderer for the tests: @huggingface/jinja.
// Usage: node render.mjs CASES_JSON OUT_JSON; CASES_JSON is a list of {template, context};
// the output holds, per case, {text} or {error}.
import fs from "node:fs";
import { Template } from "@huggingface/jinja";

const [casesPath, outPath] = process.argv.slice(2);
const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
const out = cases.map(({ template, context }) => {
  try {
    return { text: new Template(template).render(context) };
  } catch (e) {
    return { error: String(e.message || e) };
  }
});
fs.writeFileSync(outPath, JSON.stringify(out));
