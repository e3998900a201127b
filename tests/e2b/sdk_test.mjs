// The real e2b SDKs (e2b and @e2b/code-interpreter, pinned by package-lock.json) against corral-sandbox-api's
// E2B API, unchanged: only their URLs and key are set, as a user would set them. Run by the E2B integration test:
//   E2B_API_KEY=KEY E2B_API_URL=http://HOST:PORT E2B_SANDBOX_URL=http://HOST:PORT node sdk_test.mjs [STEP...]
// E2B_OTHER_KEY (optional) is a second key: the adversary step checks that it cannot reach the first key's
// sandboxes. Each step prints "ok STEP" or throws. Node 18 (Debian's) loads the SDK's ES module build directly: its package
// has no "exports" map, and the CommonJS build requires an ES-only dependency there.
import assert from "node:assert/strict";
import { register } from "node:module";
import {
  Sandbox, CommandExitError, SandboxError, NotFoundError, FileNotFoundError, SandboxNotFoundError,
  AuthenticationError, InvalidArgumentError, TimeoutError, Template, BuildError, waitForFile,
} from "./node_modules/e2b/dist/index.mjs";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

// @e2b/code-interpreter, over the same e2b module (e2b_resolve.mjs).
register("./e2b_resolve.mjs", import.meta.url);
const { Sandbox: CodeSandbox } = await import("./node_modules/@e2b/code-interpreter/dist/index.mjs");

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A raw envd call, as a client other than the SDK (or a forger) sends it.
async function envd(sandboxId, token, method, body, { stream = false } = {}) {
  const json = Buffer.from(JSON.stringify(body));
  const header = Buffer.alloc(5);
  header.writeUInt32BE(json.length, 1);
  const res = await fetch(`${process.env.E2B_SANDBOX_URL}/${method}`, {
    method: "POST",
    headers: { "content-type": stream ? "application/connect+json" : "application/json",
               "connect-protocol-version": "1", "e2b-sandbox-id": sandboxId, "x-access-token": token },
    body: stream ? Buffer.concat([header, json]) : json,
  });
  return { status: res.status, text: Buffer.from(await res.arrayBuffer()).toString("latin1") };
}

// A sandbox made through the REST API itself, for its access token.
async function createRaw(key) {
  const res = await fetch(`${process.env.E2B_API_URL}/v2/sandboxes`, {
    method: "POST", headers: { "x-api-key": key, "content-type": "application/json" },
    body: JSON.stringify({ templateID: "base", timeout: 60 }),
  });
  assert.equal(res.status, 201);
  return res.json();
}

