// Realtime over SSE: subscribe with filters, unsubscribe, resume after a dropped connection without
// loss or duplicates, and re-post the subscriptions after a token refresh.
import assert from "node:assert/strict";
import { connect, createServer } from "node:net";
import { before, test } from "node:test";
import { CmsClient, CmsError } from "../dist/index.js";
import { adminClient, liveServer, retimed, unique, waitFor } from "./helpers.mjs";

let server;
let writer;

/** A TCP proxy to the live server whose connections the test can cut (and refuse) at will: a real
 * network drop between the client and the service. */
class CuttableProxy {
  constructor(target) {
    this.target = new URL(target);
    this.sockets = new Set();
    this.server = createServer((socket) => {
      const upstream = connect(Number(this.target.port), this.target.hostname);
      for (const end of [socket, upstream]) {
        this.sockets.add(end);
        end.on("close", () => this.sockets.delete(end));
        end.on("error", () => undefined);
      }
      socket.pipe(upstream).pipe(socket);
    });
  }

  /** Listen (again) on the same port; the URL to give the client. */
  async open() {
    await new Promise((resolve) => this.server.listen(this.port ?? 0, "127.0.0.1", resolve));
    this.port = this.server.address().port;
    return `http://127.0.0.1:${this.port}`;
  }

  /** Cut every connection and refuse new ones until `open()`. */
  async cut() {
    const closed = new Promise((resolve) => this.server.close(resolve));
    for (const socket of this.sockets) {
      socket.destroy();
    }
    await closed;
  }
}

before(async () => {
  server = await liveServer();
  writer = await adminClient();
});

async function newCollection() {
  const name = unique("live");
  await writer.collections.create({ name, schema: [{ name: "title", type: "text" }, { name: "n", type: "number" }] });
  return name;
}

test("subscribe receives creates, updates and deletes; a filter narrows them; unsubscribe stops them", async (t) => {
  const name = await newCollection();
  const client = await adminClient();
  t.after(() => client.close());
  const all = [];
  const big = [];
  const stopAll = await client.realtime.subscribe(`${name}/*`, (event) => all.push(event));
  const stopBig = await client.realtime.subscribe(`${name}/*`, (event) => big.push(event), { filter: "n > 5" });
  assert.equal(client.realtime.isConnected, true);
  assert.ok(client.realtime.clientId);
  const small = await writer.collection(name).create({ title: "small", n: 1 });
  const large = await writer.collection(name).create({ title: "large", n: 10 });
  await writer.collection(name).update(small.id, { title: "small!" });
  await writer.collection(name).delete(small.id);
  await waitFor(() => all.length === 4, 10_000, "four events");
  assert.deepEqual(all.map((e) => [e.action, e.record.id]),
    [["create", small.id], ["create", large.id], ["update", small.id], ["delete", small.id]]);
  assert.equal(all[2].record.title, "small!");
  assert.equal(all[0].topic, `${name}/*`);
  await waitFor(() => big.length === 1, 10_000, "the filtered event");
  assert.equal(big[0].record.id, large.id);
  assert.equal(big[0].topic, `${name}/*?filter=${encodeURIComponent("n > 5")}`);
  await stopAll();
  await writer.collection(name).create({ title: "later", n: 20 });
  await waitFor(() => big.length === 2, 10_000, "the second filtered event");
  assert.equal(all.length, 4);
  await stopBig();
  assert.equal(client.realtime.isConnected, false);
});

