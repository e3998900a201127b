// The e2b SDK (tests/e2b's pinned package) against corral-sandbox-api: create -> first command, the time a user
// waits from Sandbox.create() to the first commands.run() answer, one at a time, one started every 50 ms, and a
// burst all at once; then fork of 8 -> a first command in each child. Every sandbox is killed after it is
// measured (not counted). Then @e2b/code-interpreter: runCode("1 + 1") on a warm context against its floor, the
// same sum by a bare `python3 -c` (commands.run) in the same sandbox. Then pause -> resume. Then Template.build of
// three RUN steps and a COPY on the plain base, cold (steps never built) and cached (the same steps under another
// name), beside its floor: a sandbox created, the same commands run in it one by one, killed. Prints one RESULT
// line per mode.
//   E2B_API_KEY=... E2B_API_URL=... E2B_SANDBOX_URL=... node e2b_bench.mjs SEQUENTIAL PACED BURST FORK_ROUNDS RUNS
//     PAUSES TEMPLATES
import { register } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Sandbox, Template } from "../../tests/e2b/node_modules/e2b/dist/index.mjs";

register("../../tests/e2b/e2b_resolve.mjs", import.meta.url);
const { Sandbox: CodeSandbox } = await import("../../tests/e2b/node_modules/@e2b/code-interpreter/dist/index.mjs");

const [sequential, paced, burst, forkRounds, codeRuns, pauses, templates] = process.argv.slice(2).map(Number);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function createToFirstCommand() {
  const t = performance.now();
  const sbx = await Sandbox.create({ timeoutMs: 300_000 });
  const r = await sbx.commands.run("echo 1");
  const ms = performance.now() - t;
  if (r.stdout !== "1\n") throw new Error(`unexpected output ${JSON.stringify(r.stdout)}`);
  await sbx.kill();
  return ms;
}

function report(mode, latencies) {
  if (latencies.length === 0) return;  // (a count of 0: not measured)
  const xs = [...latencies].sort((a, b) => a - b);
  const pct = (q) => xs[Math.min(xs.length - 1, Math.floor(q * xs.length))].toFixed(1);
  console.log(`RESULT e2b mode=${mode} n=${xs.length} p50_ms=${pct(0.5)} p95_ms=${pct(0.95)} p99_ms=${pct(0.99)}`);
}

await createToFirstCommand();  // warm the connections: not counted
const one = [];
for (let i = 0; i < sequential; ++i) one.push(await createToFirstCommand());
report("one_at_a_time", one);

const started = [];
for (let i = 0; i < paced; ++i) {
  started.push(createToFirstCommand());
  await sleep(50);
}
report("one_every_50ms", await Promise.all(started));

report(`burst_of_${burst}`, await Promise.all(Array.from({ length: burst }, createToFirstCommand)));

const parent = await Sandbox.create({ timeoutMs: 300_000 });
await parent.files.write("/home/user/state.txt", "parent state\n");
const forks = [];
for (let r = 0; r < forkRounds; ++r) {
  const t = performance.now();
  const children = await parent.fork({ count: 8, timeoutMs: 120_000 });
  const outs = await Promise.all(children.map((c) => c.commands.run("cat /home/user/state.txt")));
  forks.push(performance.now() - t);
  if (outs.some((o) => o.stdout !== "parent state\n")) throw new Error("a child does not see the parent's file");
  await Promise.all(children.map((c) => c.kill()));
}
await parent.kill();
report("fork_8_to_first_command", forks);

const runs = [], bare = [];
const code = codeRuns > 0 ? await CodeSandbox.create({ timeoutMs: 300_000 }) : null;
if (code !== null) await code.runCode("1 + 1");  // the context's kernel started: not counted
for (let i = 0; i < codeRuns; ++i) {
  let t = performance.now();
  const ex = await code.runCode("1 + 1");
  runs.push(performance.now() - t);
  if (ex.text !== "2") throw new Error(`runCode answered ${JSON.stringify(ex.text)}`);
  t = performance.now();
  const r = await code.commands.run("python3 -c 'print(1 + 1)'");
  bare.push(performance.now() - t);
  if (r.stdout !== "2\n") throw new Error(`python3 -c printed ${JSON.stringify(r.stdout)}`);
}
if (code !== null) {
  await code.kill();
  report("run_code", runs);
  report("python3_c", bare);
}

// Pause -> resume -> a first command, on a sandbox whose background process keeps running across each pause.
const pausing = [], resuming = [];
const held = pauses > 0 ? await Sandbox.create({ timeoutMs: 300_000 }) : null;
if (held !== null) {
  await held.commands.run("while :; do sleep 1; done", { background: true, timeoutMs: 0 });
  for (let i = 0; i < pauses; ++i) {
    let t = performance.now();
    if (!(await held.betaPause())) throw new Error("the sandbox was not paused");
    pausing.push(performance.now() - t);
    t = performance.now();
    await held.connect();
    await held.commands.run("true");
    resuming.push(performance.now() - t);
  }
  await held.kill();
  report("pause", pausing);
  report("resume_to_first_command", resuming);
}

// Template builds: cold, cached, and the same work done by hand in a sandbox.
const cold = [], cached = [], byHand = [], coldServer = [], cachedServer = [];
// The build's own time, as the scheduler logs it ("Built in 123ms ..."): the SDK polls the status every 200 ms.
const built = (into) => (entry) => {
  const m = /Built in ([\d.]+)(ms|s)/.exec(String(entry.message));
  if (m) into.push(Number(m[1]) * (m[2] === "s" ? 1000 : 1));
};
const context = fs.mkdtempSync(path.join(os.tmpdir(), "bench-template-"));
fs.writeFileSync(path.join(context, "data.txt"), "x".repeat(64 * 1024));
for (let i = 0; i < (templates || 0); ++i) {
  const commands = [`echo round-${process.pid}-${i} > stamp`, "mkdir -p tool && seq 1 100000 > tool/n",
    "python3 -c 'print(1)' > tool/py"];
  const template = () => commands.reduce((t, c) => t.runCmd(c), Template({ fileContextPath: context })
    .fromTemplate("base")).copy("data.txt", "data/data.txt");
  let t = performance.now();
  await Template.build(template(), `bench-cold-${process.pid}-${i}`, { onBuildLogs: built(coldServer) });
  cold.push(performance.now() - t);
  t = performance.now();
  await Template.build(template(), `bench-cached-${process.pid}-${i}`, { onBuildLogs: built(cachedServer) });
  cached.push(performance.now() - t);
  t = performance.now();
  const sbx = await Sandbox.create({ timeoutMs: 300_000 });
  for (const c of commands) await sbx.commands.run(c);
  await sbx.files.write("data/data.txt", fs.readFileSync(path.join(context, "data.txt")));
  await sbx.kill();
  byHand.push(performance.now() - t);
}
fs.rmSync(context, { recursive: true });
report("template_build_cold", cold);
report("template_build_cached", cached);
report("template_steps_by_hand", byHand);
report("template_build_cold_in_the_scheduler", coldServer);
report("template_build_cached_in_the_scheduler", cachedServer);
