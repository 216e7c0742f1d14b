// The live service the tests run against: `CMS_URL` when set (then `CMS_ADMIN_EMAIL`,
// `CMS_ADMIN_PASSWORD`, `CMS_SECRET_KEY` and `CMS_LOG_FILE` describe it), else a `cms serve`
// (the `cms` on PATH, a free port, a temporary data directory) started here and stopped at exit.
// `test/run.mjs` starts one for the whole `npm test` run and hands it to every test file this way.
import { spawn } from "node:child_process";
import { mkdtempSync, openSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const ADMIN_EMAIL = "admin@example.com";
export const ADMIN_PASSWORD = "change-me-now";
/** The secret a started server signs tokens with (tests mint expired tokens with it). */
export const TEST_SECRET_KEY = "js-client-tests-secret-key-0123456789abcdef";
const START_TIMEOUT_MS = 90_000;

/** A free TCP port on 127.0.0.1. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** Wait until `GET url/health` answers 200, or throw after `timeoutMs`; `alive()` false stops early. */
export async function waitHealthy(url, timeoutMs = START_TIMEOUT_MS, alive = () => true) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!alive()) {
      throw new Error("cms serve stopped before it answered /health");
    }
    try {
      const answer = await fetch(`${url}/health`);
      if (answer.status === 200) {
        return;
      }
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`cms serve did not answer /health within ${timeoutMs} ms`);
}

/** Start `cms serve` on a free port with a temporary data directory; its output goes to a log file.
 * Returns `{url, secretKey, logFile, adminEmail, adminPassword, stop(), release()}` (`release`: let this
 * process exit with the server up, which is then sent SIGTERM). Rate limits are switched off
 * (every test and docs example signs in as the same admin from the same address). */
export async function startServer() {
  const port = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), "cms-js-client-"));
  const logFile = join(dataDir, "serve.log");
  const log = openSync(logFile, "a");
  const child = spawn("cms", ["serve", "--port", String(port), "--data-dir", join(dataDir, "data")], {
    env: { ...process.env, ADMIN_EMAIL, ADMIN_PASSWORD, SECRET_KEY: TEST_SECRET_KEY },
    stdio: ["ignore", log, log],
  });
  let exited = false;
  child.on("exit", () => {
    exited = true;
  });
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (!exited) {
      const gone = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
      await gone;
      clearTimeout(timer);
    }
    rmSync(dataDir, { recursive: true, force: true });
  };
  try {
    await waitHealthy(url, START_TIMEOUT_MS, () => !exited);
    await switchOffRateLimits(url);
  } catch (error) {
    await stop();
    throw error;
  }
  const release = () => {
    child.unref();
    process.once("exit", () => {
      child.kill("SIGTERM");
    });
  };
  return { url, secretKey: TEST_SECRET_KEY, logFile, adminEmail: ADMIN_EMAIL, adminPassword: ADMIN_PASSWORD, stop,
    release };
}

async function switchOffRateLimits(url) {
  const login = await fetch(`${url}/api/v1/auth/login`, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ email: ADMIN_EMAIL, password: ADMIN_PASSWORD }),
  });
  const { token } = await login.json();
  const answer = await fetch(`${url}/api/v1/settings`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${token.access_token}` },
    body: JSON.stringify({ key: "rate_limit_enabled", value: false }),
  });
  if (answer.status !== 200) {
    throw new Error(`switching rate limits off answered ${answer.status}`);
  }
}

/** The environment that hands a running server to the test files (read back by `liveServer`). */
export function serverEnv(server) {
  return {
    CMS_URL: server.url, CMS_ADMIN_EMAIL: server.adminEmail, CMS_ADMIN_PASSWORD: server.adminPassword,
    CMS_SECRET_KEY: server.secretKey ?? "", CMS_LOG_FILE: server.logFile ?? "",
  };
}

let shared = null;

/** The server of this test process: the one `CMS_URL` names, else one started now (stopped at exit). */
export async function liveServer() {
  if (shared) {
    return shared;
  }
  if (process.env.CMS_URL) {
    shared = {
      url: process.env.CMS_URL.replace(/\/+$/, ""),
      adminEmail: process.env.CMS_ADMIN_EMAIL || ADMIN_EMAIL,
      adminPassword: process.env.CMS_ADMIN_PASSWORD || ADMIN_PASSWORD,
      secretKey: process.env.CMS_SECRET_KEY || null,
      logFile: process.env.CMS_LOG_FILE || null,
      stop: async () => undefined,
    };
    return shared;
  }
  shared = await startServer();
  shared.release();  // this process may end with the server still up: stop it then
  return shared;
}
