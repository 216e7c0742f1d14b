// Releases through client.releases: create, read, change, publish all items at once (and by schedule),
// cancel a schedule, delete. Skipped, saying so, against a service without the releases endpoints.
import assert from "node:assert/strict";
import { before, test } from "node:test";
import { CmsClient, CmsError } from "../dist/index.js";
import { adminClient, liveServer, unique, waitFor } from "./helpers.mjs";

let client;
let anonymous;
let present = true;

before(async () => {
  client = await adminClient();
  anonymous = new CmsClient((await liveServer()).url);
  try {
    await client.releases.list();
  } catch (error) {
    if (!(error instanceof CmsError && (error.status === 404 || error.status === 405))) {
      throw error;
    }
    present = false;
  }
});

const SKIP = "the service has no /api/v1/releases";

async function drafts(count) {
  const name = unique("launch");
  await client.collections.create({ name, drafts: true, list_rule: "", view_rule: "",
    schema: [{ name: "title", type: "text", validation: { required: true } }] });
  const ids = [];
  for (let i = 0; i < count; i += 1) {
    ids.push((await client.collection(name).create({ title: `item ${i}` })).id);
  }
  return { name, ids };
}

test("a release is created, read, changed and published: every item at once", async (t) => {
  if (!present) {
    t.skip(SKIP);
    return;
  }
  const { name, ids } = await drafts(2);
  const created = await client.releases.create({ name: "spring", items: [{ collection: name, record_id: ids[0] }] });
  assert.equal(created.name, "spring");
  assert.equal((await client.releases.getOne(created.id)).items.length, 1);
  const page = await client.releases.list(1, 100);
  assert.ok(page.items.some((r) => r.id === created.id));
  assert.equal(page.per_page, 100);
  const changed = await client.releases.update(created.id, { items: ids.map((id) => ({ collection: name, record_id: id })) });
  assert.equal(changed.items.length, 2);
  await assert.rejects(anonymous.collection(name).getOne(ids[0]), (e) => e instanceof CmsError && e.status === 404);
  assert.equal(created.status, "pending");
  assert.equal((await client.releases.publish(created.id)).status, "published");
  await assert.rejects(client.releases.publish(created.id), (e) => e instanceof CmsError && e.status === 409);
  for (const id of ids) {
    assert.equal((await anonymous.collection(name).getOne(id)).status, "published");
  }
  await client.releases.delete(created.id);
  await assert.rejects(client.releases.getOne(created.id), (e) => e instanceof CmsError && e.status === 404);
});

test("a release with an invalid item publishes nothing; a scheduled release publishes at its time; a schedule is cancelled",
  async (t) => {
    if (!present) {
      t.skip(SKIP);
      return;
    }
    const { name, ids } = await drafts(2);
    await client.collection(name).update(ids[1], { title: "" });
    const bad = await client.releases.create({ name: "bad", items: ids.map((id) => ({ collection: name, record_id: id })) });
    await assert.rejects(client.releases.publish(bad.id), (e) => e instanceof CmsError && e.status === 422
      && Object.keys(e.errors).some((k) => k.startsWith("items.")));
    await assert.rejects(anonymous.collection(name).getOne(ids[0]), (e) => e instanceof CmsError && e.status === 404);
    const good = await client.releases.create({ name: "later", items: [{ collection: name, record_id: ids[0] }] });
    const scheduled = await client.releases.publish(good.id, { at: new Date(Date.now() + 1500) });
    assert.equal(scheduled.status, "scheduled");
    const seen = await waitFor(() => anonymous.collection(name).getOne(ids[0]).catch(() => null), 15_000,
      "the scheduled release");
    assert.equal(seen.title, "item 0");
    const cancelled = await client.releases.create({ name: "never", items: [{ collection: name, record_id: ids[1] }] });
    await client.releases.publish(cancelled.id, { at: new Date(Date.now() + 60_000).toISOString() });
    await client.releases.cancelSchedule(cancelled.id);
    await assert.rejects(client.releases.cancelSchedule(cancelled.id), (e) => e instanceof CmsError && e.status === 404);
  });