const steps = {
  async commands() {
    const sbx = await Sandbox.create("base", { timeoutMs: 120_000, envs: { SBX_GLOBAL: "1" }, metadata: { suite: "sdk" } });
    try {
      const r = await sbx.commands.run('echo "out:$FOO:$SBX_GLOBAL:$(pwd)"; echo err >&2', { envs: { FOO: "bar" }, cwd: "/tmp" });
      assert.equal(r.exitCode, 0);
      assert.equal(r.stdout, "out:bar:1:/tmp\n");
      assert.equal(r.stderr, "err\n");
      await sbx.commands.run("echo boom >&2; exit 3").then(() => assert.fail("exit 3 must throw"), (e) => {
        assert.ok(e instanceof CommandExitError && e instanceof SandboxError, String(e));
        assert.equal(e.exitCode, 3);
        assert.equal(e.stderr, "boom\n");
      });
      const server = await sbx.commands.run("sleep 600", { background: true, timeoutMs: 0 });
      const bg = await sbx.commands.run("sleep 600", { background: true, timeoutMs: 0 });
      assert.equal(typeof bg.pid, "number");
      assert.equal(await bg.kill(), true);
      await bg.wait().then(() => assert.fail("a killed process must not exit 0"), (e) => assert.ok(e instanceof CommandExitError));
      assert.equal(await sbx.commands.kill(bg.pid), false);
      // Killing one process ends that one only: the sandbox's other processes and the next command run on.
      assert.equal((await sbx.commands.run("echo after")).stdout, "after\n");
      assert.ok((await sbx.commands.list()).some((p) => p.pid === server.pid), "the other process was killed too");
      assert.equal(await server.kill(), true);
      const cat = await sbx.commands.run("cat", { background: true, stdin: true });
      await cat.sendStdin("hello\n");
      await sbx.commands.sendStdin(cat.pid, "world\n");
      await cat.closeStdin();
      assert.equal((await cat.wait()).stdout, "hello\nworld\n");
    } finally {
      await sbx.kill();
    }
  },

  async files() {
    const sbx = await Sandbox.create({ timeoutMs: 120_000 });
    try {
      assert.equal((await sbx.files.write("/home/user/a.txt", "hello")).path, "/home/user/a.txt");
      assert.equal((await sbx.files.write([{ path: "/home/user/b.txt", data: "B" },
                                           { path: "/home/user/sub/c.txt", data: new Uint8Array([1, 2, 3]).buffer }])).length, 2);
      assert.equal(await sbx.files.read("/home/user/a.txt"), "hello");
      assert.deepEqual(Array.from(await sbx.files.read("/home/user/sub/c.txt", { format: "bytes" })), [1, 2, 3]);
      const entries = await sbx.files.list("/home/user", { depth: 2 });
      assert.ok(entries.some((e) => e.name === "a.txt" && e.type === "file"), JSON.stringify(entries));
      assert.equal(await sbx.files.exists("/home/user/a.txt"), true);
      assert.equal((await sbx.files.getInfo("/home/user/a.txt")).size, 5);
      assert.equal(await sbx.files.makeDir("/home/user/newdir"), true);
      assert.equal(await sbx.files.makeDir("/home/user/newdir"), false);
      assert.equal((await sbx.files.rename("/home/user/b.txt", "/home/user/b2.txt")).path, "/home/user/b2.txt");
      await sbx.files.remove("/home/user/a.txt");
      assert.equal(await sbx.files.exists("/home/user/a.txt"), false);
      await sbx.files.read("/home/user/a.txt").then(() => assert.fail(),
        (e) => assert.ok(e instanceof FileNotFoundError && e instanceof NotFoundError, String(e)));
    } finally {
      await sbx.kill();
    }
  },

  async processes() {
    const sbx = await Sandbox.create({ timeoutMs: 120_000, envs: { SBX_GLOBAL: "sandbox" } });
    try {
      // A command's envs override the sandbox's; relative paths are under /home/user, the default cwd.
      const r = await sbx.commands.run('echo "$SBX_GLOBAL" > rel.txt; pwd', { envs: { SBX_GLOBAL: "command" } });
      assert.equal(r.stdout, "/home/user\n");
      assert.equal(await sbx.files.read("rel.txt"), "command\n");
      assert.equal(await sbx.files.read("/home/user/rel.txt"), "command\n");
      // A background process is listed; a second client connects to its output; a kill ends both.
      const lines = [];
      const bg = await sbx.commands.run("for i in $(seq 1 600); do echo tick $i; sleep 0.1; done",
                                        { background: true, timeoutMs: 0 });
      const listed = await sbx.commands.list();
      assert.ok(listed.some((p) => p.pid === bg.pid && p.cmd === "/bin/bash"), JSON.stringify(listed));
      const follower = await sbx.commands.connect(bg.pid, { onStdout: (d) => lines.push(d), timeoutMs: 0 });
      const deadline = Date.now() + 20_000;
      while (!lines.join("").includes("tick") && Date.now() < deadline) await sleep(50);
      assert.ok(lines.join("").includes("tick"), "the connected client reads the output");
      assert.equal(await sbx.commands.kill(bg.pid), true);
      await follower.wait().then(() => assert.fail("killed"), (e) => assert.ok(e instanceof CommandExitError, String(e)));
      assert.ok(!(await sbx.commands.list()).some((p) => p.pid === bg.pid));
      // Uploads as raw bytes (octet-stream) as well as forms.
      await sbx.files.write("/home/user/raw.bin", new Uint8Array([0, 255, 7]).buffer, { useOctetStream: true });
      assert.deepEqual(Array.from(await sbx.files.read("/home/user/raw.bin", { format: "bytes" })), [0, 255, 7]);
      // There is one user: root is refused, not pretended.
      await sbx.commands.run("id -u", { user: "root" }).then(() => assert.fail("root must be refused"),
        (e) => assert.ok(e instanceof SandboxError && String(e).includes("permission_denied"), String(e)));
    } finally {
      await sbx.kill();
    }
  },

  async watch() {
    const sbx = await Sandbox.create({ timeoutMs: 120_000 });
    try {
      await sbx.files.makeDir("/home/user/w");
      await sbx.files.write("/home/user/w/old.txt", "old");
      const events = [];
      const handle = await sbx.files.watchDir("/home/user/w", (e) => events.push(e), { recursive: true });
      await sbx.files.write("/home/user/w/new.txt", "new");
      await sbx.files.remove("/home/user/w/old.txt");
      const deadline = Date.now() + 20_000;
      const seen = (name, type) => events.some((e) => e.name === name && e.type === type);
      while (!(seen("new.txt", "create") && seen("old.txt", "remove")) && Date.now() < deadline) await sleep(50);
      await handle.stop();
      assert.ok(seen("new.txt", "create") && seen("old.txt", "remove"), JSON.stringify(events));
    } finally {
      await sbx.kill();
    }
  },

  async adversary() {
    const a = await createRaw(process.env.E2B_API_KEY);
    const b = await createRaw(process.env.E2B_API_KEY);
    try {
      const stat = { path: "/home/user" };
      assert.equal((await envd(a.sandboxID, a.envdAccessToken, "filesystem.Filesystem/Stat", stat)).status, 200);
      // A forged token, and one sandbox's token presented for another, open nothing.
      const forged = await envd(a.sandboxID, "forged", "filesystem.Filesystem/Stat", stat);
      assert.equal(forged.status, 401);
      assert.match(forged.text, /"code":"unauthenticated"/);
      assert.equal((await envd(b.sandboxID, a.envdAccessToken, "filesystem.Filesystem/Stat", stat)).status, 401);
      // A stream whose request is garbage ends with an error and starts nothing.
      const bad = await envd(a.sandboxID, a.envdAccessToken, "process.Process/Start", { process: {} }, { stream: true });
      assert.equal(bad.status, 200);
      assert.match(bad.text, /"code":"invalid_argument"/);
      // Nothing was started: the list is empty, written as envd's protojson writes it (no empty fields).
      const list = await envd(a.sandboxID, a.envdAccessToken, "process.Process/List", {});
      assert.equal(list.status, 200);
      assert.equal(list.text, "{}");
      assert.equal((await envd(a.sandboxID, a.envdAccessToken, "process.Process/SendSignal",
                               { process: { pid: 1 }, signal: "SIGNAL_SIGKILL" })).status, 404);
      // Paths stay inside the sandbox: the host's files are not readable through it.
      const sbx = await Sandbox.connect(a.sandboxID);
      for (const path of ["/etc/passwd", "../../etc/passwd"]) {
        await sbx.files.read(path).then((t) => assert.fail(`read ${path}: ${t.slice(0, 40)}`),
          (e) => assert.ok(e instanceof InvalidArgumentError, String(e)));
      }
      // Another key sees none of this key's sandboxes and cannot kill them.
      if (process.env.E2B_OTHER_KEY) {
        const other = { apiKey: process.env.E2B_OTHER_KEY };
        assert.equal(await Sandbox.kill(a.sandboxID, other), false);
        await Sandbox.connect(a.sandboxID, other).then(() => assert.fail(),
          (e) => assert.ok(e instanceof SandboxNotFoundError, String(e)));
        assert.ok(!(await Sandbox.list(other).nextItems()).some((s) => s.sandboxId === a.sandboxID));
        assert.equal(await sbx.isRunning(), true);
      }
    } finally {
      await Sandbox.kill(a.sandboxID);
      await Sandbox.kill(b.sandboxID);
    }
  },

  async fork() {
    const sbx = await Sandbox.create({ timeoutMs: 120_000 });
    try {
      await sbx.files.write("/home/user/parent.txt", "from the parent");
      await sbx.files.write("/tmp/scratch.txt", "the parent's scratch");
      const forks = await sbx.fork({ count: 3, timeoutMs: 60_000 });
      assert.equal(forks.length, 3);
      for (const [i, f] of forks.entries()) {
        assert.ok(!(f instanceof Error), String(f));
        assert.equal(await f.files.read("/home/user/parent.txt"), "from the parent");
        assert.equal(await f.files.read("/tmp/scratch.txt"), "the parent's scratch");  // /tmp too
        await f.files.write("/home/user/child.txt", `child ${i}`);
      }
      for (const [i, f] of forks.entries()) {
        assert.equal(await f.files.read("/home/user/child.txt"), `child ${i}`);  // writes are isolated
        await f.kill();
      }
      assert.equal(await sbx.files.exists("/home/user/child.txt"), false);
    } finally {
      await sbx.kill();
    }
  },

  // A background process the parent started runs on in every child, with its memory: a counter printing every
  // 100 ms goes on from where the parent's was, in each child alone.
  async forkRunning() {
    const sbx = await Sandbox.create({ timeoutMs: 120_000 });
    try {
      await sbx.files.write("/home/user/counter.py",
        "import time\nn = 0\nwhile True:\n    n += 1\n    print(n, flush=True)\n    time.sleep(0.1)\n");
      const counter = await sbx.commands.run("python3 /home/user/counter.py", { background: true, timeoutMs: 0 });
      const deadline = Date.now() + 10_000;
      while (counter.stdout.split("\n").length < 4 && Date.now() < deadline) await sleep(50);
      const before = counter.stdout.trim().split("\n").length;
      assert.ok(before >= 3, counter.stdout);
      const forks = await sbx.fork({ count: 2, timeoutMs: 60_000 });
      assert.equal(forks.length, 2);
      for (const f of forks) {
        assert.ok(!(f instanceof Error), String(f));
        const listed = (await f.commands.list()).filter((p) => p.args.join(" ").includes("counter.py"));
        assert.equal(listed.length, 1, JSON.stringify(await f.commands.list()));
        assert.notEqual(listed[0].pid, counter.pid);
        let seen = "";
        const h = await f.commands.connect(listed[0].pid, { onStdout: (d) => { seen += d; } });
        const until = Date.now() + 10_000;
        while (seen.split("\n").length < 3 && Date.now() < until) await sleep(50);
        const first = Number(seen.split("\n")[0]);
        assert.ok(first > before, `the child's counter went on from ${first}, the parent's had printed ${before}`);
        assert.equal(await f.commands.kill(listed[0].pid), true);
        await h.wait().catch(() => {});
        await f.kill();
      }
      // The parent's own goes on.
      assert.ok((await sbx.commands.list()).some((p) => p.pid === counter.pid));
      await counter.kill();
    } finally {
      await sbx.kill();
    }
  },

  async timeout() {
    const sbx = await Sandbox.create({ timeoutMs: 60_000 });
    await sbx.setTimeout(3_000);
    assert.equal((await sbx.getInfo()).sandboxId, sbx.sandboxId);
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && (await Sandbox.list().nextItems()).some((s) => s.sandboxId === sbx.sandboxId)) {
      await new Promise((r) => setTimeout(r, 250));
    }
    await Sandbox.getInfo(sbx.sandboxId).then(() => assert.fail("expired, it must be gone"),
      (e) => assert.ok(e instanceof SandboxNotFoundError, String(e)));
    assert.equal(await sbx.isRunning(), false);
  },

  // @e2b/code-interpreter: state kept between runs, stdout and the last value, an exception, envs for one run,
  // two contexts, a timeout that interrupts the code and keeps the context, restart and remove.
  async code() {
    const sbx = await CodeSandbox.create({ timeoutMs: 120_000 });  // the template code-interpreter-v1
    // A run's main value, the run failing loudly when it raised.
    const value = async (code, opts) => {
      const ex = await sbx.runCode(code, opts);
      assert.equal(ex.error, undefined, `${code}: ${JSON.stringify(ex.error)}`);
      return ex.text;
    };
    try {
      let ex = await sbx.runCode("x = 1\nx += 1\nx");
      assert.equal(ex.text, "2");
      assert.equal(ex.error, undefined);
      const streamed = [];
      ex = await sbx.runCode("import sys\nprint('hello')\nprint('oops', file=sys.stderr)\nx * 10",
        { onStdout: (m) => streamed.push(["out", m.line]), onStderr: (m) => streamed.push(["err", m.line]) });
      assert.deepEqual(ex.logs.stdout, ["hello\n"]);
      assert.deepEqual(ex.logs.stderr, ["oops\n"]);
      assert.deepEqual(streamed, [["out", "hello\n"], ["err", "oops\n"]]);
      assert.equal(ex.text, "20");
      ex = await sbx.runCode("1 / 0");
      assert.equal(ex.error.name, "ZeroDivisionError");
      assert.equal(ex.error.value, "division by zero");
      assert.match(ex.error.traceback, /ZeroDivisionError/);
      ex = await sbx.runCode("import os\nos.environ.get('ONLY_NOW')", { envs: { ONLY_NOW: "yes" } });
      assert.equal(ex.text, "'yes'");
      ex = await sbx.runCode("import os\nos.environ.get('ONLY_NOW')");
      assert.equal(ex.text, undefined);  // None: no value

      const ctx = await sbx.createCodeContext({ cwd: "/tmp" });
      assert.equal(ctx.cwd, "/tmp");
      assert.equal(ctx.language, "python");
      await sbx.runCode("y = 5", { context: ctx });
      assert.equal(await value("y", { context: ctx }), "5");
      assert.equal(await value("import os\nos.getcwd()", { context: ctx }), "'/tmp'");
      assert.equal(await value("'y' in globals()"), "False");  // the default context is another
      assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id));
      await sbx.runCode("import time\nwhile True: time.sleep(0.05)", { context: ctx, timeoutMs: 1_500 }).then(
        () => assert.fail("an endless loop must time out"), (e) => assert.ok(e instanceof TimeoutError, String(e)));
      assert.equal(await value("y", { context: ctx }), "5");  // interrupted, the state kept
      await sbx.restartCodeContext(ctx);
      assert.equal(await value("'y' in globals()", { context: ctx }), "False");
      await sbx.removeCodeContext(ctx.id);
      assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id));
      await sbx.runCode("1", { context: ctx }).then(() => assert.fail("a removed context is gone"),
        (e) => assert.ok(e instanceof NotFoundError, String(e)));
      // A fork carries the kernels: each child's contexts have the parent's globals, and change their own.
      const other = await sbx.createCodeContext();
      await sbx.runCode("w = 40", { context: other });
      assert.equal(await value("x"), "2");
      const [child, ...none] = await sbx.fork({ count: 1, timeoutMs: 60_000 });
      assert.equal(none.length, 0);
      assert.ok(!(child instanceof Error), String(child));
      try {
        const childValue = async (code, opts) => {
          const ex = await child.runCode(code, opts);
          assert.equal(ex.error, undefined, `${code}: ${JSON.stringify(ex.error)}`);
          return ex.text;
        };
        assert.equal(await childValue("x += 5\nx"), "7");
        assert.ok((await child.listCodeContexts()).some((c) => c.id === other.id));
        assert.equal(await childValue("w += 2\nw", { context: other }), "42");
        assert.equal(await value("x"), "2");  // the parent's are its own
        assert.equal(await value("w", { context: other }), "40");
      } finally {
        await child.kill();
      }
    } finally {
      await sbx.kill();
    }
  },

  // betaPause freezes the sandbox where it stands (a counting process stops counting), list and getInfo say
  // "paused", connect resumes it (the process counts on), getMetrics samples its cgroup.
  async lifecycle() {
    const sbx = await Sandbox.create({ timeoutMs: 120_000 });
    try {
      // Each count written whole (a rename): a read never meets the file emptied by the redirection.
      await sbx.commands.run(
        "i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv -f /tmp/count.new /tmp/count; sleep 0.02; done",
        { background: true, timeoutMs: 0 });
      // -1 until the loop wrote its first line.
      const count = async () => Number((await sbx.files.read("/tmp/count").catch(() => "")).trim() || -1);
      const deadline = Date.now() + 20_000;
      while ((await count()) < 3 && Date.now() < deadline) await sleep(20);
      const metrics = await sbx.getMetrics();
      if (metrics.length === 0) {  // a host without cgroups measures nothing
        console.log("skip metrics: the host has no cgroup");
      } else {
        const last = metrics[metrics.length - 1];  // now (the first: when it was leased)
        assert.ok(last.cpuCount >= 1 && last.memUsed > 0 && last.memTotal >= last.memUsed,
          JSON.stringify(metrics));
        assert.ok(metrics[0].timestamp instanceof Date && !isNaN(metrics[0].timestamp), String(metrics[0].timestamp));
      }
      const t0 = performance.now();
      const pausedNow = await sbx.betaPause().catch((e) => {
        if (String(e).includes("freezer")) return null;  // a host without a cgroup freezer cannot pause
        throw e;
      });
      if (pausedNow === null) {
        console.log("skip pause: the host has no cgroup freezer");
        return;
      }
      assert.equal(pausedNow, true);
      const paused = performance.now();
      assert.equal(await sbx.betaPause(), false);  // already paused: 409
      assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, "paused");
      const listed = await Sandbox.list({ query: { state: ["paused"] } }).nextItems();
      assert.ok(listed.some((s) => s.sandboxId === sbx.sandboxId && s.state === "paused"));
      assert.ok(!(await Sandbox.list({ query: { state: ["running"] } }).nextItems()).some(
        (s) => s.sandboxId === sbx.sandboxId));
      assert.equal(await sbx.isRunning(), false);
      const t1 = performance.now();
      await sbx.connect();  // resumes it
      const resumed = performance.now();
      assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, "running");
      const at = await count();
      while ((await count()) <= at + 2 && Date.now() < deadline + 20_000) await sleep(20);
      assert.ok((await count()) > at + 2, "the process counts on after the resume");
      console.log(`pause ${(paused - t0).toFixed(1)} ms, resume ${(resumed - t1).toFixed(1)} ms`);
    } finally {
      await sbx.kill();
    }
  },

  async errors() {
    assert.equal(await Sandbox.kill("ls-0000000000000000000000"), false);
    await Sandbox.getInfo("ls-0000000000000000000000").then(() => assert.fail(),
      (e) => assert.ok(e instanceof SandboxNotFoundError, String(e)));
    await Sandbox.create({ apiKey: "not-a-key" }).then(() => assert.fail(),
      (e) => assert.ok(e instanceof AuthenticationError, String(e)));
    await Sandbox.create("no-such-template", { timeoutMs: 10_000 }).then(() => assert.fail(),
      (e) => assert.ok(e instanceof SandboxError, String(e)));
    const sbx = await Sandbox.create({ timeoutMs: 60_000 });
    assert.equal(await sbx.isRunning(), true);
    await sbx.kill();
    assert.equal(await sbx.isRunning(), false);
    assert.equal(await sbx.kill(), false);
  },
};

