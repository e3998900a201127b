// The real e2b SDK (pinned by package-lock.json) against corral-sandbox-api's E2B API, unchanged: only its URLs
// and key are set, as a user would set them. Run by the E2B integration test:
//   E2B_API_KEY=KEY E2B_API_URL=http://HOST:PORT E2B_SANDBOX_URL=http://HOST:PORT node sdk_test.mjs [STEP...]
// Each step prints "ok STEP" or throws. Node 18 (Debian's) loads the SDK's ES module build directly: its package
// has no "exports" map, and the CommonJS build requires an ES-only dependency there.
import assert from "node:assert/strict";
import {
  Sandbox, CommandExitError, SandboxError, NotFoundError, FileNotFoundError, SandboxNotFoundError,
  AuthenticationError,
} from "./node_modules/e2b/dist/index.mjs";

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
      const bg = await sbx.commands.run("sleep 600", { background: true, timeoutMs: 0 });
      assert.equal(typeof bg.pid, "number");
      assert.equal(await bg.kill(), true);
      await bg.wait().then(() => assert.fail("a killed process must not exit 0"), (e) => assert.ok(e instanceof CommandExitError));
      assert.equal(await sbx.commands.kill(bg.pid), false);
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

  async fork() {
    const sbx = await Sandbox.create({ timeoutMs: 120_000 });
    try {
      await sbx.files.write("/home/user/parent.txt", "from the parent");
      const forks = await sbx.fork({ count: 3, timeoutMs: 60_000 });
      assert.equal(forks.length, 3);
      for (const [i, f] of forks.entries()) {
        assert.ok(!(f instanceof Error), String(f));
        assert.equal(await f.files.read("/home/user/parent.txt"), "from the parent");
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
    await sbx.kill();
    assert.equal(await sbx.kill(), false);
  },
};

for (const name of process.argv.length > 2 ? process.argv.slice(2) : Object.keys(steps)) {
  await steps[name]();
  console.log("ok", name);
}
