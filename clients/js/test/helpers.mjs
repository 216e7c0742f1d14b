// What the tests share: the live server, signed-in clients, unique names, polling, TOTP codes,
// re-signed JWTs and the codes the server's log shows for emails sent without SMTP.
import { createHmac, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { CmsClient } from "../dist/index.js";
import { liveServer } from "./server.mjs";

export { liveServer };

/** A name no other test uses: `prefix` + random hex (collection names allow [A-Za-z0-9_]). */
export function unique(prefix) {
  return `${prefix}_${randomBytes(5).toString("hex")}`;
}

/** A new client signed in as the admin of the live server. */
export async function adminClient(options = {}) {
  const server = await liveServer();
  const client = new CmsClient(server.url, options);
  await client.auth.authWithPassword(server.adminEmail, server.adminPassword);
  return client;
}

/** Poll `check` (sync or async) every 50 ms until it returns a truthy value; throw after `timeoutMs`. */
export async function waitFor(check, timeoutMs = 10_000, what = "condition") {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

function base64url(bytes) {
  return Buffer.from(bytes).toString("base64url");
}

/** A HS256 JWT of `claims`, signed with `secret` (the server's SECRET_KEY). */
export function signJwt(claims, secret) {
  const head = base64url(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const body = base64url(JSON.stringify(claims));
  const signature = createHmac("sha256", secret).update(`${head}.${body}`).digest();
  return `${head}.${body}.${base64url(signature)}`;
}

/** The claims of a JWT (not verified). */
export function claimsOf(token) {
  return JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString());
}

/** `token` re-signed with `exp` `expInS` seconds from now (negative: in the past) and `iat` before it. */
export function retimed(token, secret, expInS) {
  const now = Math.floor(Date.now() / 1000);
  return signJwt({ ...claimsOf(token), iat: now + expInS - 3600, exp: now + expInS }, secret);
}

function base32Decode(text) {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  let bits = 0;
  let value = 0;
  const out = [];
  for (const char of text.replace(/=+$/, "").toUpperCase()) {
    value = (value << 5) | alphabet.indexOf(char);
    bits += 5;
    if (bits >= 8) {
      out.push((value >>> (bits - 8)) & 0xff);
      bits -= 8;
    }
  }
  return Buffer.from(out);
}

/** The RFC 6238 TOTP code (SHA-1, 30 s steps, 6 digits) of a base32 `secret` at `atMs`. */
export function totp(secret, atMs = Date.now()) {
  const counter = Buffer.alloc(8);
  counter.writeBigUInt64BE(BigInt(Math.floor(atMs / 30_000)));
  const digest = createHmac("sha1", base32Decode(secret)).update(counter).digest();
  const offset = digest[digest.length - 1] & 0x0f;
  const number = (digest.readUInt32BE(offset) & 0x7fffffff) % 1_000_000;
  return String(number).padStart(6, "0");
}

/** The first match of `pattern` (its group 1) in the newest email with `subject` the server logged for
 * `email` after `logOffset` characters (emails without SMTP are logged: subject, recipient, text); polls up
 * to 10 s. */
export async function loggedMail(logFile, email, subject, pattern, logOffset = 0) {
  return waitFor(() => {
    const text = readFileSync(logFile, "utf8").slice(logOffset);
    const marker = `to=${email} subject='${subject}'`;
    const at = text.lastIndexOf(marker);
    return at === -1 ? null : (pattern.exec(text.slice(at + marker.length))?.[1] ?? null);
  }, 10_000, `the email '${subject}' to ${email} in the server log`);
}

/** The newest login code the server logged for `email` after `logOffset` characters. */
export async function loggedOtp(logFile, email, logOffset = 0) {
  return loggedMail(logFile, email, "Your login code", /\b(\d{6})\b/, logOffset);
}

/** The `?token=` of the link in the newest email with `subject` logged for `email` after `logOffset`. */
export async function loggedToken(logFile, email, subject, logOffset = 0) {
  return loggedMail(logFile, email, subject, /[?&]token=([^&\s]+)/, logOffset).then(decodeURIComponent);
}

/** How many characters the server log holds now (to read only what comes after). */
export function logLength(logFile) {
  return readFileSync(logFile, "utf8").length;
}