// Steps that need a sandbox host holding an image (tests/images/e2b_test.py): run only when named. E2B_IMAGE is
// the image's name; the sandbox API names it by the metadata key `image`, as slime does.
const imageSteps = {
  // Harbor's and slime's shapes: commands as root (background, cwd, envs, no timeout, then wait), a user added
  // and given files, commands as that user; files written as root, 20 at once, read back as bytes.
  async root() {
    const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { image: process.env.E2B_IMAGE } });
    try {
      assert.equal((await sbx.commands.run("id -u", { user: "root" })).stdout, "0\n");
      const handle = await sbx.commands.run("echo $FOO; pwd; id -un", {
        user: "root", background: true, cwd: "/tmp", envs: { FOO: "bar" }, timeoutMs: 0 });
      assert.equal((await handle.wait()).stdout, "bar\n/tmp\nroot\n");
      await sbx.commands.run("useradd -m agent && mkdir -p /work && chown -R agent:agent /work", { user: "root" });
      const agent = await sbx.commands.run("id -un; touch /work/mine && stat -c %U /work/mine; echo $HOME",
        { user: "agent" });
      assert.equal(agent.stdout, "agent\nagent\n/home/agent\n");
      await sbx.commands.run("touch /etc/not-yours", { user: "agent" }).then(() => assert.fail("agent is not root"),
        (e) => assert.ok(e instanceof CommandExitError, String(e)));
      const files = Array.from({ length: 20 }, (_, i) => ({ path: `/srv/batch/f${i}.txt`, data: `file ${i}\n` }));
      assert.equal((await sbx.files.write(files, { user: "root" })).length, 20);
      const bytes = await sbx.files.read("/srv/batch/f19.txt", { format: "bytes", user: "root" });
      assert.equal(Buffer.from(bytes).toString(), "file 19\n");
      assert.equal((await sbx.commands.run("cat /srv/batch/f7.txt", { user: "root" })).stdout, "file 7\n");
      await sbx.commands.run("id -u", { user: "nobody-here" }).then(() => assert.fail("an unknown user"),
        (e) => assert.ok(e instanceof SandboxError && String(e).includes("not in its /etc/passwd"), String(e)));
    } finally {
      await sbx.kill();
    }
  },
};

