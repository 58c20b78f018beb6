// Peer validator for the tests: ajv (draft 2020-12, with ajv-formats), the validator the
// ecosystem uses. Usage: node validate.mjs CASES_JSON OUT_JSON; CASES_JSON is a list of
// {schema, docs: [text...]}; the output holds, per case, a list of null (valid) or an error.
import fs from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const [casesPath, outPath] = process.argv.slice(2);
const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
const out = cases.map(({ schema, docs }) => {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  let validate;
  try {
    validate = ajv.compile(schema);
  } catch (e) {
    return docs.map(() => `schema: ${e.message}`);
  }
  return docs.map((text) => {
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      return `not JSON: ${e.message}`;
    }
    return validate(value) ? null : ajv.errorsText(validate.errors);
  });
});
fs.writeFileSync(outPath, JSON.stringify(out));
