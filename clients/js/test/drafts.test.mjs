// Drafts (publish now, by schedule, unpublish, discard), versions (list, get, restore), localized reads,
// aggregation and a view collection, through the client's helpers against the live service.
import assert from "node:assert/strict";
import { before, test } from "node:test";
import { CmsClient, CmsError } from "../dist/index.js";
import { adminClient, liveServer, unique, waitFor } from "./helpers.mjs";

let client;
let anonymous;

before(async () => {
  client = await adminClient();
  anonymous = new CmsClient((await liveServer()).url);
});

async function draftCollection(extra = {}) {
  const name = unique("articles");
  await client.collections.create({ name, drafts: true, list_rule: "", view_rule: "", schema: [
    { name: "title", type: "text", validation: { required: true } }, { name: "views", type: "number" }], ...extra });
  return name;
}

test("a draft is invisible to readers until published; draft reads show the working copy", async () => {
  const name = await draftCollection();
  const records = client.collection(name);
  const draft = await records.create({ title: "v1" });
  assert.equal(draft.status, "draft");
  await assert.rejects(anonymous.collection(name).getOne(draft.id), (e) => e instanceof CmsError && e.status === 404);
  const published = await records.publish(draft.id);
  assert.equal(published.status, "published");
  assert.equal((await anonymous.collection(name).getOne(draft.id)).title, "v1");
  await records.update(draft.id, { title: "v2" });
  assert.equal((await anonymous.collection(name).getOne(draft.id)).title, "v1");
  assert.equal((await records.getOne(draft.id, { draft: true })).title, "v2");
  assert.equal((await records.getOne(draft.id, { draft: true })).status, "changed");
  const listed = await records.getList(1, 10, { draft: true, filter: client.filter("id = {:id}", { id: draft.id }) });
  assert.equal(listed.items[0].title, "v2");
  assert.deepEqual((await records.getFullList({ draft: true })).map((r) => r.title), ["v2"]);
  await records.discardDraft(draft.id);
  assert.equal((await records.getOne(draft.id, { draft: true })).title, "v1");
  await assert.rejects(records.discardDraft(draft.id), (e) => e instanceof CmsError && e.status === 404);
  const unpublished = await records.unpublish(draft.id);
  assert.equal(unpublished.status, "draft");
  await assert.rejects(anonymous.collection(name).getOne(draft.id), (e) => e instanceof CmsError && e.status === 404);
  await assert.rejects(anonymous.collection(name).getOne(draft.id, { draft: true }),
    (e) => e instanceof CmsError && e.status === 401);
});

test("a draft is published by schedule (at as a Date); a schedule can be cancelled; a past at is 422", async () => {
  const name = await draftCollection();
  const records = client.collection(name);
  const draft = await records.create({ title: "scheduled" });
  const at = new Date(Date.now() + 1500);
  const scheduled = await records.publish(draft.id, { at });
  assert.ok(scheduled.scheduled_at, "the answer carries scheduled_at");
  await assert.rejects(anonymous.collection(name).getOne(draft.id), (e) => e instanceof CmsError && e.status === 404);
  const seen = await waitFor(async () => anonymous.collection(name).getOne(draft.id).catch(() => null), 15_000,
    "the scheduled publish");
  assert.equal(seen.title, "scheduled");
  assert.ok(Date.now() >= at.getTime(), "never before its time");
  const other = await records.create({ title: "cancelled" });
  await records.publish(other.id, { at: new Date(Date.now() + 60_000).toISOString() });
  await records.cancelSchedule(other.id);
  assert.equal((await records.getOne(other.id, { draft: true })).scheduled_at, null);
  await assert.rejects(records.cancelSchedule(other.id), (e) => e instanceof CmsError && e.status === 404);
  await assert.rejects(records.publish(other.id, { at: new Date(Date.now() - 60_000) }),
    (e) => e instanceof CmsError && e.status === 422);
});