// Harbor's and NeMo-Gym's templates: built from an image with RUN (as root), COPY (a file and a directory), ENV,
// WORKDIR and a start command; reused by name; a sandbox from it runs as root and as the user a step added. The
// same steps build again from the cache; a failing step fails the build with its output and its step.
imageSteps.template = async () => {
  const context = fs.mkdtempSync(path.join(os.tmpdir(), "e2b-template-"));
  fs.writeFileSync(path.join(context, "config.txt"), "copied file\n");
  fs.mkdirSync(path.join(context, "app", "deep"), { recursive: true });
  fs.writeFileSync(path.join(context, "app", "run.sh"), "echo running\n", { mode: 0o755 });
  fs.writeFileSync(path.join(context, "app", "deep", "data.txt"), "deep data\n");
  const template = () => Template({ fileContextPath: context })
    .fromImage(process.env.E2B_IMAGE)
    .runCmd("mkdir -p /opt/tool && echo built > /opt/tool/stamp", { user: "root" })
    .runCmd("useradd -m agent", { user: "root" })
    .setEnvs({ GREETING: "hello", TOOL_PATH: "/opt/tool:$PATH" })
    .setWorkdir("/srv/app")
    .copy("config.txt", "/etc/tool/config.txt", { user: "root" })
    .copy("app", "/srv/app/", { user: "agent" })
    .runCmd("cat config.txt 2>/dev/null || pwd > /srv/app/built-in", { user: "root" })
    .setStartCmd("echo started > /tmp/started; sleep 600", waitForFile("/tmp/started"));
  const name = `harbor-task-${process.pid}`;
  assert.equal(await Template.exists(name), false);
  const logs = [];
  let began = Date.now();
  const info = await Template.build(template(), name, { cpuCount: 1, memoryMB: 1024, onBuildLogs: (l) => logs.push(l) });
  const cold = Date.now() - began;
  assert.equal(info.name, name);
  assert.ok(logs.some((l) => String(l.message).includes("RUN useradd -m agent")), logs.join("\n"));
  assert.equal(await Template.exists(name), true);

  const sbx = await Sandbox.create(name, { timeoutMs: 120_000, metadata: { task: "t1" } });
  try {
    const out = await sbx.commands.run(
      "cat /opt/tool/stamp /etc/tool/config.txt /srv/app/deep/data.txt; /srv/app/run.sh; cat /srv/app/built-in; " +
      "stat -c %U /srv/app/run.sh /etc/tool/config.txt; echo $GREETING $TOOL_PATH; cat /tmp/started; id -un",
      { user: "root" });
    assert.equal(out.stdout, "built\ncopied file\ndeep data\nrunning\n/srv/app\nagent\nroot\n" +
      "hello /opt/tool:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nstarted\nroot\n");
    assert.equal((await sbx.commands.run("id -un; touch /srv/app/mine", { user: "agent" })).stdout, "agent\n");
  } finally {
    await sbx.kill();
  }

  began = Date.now();
  await Template.build(template(), name);  // the same steps: the host's template, not a second build
  const cached = Date.now() - began;
  console.log(`template build: cold ${cold} ms, cached ${cached} ms`);

  const failing = Template({ fileContextPath: context }).fromImage(process.env.E2B_IMAGE)
    .runCmd("true").runCmd("echo boom-output; exit 3", { user: "root" });
  await Template.build(failing, `broken-${process.pid}`).then(() => assert.fail("the build must fail"), (e) => {
    assert.ok(e instanceof BuildError, String(e));
    assert.match(e.message, /step 2 .*exited with code 3.*boom-output/s);
  });
  assert.equal(await Template.exists(`broken-${process.pid}`), false);
  await Sandbox.create(`broken-${process.pid}`).then(() => assert.fail("no ready build"),
    (e) => assert.ok(String(e).includes("no ready build"), String(e)));

  // Harbor's Dockerfile tasks: the SDK turns the Dockerfile into the same steps.
  const dockerfile = `FROM ${process.env.E2B_IMAGE}\nRUN echo from-dockerfile > /hi\nENV X=1\nWORKDIR /w\n`;
  await Template.build(Template({ fileContextPath: context }).fromDockerfile(dockerfile), `docker-${process.pid}`);
  const fromDocker = await Sandbox.create(`docker-${process.pid}`);
  try {
    assert.equal((await fromDocker.commands.run("cat /hi; echo $X", { user: "root" })).stdout, "from-dockerfile\n1\n");
  } finally {
    await fromDocker.kill();
  }
  // A base no host holds, from a registry that cannot be reached: a build error naming it.
  await Template.build(Template().fromImage("127.0.0.1:1/missing:1"), `unreachable-${process.pid}`).then(
    () => assert.fail("no such image"), (e) => {
      assert.ok(e instanceof BuildError, String(e));
      assert.match(e.message, /127\.0\.0\.1:1\/missing:1/);
    });
  fs.rmSync(context, { recursive: true });
};

for (const name of process.argv.length > 2 ? process.argv.slice(2) : Object.keys(steps)) {
  await (steps[name] ?? imageSteps[name])();
  console.log("ok", name);
}
