// Both user systems: password, OTP, 2FA and OAuth2 logins; the auth store; refresh with rotation,
// before expiry and after a 401, never two at once; logout.
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { createServer } from "node:http";
import { before, test } from "node:test";
import { AuthStore, CmsClient, CmsError, MemoryStorage } from "../dist/index.js";
import {
  adminClient, claimsOf, liveServer, loggedOtp, logLength, retimed, totp, unique, waitFor,
} from "./helpers.mjs";

let server;
let admin;
let members;

/** A client whose requests to `.../refresh` are counted (through a real fetch). */
function countingClient(options = {}) {
  const counts = { refresh: 0 };
  const client = new CmsClient(server.url, {
    ...options,
    fetch: (input, init) => {
      if (String(input).endsWith("/refresh")) {
        counts.refresh += 1;
      }
      return fetch(input, init);
    },
  });
  return { client, counts };
}

before(async () => {
  server = await liveServer();
  admin = await adminClient();
  members = unique("members");
  await admin.collections.create({
    name: members, type: "auth", otp_enabled: true, mfa_enabled: true, schema: [{ name: "nick", type: "text" }],
  });
});

test("admin sign-in fills the auth store, tells its listeners, and logout ends the session", async () => {
  const client = new CmsClient(server.url);
  const seen = [];
  const stop = client.authStore.onChange((state) => seen.push(state.token));
  const answer = await client.auth.authWithPassword(server.adminEmail, server.adminPassword);
  assert.equal(answer.requires_2fa, false);
  assert.equal(client.authStore.token, answer.token.access_token);
  assert.equal(client.authStore.refreshToken, answer.token.refresh_token);
  assert.equal(client.authStore.record.email, server.adminEmail);
  assert.equal(client.authStore.collection, null);
  assert.equal(client.authStore.isValid, true);
  assert.equal(client.authStore.claims.aud, "admin");
  assert.deepEqual(seen, [answer.token.access_token]);
  assert.equal((await client.auth.me()).email, server.adminEmail);
  stop();
  const spentToken = client.authStore.token;
  await client.auth.logout();
  assert.equal(client.authStore.token, "");
  assert.equal(client.authStore.record, null);
  assert.equal(seen.length, 1);
  const stale = new CmsClient(server.url);
  stale.authStore.save(spentToken, "");
  await assert.rejects(stale.auth.me(), (error) => error instanceof CmsError && error.status === 401);
});

test("a wrong password is a typed 401 invalid_credentials and stores nothing", async () => {
  const { client, counts } = countingClient();
  await assert.rejects(client.auth.authWithPassword(server.adminEmail, "wrong-password"), (error) =>
    error instanceof CmsError && error.status === 401 && error.code === "invalid_credentials");
  assert.equal(client.authStore.token, "");
  assert.equal(counts.refresh, 0);
});

test("the auth store keeps its state in the storage it is given", async () => {
  const storage = new MemoryStorage();
  const client = new CmsClient(server.url, { authStore: new AuthStore({ storage, key: "app_auth" }) });
  await client.auth.authWithPassword(server.adminEmail, server.adminPassword);
  assert.ok(storage.getItem("app_auth"));
  const reloaded = new CmsClient(server.url, { authStore: new AuthStore({ storage, key: "app_auth" }) });
  assert.equal(reloaded.authStore.token, client.authStore.token);
  assert.equal((await reloaded.auth.me()).email, server.adminEmail);
  reloaded.authStore.clear();
  assert.equal(storage.getItem("app_auth"), null);
});

test("refresh rotates the pair: the old refresh token is spent", async () => {
  const client = await adminClient();
  const first = client.authStore.refreshToken;
  const pair = await client.auth.refresh();
  assert.notEqual(pair.refresh_token, first);
  assert.equal(client.authStore.refreshToken, pair.refresh_token);
  assert.equal(client.authStore.token, pair.access_token);
  assert.equal((await client.auth.me()).email, server.adminEmail);
});