test("versions are listed newest first, read one by one and restored", async () => {
  const name = unique("versioned");
  await client.collections.create({ name, versions: 5, schema: [{ name: "title", type: "text" }] });
  const records = client.collection(name);
  const made = await records.create({ title: "one" });
  await records.update(made.id, { title: "two" });
  await records.update(made.id, { title: "three" });
  const page = await records.listVersions(made.id);
  assert.deepEqual(page.items.map((v) => v.version), [3, 2, 1]);
  assert.equal(page.total, 3);
  const second = await records.listVersions(made.id, 2, 1);
  assert.deepEqual(second.items.map((v) => v.data.title), ["two"]);
  const first = await records.getVersion(made.id, 1);
  assert.equal(first.data.title, "one");
  const restored = await records.restoreVersion(made.id, 1);
  assert.equal(restored.title, "one");
  assert.equal((await records.getOne(made.id)).title, "one");
  await assert.rejects(records.getVersion(made.id, 99), (e) => e instanceof CmsError && e.status === 404);
});

test("localized fields are read and written per locale; publish with a locale publishes only that locale", async () => {
  const settings = await client.settings.list();
  const before = settings.find((s) => s.key === "locales")?.value;
  await client.settings.set("locales", JSON.stringify([{ code: "en" }, { code: "de", fallback: "en" }]));
  try {
    const name = await draftCollection({ schema: [{ name: "title", type: "text", localized: true }] });
    const records = client.collection(name);
    const made = await records.create({ title: "Hello" });
    await records.update(made.id, { title: "Hallo" }, { locale: "de" });
    await records.publish(made.id);
    assert.equal((await anonymous.collection(name).getOne(made.id, { locale: "de" })).title, "Hallo");
    assert.deepEqual((await anonymous.collection(name).getOne(made.id, { locale: "*" })).title, { en: "Hello", de: "Hallo" });
    await records.update(made.id, { title: "Servus" }, { locale: "de" });
    await records.update(made.id, { title: "Hi" }, { locale: "en" });
    await records.publish(made.id, { locale: "de" });
    assert.deepEqual((await anonymous.collection(name).getOne(made.id, { locale: "*" })).title, { en: "Hello", de: "Servus" });
    await assert.rejects(records.getOne(made.id, { locale: "xx" }), (e) => e instanceof CmsError && e.status === 400);
  } finally {
    await client.settings.set("locales", before ?? JSON.stringify([{ code: "en" }]));
  }
});

test("aggregate groups with the API's names; a view collection is read through collection(name)", async () => {
  const name = unique("sales");
  await client.collections.create({ name, list_rule: "", schema: [{ name: "region", type: "text" },
    { name: "amount", type: "number" }] });
  const records = client.collection(name);
  for (const [region, amount] of [["north", 1], ["north", 2], ["south", 5]]) {
    await records.create({ region, amount });
  }
  const groups = await records.aggregate({ groupBy: "region", aggregates: "count(),sum(amount)", sort: "-sum_amount" });
  assert.equal(groups.total, 2);
  assert.deepEqual(groups.items.map((g) => [g.key.region, g.count, g.sum_amount]), [["south", 1, 5], ["north", 2, 3]]);
  const filtered = await records.aggregate({ aggregates: "max(amount)", filter: client.filter("region = {:r}", { r: "north" }) });
  assert.deepEqual(filtered.items, [{ key: {}, max_amount: 2 }]);
  const paged = await records.aggregate({ groupBy: "region", aggregates: "count()", sort: "region", page: 2, perPage: 1 });
  assert.deepEqual(paged.items.map((g) => g.key.region), ["south"]);
  const viewName = unique("by_region");
  await client.collections.create({ name: viewName, type: "view", list_rule: "", view_rule: "",
    view: { source: name, group_by: "region", aggregates: "count(),sum(amount)" } });
  const view = client.collection(viewName);
  const rows = await view.getFullList({ sort: "region" });
  assert.deepEqual(rows.map((r) => [r.region, r.count, r.sum_amount]), [["north", 2, 3], ["south", 1, 5]]);
  const south = await view.getFirstListItem(client.filter("region = {:r}", { r: "south" }));
  assert.equal((await view.getOne(south.id)).sum_amount, 5);
  await assert.rejects(view.create({ region: "x" }), (e) => e instanceof CmsError && e.status === 405);
});
