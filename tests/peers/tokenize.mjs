// Peer tokenizer for the tests: @huggingface/tokenizers on the same tokenizer.json.
// Usage: node tokenize.mjs TOKENIZER_JSON CASES_JSON OUT_JSON
// CASES_JSON is a list of base64 byte strings; bytes are decoded as WHATWG UTF-8 (invalid
// sequences become U+FFFD), then encoded without added special tokens.
import fs from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [tokPath, casesPath, outPath] = process.argv.slice(2);
const tokJson = JSON.parse(fs.readFileSync(tokPath, "utf8"));
const tok = new Tokenizer(tokJson, {});
const dec = new TextDecoder("utf-8");
const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
const out = cases.map((b64) => {
  const text = dec.decode(Buffer.from(b64, "base64"));
  return Array.from(tok.encode(text, { add_special_tokens: false }).ids, Number);
});
fs.writeFileSync(outPath, JSON.stringify(out));
