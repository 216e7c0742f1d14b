// Records, collections, CSV, bulk calls and errors against the live service.
import assert from "node:assert/strict";
import { before, test } from "node:test";
import { CmsClient, CmsError, CmsNetworkError } from "../dist/index.js";
import { adminClient, liveServer, unique } from "./helpers.mjs";

let client;
let authors;
let posts;

before(async () => {
  client = await adminClient();
  authors = unique("authors");
  posts = unique("posts");
  const authorCollection = await client.collections.create({ name: authors, schema: [{ name: "name", type: "text" }] });
  await client.collections.create({
    name: posts,
    schema: [
      { name: "title", type: "text", validation: { required: true } },
      { name: "views", type: "number" },
      { name: "published", type: "bool" },
      { name: "author", type: "relation", collection_id: authorCollection.id, max_select: 1 },
    ],
  });
});

test("create, getOne, update and delete a record; expand and fields shape it", async () => {
  const ada = await client.collection(authors).create({ name: "Ada" });
  const post = await client.collection(posts).create({ title: "Hello", views: 3, author: ada.id }, { expand: "author" });
  assert.equal(post.title, "Hello");
  assert.equal(post.expand.author.name, "Ada");
  const narrow = await client.collection(posts).getOne(post.id, { expand: "author", fields: "id,title,expand.author.name" });
  assert.deepEqual(Object.keys(narrow).sort(), ["expand", "id", "title"]);
  assert.deepEqual(narrow.expand.author, { name: "Ada" });
  const changed = await client.collection(posts).update(post.id, { views: 4 });
  assert.equal(changed.views, 4);
  await client.collection(posts).delete(post.id);
  await assert.rejects(client.collection(posts).getOne(post.id), (error) => error instanceof CmsError
    && error.status === 404 && error.code === "not_found");
});

test("getList filters, sorts, searches and pages with the API's names", async () => {
  const name = unique("listing");
  await client.collections.create({ name, schema: [{ name: "title", type: "text" }, { name: "n", type: "number" }] });
  const records = client.collection(name);
  for (const [n, title] of [[1, "red apple"], [2, "green apple"], [3, "red cherry"]]) {
    await records.create({ title, n });
  }
  const page = await records.getList(1, 2, { filter: "n >= 2", sort: "-n" });
  assert.deepEqual(Object.keys(page).sort(), ["items", "page", "per_page", "total"]);
  assert.equal(page.total, 2);
  assert.equal(page.per_page, 2);
  assert.deepEqual(page.items.map((r) => r.n), [3, 2]);
  const found = await records.getList(1, 30, { search: "red", sort: "n" });
  assert.deepEqual(found.items.map((r) => r.title), ["red apple", "red cherry"]);
  const second = await records.getList(2, 2, { sort: "n" });
  assert.equal(second.page, 2);
  assert.deepEqual(second.items.map((r) => r.n), [3]);
});

test("importCsv stores the valid rows, getFullList pages through them all, exportCsv reads them back", async () => {
  const name = unique("rows");
  await client.collections.create({ name, schema: [{ name: "title", type: "text" }, { name: "n", type: "number" }] });
  const records = client.collection(name);
  const lines = ["title,n"];
  for (let n = 1; n <= 230; n += 1) {
    lines.push(`row ${n},${n}`);
  }
  lines.push("bad row,not-a-number");
  const imported = await records.importCsv(lines.join("\n") + "\n");
  assert.equal(imported.imported, 230);
  assert.equal(imported.failed.length, 1);
  assert.equal(imported.failed[0].row, 231);
  const all = await records.getFullList({ sort: "n" });
  assert.equal(all.length, 230);
  assert.deepEqual(all.map((r) => r.n), Array.from({ length: 230 }, (_, i) => i + 1));
  const filtered = await records.getFullList({ filter: "n > 200", sort: "-n" });
  assert.deepEqual(filtered.map((r) => r.n), Array.from({ length: 30 }, (_, i) => 230 - i));
  const csv = await records.exportCsv({ filter: "n <= 2", sort: "n" });
  const rows = csv.trim().split(/\r?\n/);
  assert.equal(rows.length, 3);
  assert.match(rows[0], /title/);
  assert.match(rows[1], /row 1/);
  assert.match(rows[2], /row 2/);
});

test("bulkUpdate and bulkDelete change every record named, all or nothing", async () => {
  const records = client.collection(posts);
  const made = [];
  for (const title of ["b1", "b2", "b3"]) {
    made.push(await records.create({ title }));
  }
  const ids = made.map((r) => r.id);
  assert.deepEqual(await records.bulkUpdate(ids, { published: true }), { updated: 3 });
  for (const id of ids) {
    assert.equal((await records.getOne(id)).published, true);
  }
  await assert.rejects(records.bulkUpdate(ids, { views: "many" }), (error) => error instanceof CmsError
    && error.status === 422);
  assert.equal((await records.getOne(ids[0])).views ?? null, null);
  assert.deepEqual(await records.bulkDelete(ids), { deleted: 3 });
  const left = await records.getList(1, 30, { filter: "title ~ 'b'" });
  assert.equal(left.items.filter((r) => ids.includes(r.id)).length, 0);
});

test("errors are typed: status, code, detail and the 422's errors per field", async () => {
  const records = client.collection(posts);
  await assert.rejects(records.create({ title: "x", nope: 1 }), (error) => {
    assert.ok(error instanceof CmsError);
    assert.equal(error.status, 422);
    assert.equal(error.code, "validation_error");
    assert.equal(typeof error.detail, "string");
    assert.deepEqual(Object.keys(error.errors), ["nope"]);
    assert.ok(Array.isArray(error.errors.nope) && typeof error.errors.nope[0] === "string");
    return true;
  });
  await assert.rejects(records.create({ views: 1 }), (error) => error instanceof CmsError && error.status === 422
    && "title" in error.errors);
  await assert.rejects(records.getList(1, 30, { filter: "nope = 1" }), (error) => error instanceof CmsError
    && error.status === 400 && error.code === "invalid_filter");
  await assert.rejects(records.getList(1, 30, { expand: "title" }), (error) => error instanceof CmsError
    && error.status === 400 && error.code === "invalid_filter" && /expand/.test(error.detail));
  await assert.rejects(client.collection("no_such_collection").getList(), (error) => error instanceof CmsError
    && error.status === 404);
  const anonymous = new CmsClient((await liveServer()).url);
  await assert.rejects(anonymous.collection(posts).bulkDelete(["x"]), (error) => error instanceof CmsError
    && error.status === 401);
});

test("a request that gets no answer is a CmsNetworkError, not a CmsError", async () => {
  const nowhere = new CmsClient("http://127.0.0.1:9");
  await assert.rejects(nowhere.collection(posts).getList(), (error) => error instanceof CmsNetworkError
    && !(error instanceof CmsError) && error.url.startsWith("http://127.0.0.1:9/"));
});

test("collections are listed and read; health answers", async () => {
  const listed = await client.collections.list();
  const mine = listed.find((c) => c.name === posts);
  assert.ok(mine);
  assert.equal((await client.collections.getOne(mine.id)).name, posts);
  const health = await client.health();
  assert.equal(health.status, "ok");
});