test("an event is {topic, id, action, record}; unsubscribe(topic) stops that topic's subscriptions, unsubscribe() all",
  async (t) => {
    const name = await newCollection();
    const other = await newCollection();
    const client = await adminClient();
    t.after(() => client.close());
    const plain = [];
    const filtered = [];
    const elsewhere = [];
    await client.realtime.subscribe(`${name}/*`, (event) => plain.push(event));
    await client.realtime.subscribe(`${name}/*`, (event) => filtered.push(event), { filter: "n > 0" });
    await client.realtime.subscribe(`${other}/*`, (event) => elsewhere.push(event));
    const made = await writer.collection(name).create({ title: "one", n: 1 });
    await waitFor(() => plain.length === 1 && filtered.length === 1, 10_000, "both events");
    assert.deepEqual(Object.keys(plain[0]), ["topic", "id", "action", "record"]);
    assert.deepEqual([plain[0].topic, plain[0].action, plain[0].record.id], [`${name}/*`, "create", made.id]);
    assert.match(plain[0].id, /\S/);
    await client.realtime.unsubscribe(`${name}/*`);  // both of the topic's subscriptions, whatever their filter
    assert.equal(client.realtime.isConnected, true);
    await writer.collection(name).create({ title: "two", n: 2 });
    await writer.collection(other).create({ title: "three", n: 3 });
    await waitFor(() => elsewhere.length === 1, 10_000, "the other collection's event");
    assert.equal(plain.length, 1);
    assert.equal(filtered.length, 1);
    await client.realtime.unsubscribe();
    assert.equal(client.realtime.isConnected, false);
    assert.equal(client.realtime.clientId, "");
  });

test("a topic on an unknown collection is refused with a typed 422", async () => {
  const client = await adminClient();
  await assert.rejects(client.realtime.subscribe("no_such_collection/*", () => undefined),
    (error) => error instanceof CmsError && error.status === 422);
  client.close();
});

test("after a dropped connection the client resumes and gets exactly the events it missed", async (t) => {
  const name = await newCollection();
  const proxy = new CuttableProxy(server.url);
  const client = new CmsClient(await proxy.open());
  t.after(() => client.close());
  await client.auth.authWithPassword(server.adminEmail, server.adminPassword);
  const events = [];
  let resyncs = 0;
  client.realtime.onResync(() => {
    resyncs += 1;
  });
  const stop = await client.realtime.subscribe(`${name}/*`, (event) => events.push(event));
  const clientId = client.realtime.clientId;
  const first = await writer.collection(name).create({ title: "before", n: 0 });
  await waitFor(() => events.length === 1, 10_000, "the first event");
  await proxy.cut();
  await waitFor(() => !client.realtime.isConnected, 10_000, "the client to see the drop");
  const missed = [];
  for (let n = 1; n <= 5; n += 1) {
    missed.push(await writer.collection(name).create({ title: "while away", n }));
  }
  await writer.collection(name).update(missed[0].id, { title: "changed while away" });
  await new Promise((resolve) => setTimeout(resolve, 300));  // let a reconnect attempt or two be refused
  await proxy.open();
  await waitFor(() => events.length >= 7, 15_000, "the missed events");
  const after = await writer.collection(name).create({ title: "after", n: 6 });
  await waitFor(() => events.some((e) => e.record.id === after.id), 10_000, "the event after the resume");
  assert.equal(client.realtime.clientId, clientId);
  assert.equal(resyncs, 0);
  assert.deepEqual(events.map((e) => [e.action, e.record.id]), [
    ["create", first.id], ...missed.map((r) => ["create", r.id]), ["update", missed[0].id], ["create", after.id],
  ]);
  assert.equal(new Set(events.map((e) => e.id)).size, events.length);
  await stop();
  await proxy.cut();
});

