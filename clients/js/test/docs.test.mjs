// Every ```ts block of docs/clients/js.md and of clients/js/README.md (the helper reference) runs
// against the live service: transpiled with the `typescript` package, its `cms-client` import pointed
// at the built dist/, the example base URL replaced by the live one, run with node; it must exit 0, and
// every block type-checks (strict). The pages may fence only `ts` (run) and `console` (shell commands,
// not run).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import ts from "typescript";
import { liveServer } from "./helpers.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const GUIDE = resolve(here, "../../../docs/clients/js.md");
const README = resolve(here, "../README.md");
const DIST = pathToFileURL(resolve(here, "../dist/index.js")).href;
const EXAMPLE_URL = "http://127.0.0.1:8090";
/** An example that has not exited after this long fails. */
const EXAMPLE_TIMEOUT_MS = 30_000;
/** The fence languages the page may use: `ts` blocks are run, `console` blocks are not. */
const FENCES = new Set(["ts", "console"]);

/** The fenced blocks of the page at `path`: `{page, language, code, line}`. */
function fencesOf(path) {
  const text = readFileSync(path, "utf8");
  const page = path === GUIDE ? "docs/clients/js.md" : "clients/js/README.md";
  return [...text.matchAll(/^```(\S*)\n([\s\S]*?)^```$/gm)].map((m) => ({
    page, language: m[1], code: m[2], line: text.slice(0, m.index).split("\n").length,
  }));
}
const guide = fencesOf(GUIDE);
const fences = [...guide, ...fencesOf(README)];
let server;
let scratch;

before(async () => {
  server = await liveServer();
  scratch = mkdtempSync(join(tmpdir(), "cms-js-docs-"));
});
after(() => rmSync(scratch, { recursive: true, force: true }));

test("the pages fence only ts and console blocks; the guide starts with a first-steps example of at most 20 lines", () => {
  assert.ok(guide.length > 5);
  assert.ok(fences.length - guide.length > 5, "the README has its examples");
  for (const fence of fences) {
    assert.ok(FENCES.has(fence.language), `${fence.page} line ${fence.line}: fence language '${fence.language}'`);
  }
  const first = guide[0];
  assert.equal(first.language, "ts");
  assert.ok(first.code.trimEnd().split("\n").length <= 20, "the first-steps example is at most 20 lines");
  for (const call of ["authWithPassword", "expand", "subscribe", "upload"]) {
    assert.ok(first.code.includes(call), `the first-steps example shows ${call}`);
  }
});

test("the examples type-check (strict) against the package's own types", () => {
  const files = fences.filter((f) => f.language === "ts").map((fence, index) => {
    const file = join(scratch, `typed-${index}.ts`);
    writeFileSync(file, fence.code);
    return file;
  });
  const program = ts.createProgram(files, {
    strict: true, noEmit: true, target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler, lib: ["lib.es2022.d.ts", "lib.dom.d.ts"], types: [],
    skipLibCheck: true, paths: { "cms-client": [resolve(here, "../dist/index.d.ts")] },
  });
  const problems = ts.getPreEmitDiagnostics(program).map((d) => {
    const where = d.file ? `${d.file.fileName}:${d.file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1}: ` : "";
    return where + ts.flattenDiagnosticMessageText(d.messageText, "\n");
  });
  assert.deepEqual(problems, []);
});

function run(file) {
  return new Promise((resolveRun) => {
    const child = spawn(process.execPath, [file], { stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (chunk) => (output += chunk));
    child.stderr.on("data", (chunk) => (output += chunk));
    const timer = setTimeout(() => child.kill("SIGKILL"), EXAMPLE_TIMEOUT_MS);
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      resolveRun({ code, signal, output });
    });
  });
}

for (const [index, fence] of fences.entries()) {
  if (fence.language !== "ts") {
    continue;
  }
  test(`${fence.page} example at line ${fence.line} runs`, async () => {
    const source = fence.code.replaceAll(EXAMPLE_URL, server.url);
    const { outputText, diagnostics } = ts.transpileModule(source, {
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, strict: true },
      reportDiagnostics: true,
      fileName: `example-${index}.ts`,
    });
    assert.deepEqual(diagnostics?.map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n")) ?? [], []);
    const program = outputText.replace(/from\s+["']cms-client["']/g, `from ${JSON.stringify(DIST)}`);
    assert.ok(program.includes(DIST), "the example imports cms-client");
    const file = join(scratch, `example-${index}.mjs`);
    writeFileSync(file, program);
    const { code, signal, output } = await run(file);
    assert.equal(code, 0, `${fence.page} example at line ${fence.line} exited ${code ?? signal}:\n${output}`);
  });
}
