// Account flows of both user systems through the emails the server logs (no SMTP in the harness):
// verification, password reset, email change, change password, sessions and their revocation.
import assert from "node:assert/strict";
import { before, test } from "node:test";
import { CmsClient, CmsError } from "../dist/index.js";
import { adminClient, liveServer, loggedToken, logLength, unique } from "./helpers.mjs";

let server;
let members;

before(async () => {
  server = await liveServer();
  members = unique("accounts");
  await (await adminClient()).collections.create({ name: members, type: "auth", schema: [] });
});

/** A new user of `system` (`client.auth` or `client.collection(members).auth`), registered and signed in. */
async function signedIn(pick, password = "first-pass-1") {
  const client = new CmsClient(server.url);
  const email = `${unique("acct")}@example.com`;
  const offset = server.logFile ? logLength(server.logFile) : 0;
  await pick(client).register({ email, password });
  await pick(client).authWithPassword(email, password);
  return { client, email, offset };
}

const SYSTEMS = [["the admin table", (c) => c.auth], ["an auth collection", (c) => c.collection(members).auth]];

for (const [label, pick] of SYSTEMS) {
  test(`${label}: the emailed verification link verifies; requestVerification sends a new one`, async (t) => {
    if (!server.logFile) {
      t.skip("needs CMS_LOG_FILE to read the emailed link");
      return;
    }
    const { client, email, offset } = await signedIn(pick);
    const first = await loggedToken(server.logFile, email, "Verify your email address", offset);
    const again = logLength(server.logFile);
    assert.equal(typeof (await pick(client).requestVerification()).message, "string");
    const second = await loggedToken(server.logFile, email, "Verify your email address", again);
    assert.notEqual(second, first);
    await assert.rejects(pick(client).confirmVerification(first), (e) => e instanceof CmsError && e.status === 400);
    await pick(client).confirmVerification(second);
    assert.equal((await pick(client).me()).verified, true);
  });

  test(`${label}: a password reset by the emailed token; the old password stops working`, async (t) => {
    if (!server.logFile) {
      t.skip("needs CMS_LOG_FILE to read the emailed link");
      return;
    }
    const { client, email } = await signedIn(pick);
    const offset = logLength(server.logFile);
    const anonymous = new CmsClient(server.url);
    assert.equal(typeof (await pick(anonymous).requestPasswordReset(email)).message, "string");
    const token = await loggedToken(server.logFile, email, "Reset your password", offset);
    await assert.rejects(pick(anonymous).confirmPasswordReset(token, "x"), (e) => e instanceof CmsError && e.status === 422);
    await pick(anonymous).confirmPasswordReset(token, "second-pass-2");
    await assert.rejects(pick(anonymous).confirmPasswordReset(token, "third-pass-3"),
      (e) => e instanceof CmsError && e.status === 400 && e.code === "token_invalid");
    await assert.rejects(pick(anonymous).authWithPassword(email, "first-pass-1"), (e) => e instanceof CmsError && e.status === 401);
    assert.equal((await pick(anonymous).authWithPassword(email, "second-pass-2")).user.email, email);
    await assert.rejects(pick(client).me(), (e) => e instanceof CmsError && e.status === 401);  // its session was revoked
  });

  test(`${label}: changePassword keeps this session and revokes the others; sessions are listed and revoked`, async () => {
    const { client, email } = await signedIn(pick);
    const other = new CmsClient(server.url);
    await pick(other).authWithPassword(email, "first-pass-1");
    const third = new CmsClient(server.url);
    await pick(third).authWithPassword(email, "first-pass-1");
    const sessions = await pick(client).listSessions();
    assert.equal(sessions.length, 3);
    assert.equal(sessions.filter((s) => s.current).length, 1);
    const thirdSid = third.authStore.claims.sid;
    await pick(client).revokeSession(thirdSid);
    await assert.rejects(pick(third).me(), (e) => e instanceof CmsError && e.status === 401);
    assert.equal(await pick(client).revokeOtherSessions(), 1);
    await assert.rejects(pick(other).me(), (e) => e instanceof CmsError && e.status === 401);
    assert.equal((await pick(client).listSessions()).length, 1);
    await assert.rejects(pick(client).changePassword("wrong-pass-0", "new-pass-22"), (e) => e instanceof CmsError && e.status === 422);
    await pick(client).changePassword("first-pass-1", "new-pass-22");
    assert.equal((await pick(client).me()).email, email);
    await pick(client).revokeSession(client.authStore.claims.sid);
    assert.equal(client.authStore.token, "");
    await pick(client).authWithPassword(email, "new-pass-22");
    await pick(client).revokeAllSessions();
    assert.equal(client.authStore.token, "");
    await assert.rejects(pick(new CmsClient(server.url)).listSessions(), (e) => e instanceof CmsError && e.status === 401);
  });
}

test("an auth collection's user changes their email by the link sent to the new address", async (t) => {
  if (!server.logFile) {
    t.skip("needs CMS_LOG_FILE to read the emailed link");
    return;
  }
  const pick = (c) => c.collection(members).auth;
  const { client, email } = await signedIn(pick);
  const newEmail = `${unique("moved")}@example.com`;
  await assert.rejects(pick(client).requestEmailChange(newEmail, "wrong-pass-0"), (e) => e instanceof CmsError);
  const offset = logLength(server.logFile);
  await pick(client).requestEmailChange(newEmail, "first-pass-1");
  const token = await loggedToken(server.logFile, newEmail, "Confirm your new email address", offset);
  await pick(new CmsClient(server.url)).confirmEmailChange(token);
  const again = new CmsClient(server.url);
  await assert.rejects(pick(again).authWithPassword(email, "first-pass-1"), (e) => e instanceof CmsError && e.status === 401);
  const answer = await pick(again).authWithPassword(newEmail, "first-pass-1");
  assert.equal(answer.user.email, newEmail);
  await assert.rejects(pick(client).me(), (e) => e instanceof CmsError && e.status === 401);
  assert.equal(client.authStore.token, "");  // the refresh after the 401 was refused: the session is over
});
