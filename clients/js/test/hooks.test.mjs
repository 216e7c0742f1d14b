// beforeSend / afterSend hooks, abort signals and auto-cancellation by request key, against the live service.
import assert from "node:assert/strict";
import { before, test } from "node:test";
import { CmsError, CmsNetworkError } from "../dist/index.js";
import { adminClient, unique } from "./helpers.mjs";

let name;
let seeded;

before(async () => {
  const client = await adminClient();
  name = unique("hooked");
  await client.collections.create({ name, schema: [{ name: "title", type: "text" }] });
  seeded = await client.collection(name).create({ title: "first" });
});

const aborted = (error) => error instanceof CmsNetworkError && error.isAbort === true;

test("beforeSend sees and may replace the URL and init; afterSend sees every answer and may replace its body", async () => {
  const client = await adminClient();
  const before = [];
  const after = [];
  client.beforeSend = (url, init) => {
    before.push([init.method, new URL(url).pathname, init.headers.Authorization?.startsWith("Bearer ")]);
    if (url.includes(`/records/${seeded.id}`)) {
      return { url: `${url}${url.includes("?") ? "&" : "?"}fields=id` };
    }
    return undefined;
  };
  client.afterSend = (response, data) => {
    after.push(response.status);
    if (response.status === 404) {
      return { code: "not_found", detail: "rewritten by afterSend" };
    }
    return data && typeof data === "object" && !Array.isArray(data) ? { ...data, hooked: true } : data;
  };
  const one = await client.collection(name).getOne(seeded.id);
  assert.deepEqual(one, { id: seeded.id, hooked: true });  // the URL beforeSend returned was the one sent
  assert.deepEqual(before[0], ["GET", `/api/v1/collections/${name}/records/${seeded.id}`, true]);
  await assert.rejects(client.collection(name).getOne("nope"), (error) => error instanceof CmsError
    && error.status === 404 && error.detail === "rewritten by afterSend");
  assert.deepEqual(after, [200, 404]);
  client.beforeSend = async (url, init) => ({ init: { ...init, headers: { ...init.headers, Authorization: "" } } });
  await assert.rejects(client.collection(name).bulkDelete(["x"]), (error) => error instanceof CmsError
    && error.status === 401);
});

test("a signal aborts a call: it rejects with isAbort true; an answer is never isAbort", async () => {
  const client = await adminClient();
  const controller = new AbortController();
  const pending = client.collection(name).getList(1, 30, { signal: controller.signal });
  controller.abort();
  await assert.rejects(pending, aborted);
  const early = new AbortController();
  early.abort();
  await assert.rejects(client.collection(name).getOne(seeded.id, { signal: early.signal }), aborted);
  await assert.rejects(client.collection(name).getOne("nope"), (error) => error instanceof CmsError
    && error.isAbort === false);
});

test("requestKey: a later call with the same key cancels the pending one; other keys and no key are left alone", async () => {
  const client = await adminClient();
  const records = client.collection(name);
  const first = records.getList(1, 30, { requestKey: "list" });
  const untouched = records.getList(1, 30, { requestKey: "other" });
  const plain = records.getList(1, 30);
  const second = records.getList(1, 30, { requestKey: "list" });
  await assert.rejects(first, aborted);
  assert.equal((await second).items[0].id, seeded.id);
  assert.equal((await untouched).items.length, 1);
  assert.equal((await plain).items.length, 1);
  const cancelled = records.getOne(seeded.id, { requestKey: "one" });
  client.cancelRequest("one");
  await assert.rejects(cancelled, aborted);
  const a = records.getOne(seeded.id, { requestKey: "a" });
  const b = records.create({ title: "written" }, { requestKey: "b" });
  client.cancelAllRequests();
  await assert.rejects(a, aborted);
  await assert.rejects(b, aborted);
});

test("autoCancellation(true) keys every GET by its path; requestKey null opts one out; writes are never keyed", async () => {
  const client = await adminClient();
  const records = client.collection(name);
  client.autoCancellation(true);
  const superseded = records.getList(1, 30);
  const latest = records.getList(2, 30);  // same path, other query: the same key
  await assert.rejects(superseded, aborted);
  assert.equal((await latest).page, 2);
  const kept = records.getList(1, 30, { requestKey: null });
  const also = records.getList(1, 30);
  assert.equal((await kept).items.length, 1);
  assert.equal((await also).items.length, 1);
  const w1 = records.create({ title: "w1" });
  const w2 = records.create({ title: "w2" });
  assert.deepEqual([(await w1).title, (await w2).title], ["w1", "w2"]);
  client.autoCancellation(false);
  const x = records.getList(1, 1);
  const y = records.getList(1, 1);
  assert.equal((await x).per_page, 1);
  assert.equal((await y).per_page, 1);
});
