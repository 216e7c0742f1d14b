// `npm test`: start one `cms serve` for the whole run (unless CMS_URL names one), run every
// test/*.test.mjs (or the files named as arguments) with Node's test runner against it, stop it,
// and exit with the runner's status.
import { spawn } from "node:child_process";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { serverEnv, startServer } from "./server.mjs";

/** A test that has not finished after this long fails (a hang must not stall CI). */
const TEST_TIMEOUT_MS = 60_000;
const here = dirname(fileURLToPath(import.meta.url));
const named = process.argv.slice(2);
const files = named.length ? named : readdirSync(here).filter((name) => name.endsWith(".test.mjs")).sort().map((name) => join(here, name));
const server = process.env.CMS_URL ? null : await startServer();
const env = server ? { ...process.env, ...serverEnv(server) } : process.env;
let status = 1;
try {
  const runner = spawn(process.execPath, ["--test", "--test-concurrency=1", `--test-timeout=${TEST_TIMEOUT_MS}`, ...files], { env, stdio: "inherit" });
  status = await new Promise((resolve) => runner.on("exit", (code, signal) => resolve(code ?? (signal ? 1 : 0))));
} finally {
  await server?.stop();
}
process.exit(status);
