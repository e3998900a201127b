// One E2B client of the sandbox fault run (sandbox_faults.py): the real e2b SDK (tests/e2b, pinned), driving
// sandboxes through corral-sandbox-api replicas while a nemesis kills and pauses the services under it. In a loop it
// creates a sandbox on one replica, acts on it (commands, files, /tmp, background processes, a fork, a renewal,
// the same sandbox reached through the other replica, a listing), then kills it or abandons it to its timeout.
// Every call goes to a JSON-lines history (history.py's Op), its times on CLOCK_MONOTONIC like the Python
// clients'. Each sandbox op carries `held_until`: until when this client knows the lease lives (counted from the
// invocation of the call that set its timeout, so never later than the service's own expiry). Stops when its
// stdin closes, leaving what it holds to expire.
//   node e2b_worker.mjs --name N --apis URL,URL --key KEY --owner NAME --history FILE --seed S
import fs from "node:fs";
import { parseArgs } from "node:util";
import {
  Sandbox, SandboxError, AuthenticationError, RateLimitError, ServiceBusyError,
} from "../e2b/node_modules/e2b/dist/index.mjs";

const { values: args } = parseArgs({
  options: {
    name: { type: "string" }, apis: { type: "string" }, key: { type: "string" }, owner: { type: "string" },
    history: { type: "string" }, seed: { type: "string", default: "1" },
  },
});
const REQUEST_MS = 10_000;  // every call's requestTimeoutMs: a call must end (either way) within it, plus slack
const COMMAND_MS = 10_000;  // a foreground command's own lifetime
// A create waits for room: the replica answers within 50 s (under the SDK's default requestTimeoutMs, 60 s, given
// here), and that is its bound. (On Node 20 the SDK's requestTimeoutMs does not end a control-plane call: a
// create against a server that never answers was still waiting at 20 s with 2 s. So what a bound checks is
// how soon the replica answers.)
const CREATE_MS = 60_000, CREATE_BOUND_MS = 50_000;
const apis = args.apis.split(",");
const out = fs.openSync(args.history, "a");
const now = () => Number(process.hrtime.bigint()) / 1e9;  // CLOCK_MONOTONIC, as Python's time.monotonic()
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let stopping = false;
process.stdin.on("data", () => {});
process.stdin.on("end", () => { stopping = true; });
process.stdin.on("error", () => { stopping = true; });