test("after a token refresh the subscriptions are posted again with the new token", async (t) => {
  if (!server.secretKey) {
    t.skip("needs CMS_SECRET_KEY to mint a short-lived token");
    return;
  }
  const name = await newCollection();
  const posts = [];
  const client = new CmsClient(server.url, {
    fetch: (input, init) => {
      if (String(input).endsWith("/api/v1/realtime") && init?.method === "POST") {
        posts.push(init.headers.Authorization);
      }
      return fetch(input, init);
    },
  });
  t.after(() => client.close());
  await client.auth.authWithPassword(server.adminEmail, server.adminPassword);
  // a token that expires in 3 s: the server stops a subscription's events at its credentials' expiry
  const shortLived = retimed(client.authStore.token, server.secretKey, 3);
  client.authStore.save(shortLived, client.authStore.refreshToken);
  const events = [];
  const stop = await client.realtime.subscribe(`${name}/*`, (event) => events.push(event));
  assert.deepEqual(posts, [`Bearer ${shortLived}`]);
  await waitFor(() => posts.length === 2, 10_000, "the re-post after the refresh");
  assert.equal(posts[1], `Bearer ${client.authStore.token}`);
  await waitFor(() => Date.now() / 1000 > JSON.parse(atob(shortLived.split(".")[1])).exp + 1, 10_000, "the old expiry");
  const record = await writer.collection(name).create({ title: "after expiry", n: 1 });
  await waitFor(() => events.some((e) => e.record.id === record.id), 10_000, "the event under the new token");
  await stop();
  client.close();
});

test("a sign-in as another user, and a sign-out, move the subscriptions to a new stream under the new principal",
  async (t) => {
    const members = unique("members");
    await writer.collections.create({ name: members, type: "auth", schema: [] });
    const name = unique("notes");
    const rule = 'owner = @request.auth.id || owner = "all"';
    await writer.collections.create({ name, schema: [{ name: "title", type: "text" }, { name: "owner", type: "text" }],
      list_rule: rule, view_rule: rule });
    const users = {};
    for (const who of ["ann", "bob"]) {
      const email = `${unique(who)}@example.com`;
      const { user } = await new CmsClient(server.url).collection(members).auth.register({ email, password: "secret-pass-1" });
      users[who] = { email, id: user.id };
    }
    const answers = [];
    const client = new CmsClient(server.url, {
      fetch: async (input, init) => {
        const response = await fetch(input, init);
        if (String(input).endsWith("/api/v1/realtime") && init?.method === "POST") {
          answers.push(response.status);
        }
        return response;
      },
    });
    t.after(() => client.close());
    const signIn = (who) => client.collection(members).auth.authWithPassword(users[who].email, "secret-pass-1");
    let resyncs = 0;
    client.realtime.onResync(() => {
      resyncs += 1;
    });
    const titles = [];
    const extra = [];
    /** Write one note for ann, one for bob and one for all; wait for the last (events come in order). */
    const round = async (label) => {
      for (const owner of ["ann", "bob", "all"]) {
        await writer.collection(name).create({ title: `${label} ${owner}`, owner: users[owner]?.id ?? "all" });
      }
      await waitFor(() => titles.includes(`${label} all`), 10_000, `the events of round ${label}`);
      return titles.filter((title) => title.startsWith(`${label} `));
    };

    await signIn("ann");
    await client.realtime.subscribe(`${name}/*`, (event) => titles.push(event.record.title));
    const annClientId = client.realtime.clientId;
    assert.deepEqual(await round("1"), ["1 ann", "1 all"]);

    await signIn("bob");
    // subscribing while the client id is still ann's: the refused re-post does not reach the application
    await client.realtime.subscribe(`${name}/*`, (event) => extra.push(event.record.title), { filter: 'title ~ "2 "' });
    await waitFor(() => resyncs === 1, 10_000, "onResync after the move to bob");
    const bobClientId = client.realtime.clientId;
    assert.ok(bobClientId && bobClientId !== annClientId);
    assert.deepEqual(await round("2"), ["2 bob", "2 all"]);
    await waitFor(() => extra.length === 2, 10_000, "the second subscription's events");
    assert.deepEqual(extra, ["2 bob", "2 all"]);

    await client.collection(members).auth.logout();
    await waitFor(() => resyncs === 2, 10_000, "onResync after the sign-out");
    assert.ok(client.realtime.clientId && client.realtime.clientId !== bobClientId);
    assert.deepEqual(await round("3"), ["3 all"]);
    assert.ok(answers.includes(403), "the server refused a re-post on the old client id");
    assert.equal(client.realtime.isConnected, true);
  });