test("an expired access token is refreshed once for concurrent calls, which then succeed", async (t) => {
  if (!server.secretKey) {
    t.skip("needs CMS_SECRET_KEY to mint an expired token");
    return;
  }
  const { client, counts } = countingClient();
  await client.auth.authWithPassword(server.adminEmail, server.adminPassword);
  const expired = retimed(client.authStore.token, server.secretKey, -60);
  client.authStore.save(expired, client.authStore.refreshToken);
  const changes = [];
  client.authStore.onChange((state) => changes.push(state.token));
  const calls = Array.from({ length: 5 }, () => client.auth.me());
  calls.push(admin.collection(members).getList(1, 1).then(() => client.collections.list()));
  const answers = await Promise.all(calls);
  assert.equal(answers[0].email, server.adminEmail);
  assert.equal(counts.refresh, 1);
  assert.equal(changes.length, 1);
  assert.notEqual(client.authStore.token, expired);
  assert.ok(claimsOf(client.authStore.token).exp > Date.now() / 1000 + 600);
  assert.equal((await client.auth.me()).email, server.adminEmail);  // the session lives: no refresh token reuse
});

test("the access token is refreshed on its own shortly before it expires", async (t) => {
  if (!server.secretKey) {
    t.skip("needs CMS_SECRET_KEY to mint a short-lived token");
    return;
  }
  const { client, counts } = countingClient();
  await client.auth.authWithPassword(server.adminEmail, server.adminPassword);
  const shortLived = retimed(client.authStore.token, server.secretKey, 3);
  client.authStore.save(shortLived, client.authStore.refreshToken);
  await waitFor(() => client.authStore.token !== shortLived, 5_000, "the refresh before expiry");
  assert.equal(counts.refresh, 1);
  assert.ok(claimsOf(client.authStore.token).exp > Date.now() / 1000 + 600);
  client.close();
});

test("an auth collection's user registers, signs in with a password and reads itself", async () => {
  const client = new CmsClient(server.url);
  const email = `${unique("pw")}@example.com`;
  const registered = await client.collection(members).auth.register({ email, password: "secret-pass-1", nick: "pw" });
  assert.equal(registered.user.email, email);
  assert.equal(client.authStore.token, "");
  const answer = await client.collection(members).auth.authWithPassword(email, "secret-pass-1");
  assert.equal(answer.user.email, email);
  assert.equal(client.authStore.collection, members);
  assert.match(client.authStore.claims.aud, /^collection:/);
  const me = await client.collection(members).auth.me();
  assert.equal(me.nick, "pw");
  const pair = await client.auth.refresh();  // the store knows which system issued the token
  assert.equal(client.authStore.refreshToken, pair.refresh_token);
  const spent = client.authStore.token;
  await client.collection(members).auth.logout();
  assert.equal(client.authStore.token, "");
  const stale = new CmsClient(server.url);
  stale.authStore.save(spent, "", null, members);
  await assert.rejects(stale.collection(members).auth.me(), (error) => error instanceof CmsError && error.status === 401);
});

test("OTP: request an emailed code and sign in with it", async (t) => {
  if (!server.logFile) {
    t.skip("needs CMS_LOG_FILE to read the emailed code");
    return;
  }
  const client = new CmsClient(server.url);
  const email = `${unique("otp")}@example.com`;
  await client.collection(members).auth.register({ email, password: "secret-pass-1" });
  const offset = logLength(server.logFile);
  const sent = await client.collection(members).auth.requestOtp(email);
  assert.equal(typeof sent.message, "string");
  const code = await loggedOtp(server.logFile, email, offset);
  await assert.rejects(client.collection(members).auth.authWithOtp(email, code === "000000" ? "111111" : "000000"),
    (error) => error instanceof CmsError && error.status === 400 && error.code === "otp_invalid");
  const answer = await client.collection(members).auth.authWithOtp(email, code);
  assert.equal(answer.user.email, email);
  assert.equal(client.authStore.record.email, email);
  assert.equal((await client.collection(members).auth.me()).email, email);
});