let seed = Number(args.seed) >>> 0;  // mulberry32: a run repeats with its seed (up to the services' timing)
function random() {
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (list) => list[Math.floor(random() * list.length)];
const between = (lo, hi) => lo + Math.floor(random() * (hi - lo + 1));

// The SDK's errors; its requestTimeoutMs firing (fetch's DOMException "TimeoutError", which the SDK's control
// plane calls let through unwrapped); and a network failure (undici's "fetch failed": the replica was down or
// cut the connection).
function describe(e) {
  const sdk = e instanceof SandboxError || e instanceof AuthenticationError || e instanceof RateLimitError ||
    e instanceof ServiceBusyError;
  const kind = sdk ? e.constructor.name
    : e?.name === "TimeoutError" ? "request-timeout"
    : e instanceof TypeError && /fetch failed|terminated/.test(e.message) ? "network" : `foreign ${e?.constructor?.name}`;
  return `${kind}: ${String(e?.message ?? e).split("\n")[0].slice(0, 200)}`;
}

// Runs `fn(rec)` as one recorded operation. `fn` may set rec fields (lease_id, held_until, seen) or throw; a
// result it finds wrong it reports by returning {wrong: "..."}.
async function op(kind, sandbox, boundMs, fn) {
  const rec = {
    process: args.name, kind, limit: "e2b", invoke: now(), complete: 0, ok: false, lease_id: sandbox?.id ?? "",
    held_until: sandbox?.until ?? 0, owner: args.owner, bound: boundMs / 1000, error: "",
  };
  let result;
  try {
    result = await fn(rec);
    rec.ok = !(result && result.wrong);
    if (!rec.ok) rec.error = `wrong: ${result.wrong}`;
  } catch (e) {
    rec.error = describe(e);
    result = undefined;
  }
  rec.complete = now();
  fs.writeSync(out, JSON.stringify(rec) + "\n");
  return rec.ok ? result : undefined;
}

const options = (api) => ({ apiKey: args.key, apiUrl: api, sandboxUrl: api, requestTimeoutMs: REQUEST_MS });

// A sandbox as this client knows it: its SDK handle, and until when its lease surely lives.
async function create(api) {
  const ttl = between(6, 20) * 1000;
  const sandbox = {};
  sandbox.sbx = await op("create", null, CREATE_BOUND_MS, async (rec) => {
    const sbx = await Sandbox.create("base", { ...options(api), requestTimeoutMs: CREATE_MS, timeoutMs: ttl,
                                               metadata: { by: args.name } });
    rec.lease_id = sbx.sandboxId;
    rec.held_until = rec.invoke + ttl / 1000;
    Object.assign(sandbox, { id: sbx.sandboxId, until: rec.held_until });
    return sbx;
  });
  return sandbox.sbx ? sandbox : null;
}

async function act(sandbox, api) {
  const { sbx } = sandbox;
  const nonce = `n${between(0, 1e9)}`;
  switch (pick(["run", "run", "file", "file", "background", "renew", "other-replica", "list", "fork"])) {
    case "run":
      return op("run", sandbox, REQUEST_MS + COMMAND_MS, async () => {
        const r = await sbx.commands.run(`echo ${nonce}`, { timeoutMs: COMMAND_MS, requestTimeoutMs: REQUEST_MS });
        return r.stdout === `${nonce}\n` ? r : { wrong: `stdout ${JSON.stringify(r.stdout)}` };
      });
    case "file": {
      const path = random() < 0.5 ? `/tmp/${nonce}` : `notes/${nonce}.txt`;
      return op("file", sandbox, 2 * REQUEST_MS, async () => {
        await sbx.files.write(path, nonce, { requestTimeoutMs: REQUEST_MS });
        const back = await sbx.files.read(path, { requestTimeoutMs: REQUEST_MS });
        if (back !== nonce) return { wrong: `read ${JSON.stringify(back)} back from ${path}` };
        sandbox.written = { path, content: nonce };  // a fork of it must carry this
        return back;
      });
    }
    case "background":  // left running unless killed below: deleting the sandbox must end it
      return op("background", sandbox, REQUEST_MS, async () => {
        const handle = await sbx.commands.run("sleep 600", { background: true, timeoutMs: 0, requestTimeoutMs: REQUEST_MS });
        if (random() < 0.5) await handle.kill();
        else sandbox.running = true;
        return handle;
      });
    case "renew": {
      const ttl = between(4, 20) * 1000;
      let invoked = 0;
      const done = await op("renew", sandbox, REQUEST_MS, async (rec) => {
        invoked = rec.invoke;
        await sbx.setTimeout(ttl, { requestTimeoutMs: REQUEST_MS });
        return true;
      });
      // Set (never later than invoke + ttl on the service's clock) or, when the answer was lost, maybe set.
      sandbox.until = done ? invoked + ttl / 1000 : Math.min(sandbox.until, invoked + ttl / 1000);
      return done;
    }
    case "other-replica": {  // any replica serves any sandbox: connect through another, run there
      const other = pick(apis.filter((a) => a !== api).concat(apis.length === 1 ? apis : []));
      const ttl = between(6, 20) * 1000;
      let invoked = 0;
      const there = await op("connect", sandbox, REQUEST_MS, async (rec) => {
        invoked = rec.invoke;
        return Sandbox.connect(sandbox.id, { ...options(other), timeoutMs: ttl });
      });
      sandbox.until = Math.min(sandbox.until, invoked + ttl / 1000);  // extended or set: at least this
      if (!there) return undefined;
      return op("run", sandbox, REQUEST_MS + COMMAND_MS, async () => {
        const r = await there.commands.run(`echo ${nonce}`, { timeoutMs: COMMAND_MS, requestTimeoutMs: REQUEST_MS });
        return r.stdout === `${nonce}\n` ? r : { wrong: `stdout ${JSON.stringify(r.stdout)} through ${other}` };
      });
    }
    case "list":  // a key sees its own sandboxes only
      return op("list", sandbox, REQUEST_MS, async (rec) => {
        const page = await Sandbox.list({ ...options(api), limit: 100 }).nextItems();
        rec.seen = page.map((s) => s.sandboxId);
        return page;
      });
    case "fork": {
      if (sandbox.running) return undefined;  // a fork carries no process: the service refuses it
      const ttl = between(6, 15) * 1000;
      const children = await op("fork", sandbox, REQUEST_MS, async (rec) => {
        const forks = await sbx.fork({ count: 2, timeoutMs: ttl, requestTimeoutMs: REQUEST_MS });
        rec.seen = forks.filter((f) => !(f instanceof Error)).map((f) => f.sandboxId);
        return forks.map((f) => (f instanceof Error ? null : { sbx: f, id: f.sandboxId, until: rec.invoke + ttl / 1000 }));
      });
      for (const child of children ?? []) {
        if (!child) continue;
        if (sandbox.written) {  // what the parent wrote (home or /tmp) is in the child
          const { path, content } = sandbox.written;
          await op("file", child, REQUEST_MS, async () => {
            const back = await child.sbx.files.read(path, { requestTimeoutMs: REQUEST_MS });
            return back === content ? back : { wrong: `child read ${JSON.stringify(back)} from ${path}` };
          });
        }
        if (random() < 0.5) await end(child);
      }
      return children;
    }
  }
  return undefined;
}

async function end(sandbox) {
  let invoked = 0;
  const done = await op("kill", sandbox, REQUEST_MS, async (rec) => {
    invoked = rec.invoke;
    return sandbox.sbx.kill({ requestTimeoutMs: REQUEST_MS });
  });
  sandbox.until = Math.min(sandbox.until, invoked);  // the client no longer counts on it, whatever the answer
  return done;
}

while (!stopping) {
  const api = pick(apis);
  const sandbox = await create(api);
  if (!sandbox) {
    await sleep(between(50, 300));  // the service is down or refusing: do not spin
    continue;
  }
  for (let i = between(1, 6); i > 0 && !stopping && now() < sandbox.until - 1; --i) await act(sandbox, api);
  if (random() < 0.7) await end(sandbox);  // else abandoned: its timeout must delete it
}
fs.closeSync(out);
process.exit(0);
