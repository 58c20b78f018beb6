// Writes the zod 4 part of the schema corpus (tests/data/schemas/zod-*.json) from schemas
// written the way AI SDK and LangChain users write them. Run from the repository root:
//   node tests/peers/zod_schemas.mjs
import fs from "node:fs";
import { z } from "zod";

const Address = z.object({
  street: z.string(),
  city: z.string(),
  postcode: z.string().regex(/^[0-9]{5}$/),
  country: z.enum(["FR", "DE", "US", "JP"]),
});
const TreeNode = z.object({
  name: z.string(),
  get children() {
    return z.array(TreeNode).max(3);
  },
});

const schemas = {
  weather: z.object({ city: z.string(), unit: z.enum(["celsius", "fahrenheit"]).optional() }),
  calendar_event: z.object({
    title: z.string().min(1).max(80),
    start: z.iso.datetime(),
    end: z.iso.datetime(),
    attendees: z.array(z.email()).max(5),
    location: z.string().nullable(),
  }),
  user_profile: z.object({
    id: z.uuid(),
    name: z.string(),
    age: z.number().int().min(0).max(150),
    email: z.email(),
    website: z.url().optional(),
  }),
  recipe: z.object({
    name: z.string(),
    servings: z.number().int().positive(),
    ingredients: z.array(z.object({ item: z.string(), grams: z.number().nonnegative() })).min(1),
    steps: z.array(z.string()).min(1).max(10),
  }),
  order: z.object({
    order_id: z.number().int(),
    items: z.array(z.object({ sku: z.string(), qty: z.number().int().min(1), price: z.number() })),
    shipping: Address,
    express: z.boolean(),
  }),
  search_query: z.object({
    query: z.string(),
    filters: z
      .object({ after: z.iso.date().optional(), tags: z.array(z.string()).optional() })
      .optional(),
    limit: z.number().int().min(1).max(50).default(10),
  }),
  shape: z.discriminatedUnion("kind", [
    z.object({ kind: z.literal("circle"), radius: z.number().positive() }),
    z.object({ kind: z.literal("rect"), w: z.number(), h: z.number() }),
  ]),
  tree: TreeNode,
  sentiment: z.object({
    label: z.enum(["positive", "negative", "neutral"]),
    score: z.number().min(0).max(1),
  }),
  entities: z.object({
    people: z.array(z.string()),
    places: z.array(z.string()),
    dates: z.array(z.iso.date()),
  }),
  scalar_union: z.object({ value: z.union([z.string(), z.number(), z.boolean(), z.null()]) }),
  tuple_point: z.object({ point: z.tuple([z.number(), z.number(), z.number()]) }),
  record_scores: z.object({ scores: z.record(z.string(), z.number().int()) }),
  literal_status: z.object({ status: z.literal("ok"), code: z.literal(200) }),
  network: z.object({ host: z.ipv4(), port: z.number().int().min(1).max(65535) }),
  time_slot: z.object({ day: z.iso.date(), at: z.iso.time() }),
  product_review: z.object({
    product: z.string(),
    rating: z.number().int().min(1).max(5),
    pros: z.array(z.string()).max(3),
    cons: z.array(z.string()).max(3),
    would_recommend: z.boolean(),
  }),
  temperature_reading: z.object({
    celsius: z.number().gt(-273.15).lt(1000),
    taken: z.iso.datetime(),
  }),
  nested_optional: z.object({
    a: z.object({ b: z.object({ c: z.string().optional() }).optional() }).optional(),
  }),
  classification: z.object({
    categories: z.array(z.enum(["bug", "feature", "question", "docs"])).min(1).max(2),
    priority: z.number().int().min(0).max(3).nullable(),
  }),
};

for (const [name, schema] of Object.entries(schemas)) {
  const out = `tests/data/schemas/zod-${name.replaceAll("_", "-")}.json`;
  fs.writeFileSync(out, JSON.stringify(z.toJSONSchema(schema), null, 2) + "\n");
}