test("2FA: enable with a TOTP code, then a password login needs the second factor", async () => {
  const client = new CmsClient(server.url);
  const email = `${unique("tfa")}@example.com`;
  const auth = client.collection(members).auth;
  await auth.register({ email, password: "secret-pass-1" });
  await auth.authWithPassword(email, "secret-pass-1");
  // codes must come from later and later time steps: keep clear of a step's edge
  if (Date.now() % 30_000 > 26_000) {
    await new Promise((resolve) => setTimeout(resolve, 30_000 - (Date.now() % 30_000) + 200));
  }
  const step = Math.floor(Date.now() / 30_000) * 30_000;
  const setup = await auth.setup2fa();
  assert.match(setup.otpauth_url, /^otpauth:\/\//);
  const enabled = await auth.enable2fa(totp(setup.secret, step - 30_000));
  assert.ok(enabled.recovery_codes.length > 0);
  await auth.logout();
  const first = await auth.authWithPassword(email, "secret-pass-1");
  assert.equal(first.requires_2fa, true);
  assert.equal(first.token, null);
  assert.equal(typeof first.mfa_token, "string");
  assert.equal(client.authStore.token, "");
  const done = await auth.verify2fa(first.mfa_token, totp(setup.secret, step));
  assert.equal(done.requires_2fa, false);
  assert.equal(client.authStore.record.email, email);
  await auth.disable2fa("secret-pass-1", totp(setup.secret, step + 30_000));
  await auth.logout();
  const again = await auth.authWithPassword(email, "secret-pass-1");
  assert.equal(again.requires_2fa, false);
});

test("OAuth2: list providers, send the user to the authorize URL, complete with code and state", async () => {
  // a small OAuth2 provider (authorization code + PKCE S256, no OIDC) on a local port
  const codes = new Map();
  const email = `${unique("oauth")}@example.com`;
  const provider = createServer(async (request, response) => {
    const url = new URL(request.url, "http://127.0.0.1");
    if (url.pathname === "/authorize") {
      const code = randomBytes(12).toString("hex");
      codes.set(code, url.searchParams.get("code_challenge"));
      const back = new URL(url.searchParams.get("redirect_uri"));
      back.searchParams.set("code", code);
      back.searchParams.set("state", url.searchParams.get("state"));
      response.writeHead(302, { Location: back.toString() }).end();
    } else if (url.pathname === "/token" && request.method === "POST") {
      let body = "";
      for await (const chunk of request) {
        body += chunk;
      }
      const form = new URLSearchParams(body);
      const challenge = codes.get(form.get("code"));
      codes.delete(form.get("code"));
      const verified = createHash("sha256").update(form.get("code_verifier") ?? "").digest("base64url");
      const ok = challenge && challenge === verified && form.get("client_secret") === "test-secret";
      response.writeHead(ok ? 200 : 400, { "Content-Type": "application/json" })
        .end(JSON.stringify(ok ? { access_token: "provider-token", token_type: "bearer" } : { error: "invalid_grant" }));
    } else if (url.pathname === "/userinfo" && request.headers.authorization === "Bearer provider-token") {
      response.writeHead(200, { "Content-Type": "application/json" })
        .end(JSON.stringify({ id: "subject-1", email, email_verified: true, name: "O. Auth" }));
    } else {
      response.writeHead(404).end();
    }
  });
  await new Promise((resolve) => provider.listen(0, "127.0.0.1", resolve));
  const base = `http://127.0.0.1:${provider.address().port}`;
  try {
    await admin.settings.set("oauth_providers", JSON.stringify([{
      name: "local", client_id: "test-client", client_secret: "test-secret", scopes: ["profile", "email"],
      auth_url: `${base}/authorize`, token_url: `${base}/token`, userinfo_url: `${base}/userinfo`,
    }]));
    const client = new CmsClient(server.url);
    const auth = client.collection(members).auth;
    const redirectUri = "http://app.example.com/oauth-done";
    const providers = await auth.oauth2Providers();
    const local = providers.find((p) => p.name === "local");
    assert.ok(local);
    const authorizeUrl = auth.oauth2AuthorizeUrl(local, redirectUri);
    assert.ok(authorizeUrl.startsWith(`${base}/authorize?`));
    assert.equal(new URL(authorizeUrl).searchParams.get("redirect_uri"), redirectUri);
    const atProvider = await fetch(authorizeUrl, { redirect: "manual" });
    const { parseOAuth2Redirect } = await import("../dist/index.js");
    const back = parseOAuth2Redirect(atProvider.headers.get("location"));
    assert.equal(back.state, local.state);
    const answer = await auth.authWithOAuth2Code({
      provider: "local", code: back.code, state: back.state, codeVerifier: local.code_verifier, redirectUri,
    });
    assert.equal(answer.user.email, email);
    assert.equal(client.authStore.record.email, email);
    assert.equal(client.authStore.collection, members);
    await assert.rejects(auth.authWithOAuth2Code({
      provider: "local", code: back.code, state: back.state, codeVerifier: local.code_verifier, redirectUri,
    }), (error) => error instanceof CmsError && error.status === 400);
  } finally {
    await admin.settings.set("oauth_providers", "[]");
    provider.close();
  }
});
