// Schema as code through client.schema: export, diff, apply (with the diff's hash), conflicts and data loss.
import assert from "node:assert/strict";
import { before, test } from "node:test";
import { CmsClient, CmsError } from "../dist/index.js";
import { adminClient, liveServer, unique } from "./helpers.mjs";

let client;

before(async () => {
  client = await adminClient();
});

test("export, diff and apply a snapshot; a stale hash is 409; data loss needs allowDataLoss", async () => {
  const name = unique("snap");
  await client.collections.create({ name, schema: [{ name: "title", type: "text" }, { name: "old", type: "text" }] });
  const snapshot = await client.schema.export();
  assert.equal(snapshot.format, 1);
  assert.match(snapshot.hash, /^[0-9a-f]{64}$/);
  const mine = snapshot.collections.find((c) => c.name === name);
  assert.ok(mine, "the new collection is in the snapshot");
  assert.deepEqual(await client.schema.diff(snapshot), { hash: snapshot.hash, changes: [] });

  const copy = unique("snapcopy");
  const wanted = { format: 1, collections: [...snapshot.collections, { ...structuredClone(mine), name: copy }] };
  const diff = await client.schema.diff(wanted);
  assert.deepEqual(diff.changes.map((c) => [c.op, c.collection, c.data_loss]), [["create", copy, false]]);
  const applied = await client.schema.apply(wanted, { hash: diff.hash });
  assert.ok(applied.collections.some((c) => c.name === copy));
  assert.notEqual(applied.hash, snapshot.hash);
  assert.equal((await client.collection(copy).create({ title: "made by the applied schema" })).title,
    "made by the applied schema");
  await assert.rejects(client.schema.apply(wanted, { hash: snapshot.hash }),
    (error) => error instanceof CmsError && error.status === 409 && error.code === "conflict");

  const fresh = await client.schema.export();
  const lossy = structuredClone(fresh);
  const target = lossy.collections.find((c) => c.name === name);
  const fields = Array.isArray(target.schema) ? target.schema : target.schema.fields;
  fields.splice(fields.findIndex((f) => f.name === "old"), 1);
  const lossDiff = await client.schema.diff(lossy);
  assert.ok(lossDiff.changes.some((c) => c.collection === name && c.data_loss));
  await assert.rejects(client.schema.apply(lossy, { hash: lossDiff.hash }),
    (error) => error instanceof CmsError && error.status === 422);
  const done = await client.schema.apply(lossy, { allowDataLoss: true });  // no hash: a diff runs first
  assert.deepEqual(await client.schema.diff(lossy), { hash: done.hash, changes: [] });
  await assert.rejects(new CmsClient((await liveServer()).url).schema.export(),
    (error) => error instanceof CmsError && error.status === 401);
});
