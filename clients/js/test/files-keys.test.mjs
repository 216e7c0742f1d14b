// Files attached to records, and API keys (create, list, act with one, delete).
import assert from "node:assert/strict";
import { before, test } from "node:test";
import { CmsClient, CmsError } from "../dist/index.js";
import { adminClient, liveServer, unique } from "./helpers.mjs";

let client;
let name;

before(async () => {
  client = await adminClient();
  name = unique("albums");
  await client.collections.create({ name, schema: [{ name: "title", type: "text" }, { name: "cover", type: "file" }] });
});

test("upload a file to a record, read it by URL and download, then delete it", async () => {
  const album = await client.collection(name).create({ title: "First" });
  const bytes = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 1, 2, 3, 4]);
  const file = await client.files.upload(name, album.id, new Blob([bytes], { type: "image/png" }), "cover.png");
  assert.equal(file.filename, "cover.png");
  assert.equal(file.content_type, "image/png");
  assert.equal(file.size, bytes.length);
  assert.equal(file.record_id, album.id);
  const url = client.files.url(file.id);
  assert.equal(url, `${(await liveServer()).url}/api/v1/files/${file.id}`);
  const served = await fetch(url);
  assert.equal(served.status, 200);
  assert.equal(served.headers.get("content-type"), "image/png");
  assert.deepEqual(new Uint8Array(await served.arrayBuffer()), bytes);
  const blob = await client.files.download(file.id);
  assert.deepEqual(new Uint8Array(await blob.arrayBuffer()), bytes);
  await client.files.delete(file.id);
  await assert.rejects(client.files.download(file.id), (error) => error instanceof CmsError && error.status === 404);
});

test("API keys: created with their secret once, listed without it, usable as X-API-Key, revoked", async () => {
  const created = await client.apiKeys.create({ name: unique("reader"), scopes: ["read"] });
  assert.match(created.key, /^cms_/);
  const listed = await client.apiKeys.list();
  const mine = listed.find((k) => k.id === created.id);
  assert.ok(mine);
  assert.equal("key" in mine, false);
  const record = await client.collection(name).create({ title: "by admin" });
  const server = await liveServer();
  const keyed = new CmsClient(server.url, { apiKey: created.key });
  assert.equal((await keyed.collection(name).getOne(record.id)).title, "by admin");
  await assert.rejects(keyed.collection(name).create({ title: "no write scope" }), (error) => error instanceof CmsError
    && error.status === 403);
  await client.apiKeys.delete(created.id);
  await assert.rejects(keyed.collection(name).getOne(record.id), (error) => error instanceof CmsError
    && error.status === 401);
  const switched = new CmsClient(server.url);
  switched.useApiKey(created.key);
  assert.equal(switched.apiKey, created.key);
  await assert.rejects(switched.collection(name).getList(), (error) => error.status === 401);
});
