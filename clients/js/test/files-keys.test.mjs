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

// a 1x1 PNG (a file of an image type is checked whole at upload: a bare signature is refused)
const PNG = Uint8Array.from(Buffer.from(
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==", "base64"));

test("upload a file to a record, read it by URL and download, then delete it", async () => {
  const album = await client.collection(name).create({ title: "First" });
  const bytes = PNG;
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

test("a record is created and changed with its files in one request; a protected file needs a token", async () => {
  const albums = unique("photos");
  await client.collections.create({ name: albums, schema: [
    { name: "title", type: "text" }, { name: "cover", type: "file", mime_types: ["image/*"] },
    { name: "pages", type: "file", max_select: 5, protected: true }] });
  const photos = client.collection(albums);
  const album = await photos.create({ title: "holidays" }, { files: {
    cover: new File([PNG], "cover.png", { type: "image/png" }),
    pages: [new File(["one"], "1.txt", { type: "text/plain" }), new File(["two"], "2.txt", { type: "text/plain" })],
  } });
  assert.equal(album.title, "holidays");
  assert.equal(album.pages.length, 2);
  assert.deepEqual(new Uint8Array(await (await client.files.download(album.cover)).arrayBuffer()), PNG);
  const [first, second] = album.pages;
  const changed = await photos.update(album.id, { "pages-": [first] },
    { files: { "pages+": new File(["three"], "3.txt", { type: "text/plain" }) } });
  assert.equal(changed.pages[0], second);
  assert.equal(changed.pages.length, 2);
  await assert.rejects(photos.create({ title: "bad" }, { files: { cover: new Blob(["not a png"], { type: "image/png" }) } }),
    (error) => error instanceof CmsError && error.status === 422 && "cover" in error.errors);
  const loose = await client.files.upload(albums, album.id, new Blob(["four"]), "4.txt", "pages");
  assert.equal(loose.field, "pages");
  assert.equal((await fetch(client.files.url(second))).status, 404);
  const { token, expires } = await client.files.token();
  assert.ok(Date.parse(expires) > Date.now());
  const shown = await fetch(`${client.files.url(second)}?token=${encodeURIComponent(token)}`);
  assert.equal(await shown.text(), "two");
  const thumb = await fetch(`${client.files.url(album.cover)}?thumb=100x100&format=webp`);
  assert.equal(thumb.headers.get("content-type"), "image/webp");
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

test("files.getURL builds a thumbnail's URL (a webp is served) and a protected file's URL with getToken", async () => {
  const albums = unique("gallery");
  await client.collections.create({ name: albums, list_rule: "", view_rule: "", schema: [
    { name: "cover", type: "file", mime_types: ["image/*"], thumbs: ["50x0"] },
    { name: "scan", type: "file", mime_types: ["image/*"], protected: true }] });
  const album = await client.collection(albums).create({}, { files: {
    cover: new File([PNG], "cover.png", { type: "image/png" }), scan: new File([PNG], "scan.png", { type: "image/png" }),
  } });
  const server = await liveServer();
  const url = client.files.getURL(album, album.cover, { thumb: "100x100", format: "webp" });
  assert.equal(url, `${server.url}/api/v1/files/${album.cover}?thumb=100x100&format=webp`);
  const thumb = await fetch(url);
  assert.equal(thumb.status, 200);
  assert.equal(thumb.headers.get("content-type"), "image/webp");
  const bytes = Buffer.from(await thumb.arrayBuffer());
  assert.equal(bytes.subarray(0, 4).toString("latin1"), "RIFF");
  assert.equal(bytes.subarray(8, 12).toString("latin1"), "WEBP");
  assert.equal((await fetch(client.files.getURL(album, album.cover, { thumb: "50x0" }))).status, 200);
  assert.equal((await fetch(client.files.getURL(album, album.cover, { thumb: "7x7" }))).status, 400);
  assert.equal((await fetch(client.files.getURL(album, album.scan))).status, 404);
  const token = await client.files.getToken();
  assert.equal(typeof token, "string");
  const shown = await fetch(client.files.getURL(album, album.scan, { token }));
  assert.equal(shown.status, 200);
  assert.deepEqual(new Uint8Array(await shown.arrayBuffer()), PNG);
  assert.equal(client.files.getURL(album, null), "");
  assert.equal(client.files.getURL(null, album.cover), "");
  await assert.rejects(new CmsClient(server.url).files.getToken(), (error) => error instanceof CmsError
    && error.status === 401);
});
