// client.filter binds values as literals of the filter grammar; getFirstListItem finds the first match.
import assert from "node:assert/strict";
import { before, test } from "node:test";
import { CmsError, filterLiteral } from "../dist/index.js";
import { adminClient, unique } from "./helpers.mjs";

let client;
let name;

before(async () => {
  client = await adminClient();
  name = unique("notes");
  await client.collections.create({ name, schema: [
    { name: "title", type: "text" }, { name: "n", type: "number" }, { name: "done", type: "bool" },
    { name: "due", type: "date" }] });
});

const HOSTILE = [
  '" || 1=1 || "', "' || 1=1 || '", 'a"b', "a'b", "back\\slash", "ends with \\", '\\" || title != "',
  "two\nlines", "tab\there", "(paren) && x", "{:t}", "",
];

test("every hostile string stays one literal: it matches its own record only, against the live service", async () => {
  const records = client.collection(name);
  await records.create({ title: "plain", n: 0 });
  const ids = new Map();
  for (const [i, title] of HOSTILE.entries()) {
    ids.set(title, (await records.create({ title, n: i + 1 })).id);
  }
  for (const title of HOSTILE) {
    const filter = client.filter("title = {:t}", { t: title });
    const page = await records.getList(1, 50, { filter });
    assert.deepEqual(page.items.map((r) => r.id), [ids.get(title)], `filter ${JSON.stringify(filter)}`);
    const negated = await records.getList(1, 50, { filter: client.filter("title != {:t}", { t: title }) });
    assert.equal(negated.total, HOSTILE.length, `negation of ${JSON.stringify(title)}`);
  }
});

test("numbers, booleans, null and dates are written as the grammar's literals", async () => {
  const records = client.collection(name);
  const due = new Date("2031-05-06T07:08:09.000Z");
  const made = await records.create({ title: "typed", n: -2.5, done: true, due: due.toISOString() });
  const filter = client.filter("n = {:n} && done = {:d} && due = {:at} && title = {:t}",
    { n: -2.5, d: true, at: due, t: "typed" });
  assert.equal(filter, 'n = -2.5 && done = true && due = "2031-05-06T07:08:09.000Z" && title = "typed"');
  assert.equal((await records.getFirstListItem(filter)).id, made.id);
  const later = await records.getList(1, 50, { filter: client.filter("due > {:at}", { at: new Date(due.getTime() - 1000) }) });
  assert.deepEqual(later.items.map((r) => r.id), [made.id]);
  assert.equal(client.filter("due = {:x}", { x: null }), "due = null");
  assert.equal(filterLiteral(10n ** 20n), "100000000000000000000");
  assert.equal(filterLiteral(1e21), "1e+21");
});

test("an unknown placeholder, a value without a literal and a placeholder in a value are handled", () => {
  assert.throws(() => client.filter("title = {:t}", {}), /no value for the placeholder \{:t\}/);
  assert.throws(() => client.filter("n = {:n}", { n: Number.NaN }), TypeError);
  assert.throws(() => client.filter("n = {:n}", { n: Infinity }), TypeError);
  assert.throws(() => client.filter("n = {:n}", { n: {} }), TypeError);
  assert.throws(() => client.filter("n = {:n}", { n: new Date("nope") }), TypeError);
  // a value is never scanned for placeholders again
  assert.equal(client.filter("a = {:a} && b = {:b}", { a: "{:b}", b: 1 }), 'a = "{:b}" && b = 1');
  assert.throws(() => client.filter("title = {:toString}", {}), /no value/);
});

test("getFirstListItem answers the first match in sort order, and a 404 CmsError when none matches", async () => {
  const records = client.collection(name);
  await records.create({ title: "first-item", n: 500 });
  await records.create({ title: "first-item", n: 501 });
  const first = await records.getFirstListItem(client.filter("title = {:t}", { t: "first-item" }), { sort: "-n" });
  assert.equal(first.n, 501);
  await assert.rejects(records.getFirstListItem(client.filter("title = {:t}", { t: "no such title" })),
    (error) => error instanceof CmsError && error.status === 404 && error.code === "not_found");
  await assert.rejects(records.getFirstListItem("nope = 1"),
    (error) => error instanceof CmsError && error.status === 400 && error.code === "invalid_filter");
});
