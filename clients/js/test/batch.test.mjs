// client.batch(): one all-or-nothing POST /api/v1/batch.
import assert from "node:assert/strict";
import { before, test } from "node:test";
import { BatchError, CmsError } from "../dist/index.js";
import { adminClient, unique } from "./helpers.mjs";

let client;
let name;

before(async () => {
  client = await adminClient();
  name = unique("batched");
  await client.collections.create({ name, schema: [{ name: "title", type: "text" }] });
});

test("a batch runs its requests in order and answers each as alone", async () => {
  const kept = await client.collection(name).create({ title: "kept" });
  const gone = await client.collection(name).create({ title: "gone" });
  const batch = client.batch();
  batch.collection(name).create({ title: "new" }, { fields: "id,title" });
  batch.collection(name).update(kept.id, { title: "changed" });
  batch.collection(name).delete(gone.id);
  const answers = await batch.send();
  assert.deepEqual(answers.map((a) => a.status), [201, 200, 204]);
  assert.deepEqual(Object.keys(answers[0].body).sort(), ["id", "title"]);
  assert.equal(answers[1].body.title, "changed");
  assert.equal(answers[2].body, null);
  const titles = (await client.collection(name).getFullList({ sort: "title" })).map((r) => r.title);
  assert.deepEqual(titles, ["changed", "new"]);
});

test("a batch that fails in the middle stores nothing and says which request failed", async () => {
  // The store is asked with a filter on this test's own tag, a query nobody asked before: an unfiltered
  // list read before and after the batch may be the server's cached answer, blind to what was written.
  const tag = unique("failing");
  const batch = client.batch();
  batch.collection(name).create({ title: `${tag} first` });
  batch.collection(name).update("no-such-record", { title: `${tag} second` });
  batch.collection(name).create({ title: `${tag} third` });
  await assert.rejects(batch.send(), (error) => {
    assert.ok(error instanceof BatchError);
    assert.ok(error instanceof CmsError);
    assert.equal(error.status, 400);
    assert.equal(error.code, "bad_request");
    assert.equal(error.failed.index, 1);
    assert.equal(error.failed.status, 404);
    assert.equal(error.failed.body.code, "not_found");
    return true;
  });
  const stored = await client.collection(name).getList(1, 30, { filter: `title~"${tag}"` });
  assert.equal(stored.total, 0);
  assert.deepEqual(stored.items, []);
});

test("a request the batch does not allow fails the whole batch as a validation error", async () => {
  const batch = client.batch().add({ method: "POST", url: "/api/v1/collections" , body: { name: "x" } });
  await assert.rejects(batch.send(), (error) => error instanceof BatchError && error.status === 400
    && error.failed?.body.code === "validation_error");
});

test("a batch request carries its locale: values of localized fields are read and written in it", async () => {
  const localized = unique("batched_i18n");
  await client.collections.create({ name: localized, schema: [{ name: "title", type: "text", localized: true }] });
  const batch = client.batch();
  batch.collection(localized).create({ title: { en: "Hello" } }, { locale: "*" });
  batch.collection(localized).create({ title: "Hi" });
  const answers = await batch.send();
  assert.deepEqual(answers.map((a) => a.body.title), [{ en: "Hello" }, "Hi"]);
  assert.equal(batch.requests[0].url, `/api/v1/collections/${localized}/records?locale=*`);
});
