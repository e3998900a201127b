# The environment relay (env_relay.cc), run in the episode's sandbox: starts the task's environment server, waits
# for its health check, and carries each HTTP request the scheduler writes on stdin (one JSON object per line) to
# the server's port or unix socket, from inside the sandbox. One JSON answer per request, followed by the marker
# line. The server is the relay's child (in its process group), so ending the relay's call ends both.
import http.client, json, os, socket, subprocess, sys, time
cfg = json.loads(os.environ.pop("__CORRAL_ENV"))
mark = cfg["mark"]
log = open(cfg["log"], "ab", buffering=0)
env = dict(os.environ)
env.update(cfg["env"])
try:
    server = subprocess.Popen(cfg["argv"], cwd=cfg["cwd"] or None, env=env, stdin=subprocess.DEVNULL,
                              stdout=log, stderr=log)
    start_error = None
except OSError as e:
    server, start_error = None, str(e)

class Unix(http.client.HTTPConnection):
    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(cfg["socket"])
        self.sock = s

def tail():
    try:
        with open(cfg["log"], "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 2048))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""

def gone():
    if server is None:
        return {"error": "the server could not be started: " + start_error, "exited": True}
    code = server.poll()
    if code is None:
        return None
    how = "signal %d" % -code if code < 0 else "code %d" % code
    return {"error": "the server exited with " + how, "exited": True, "log": tail()}

def call(req):
    dead = gone()
    if dead:
        return dead
    timeout = max(0.05, req.get("timeout", 30))
    c = Unix("localhost", timeout=timeout) if cfg["socket"] else \
        http.client.HTTPConnection("127.0.0.1", cfg["port"], timeout=timeout)
    try:
        body = req.get("body")
        headers = {"Content-Type": "application/json"} if body is not None else {}
        c.request(req["method"], req["path"], body=None if body is None else body.encode(), headers=headers)
        r = c.getresponse()
        return {"status": r.status, "body": r.read().decode("utf-8", "replace")}
    except socket.timeout:
        return {"error": "no answer in time", "timed_out": True}
    except (OSError, http.client.HTTPException) as e:
        time.sleep(0.05)  # a crashing server: let it be reaped, so the answer says it exited
        return gone() or {"error": "%s %s: %s" % (req["method"], req["path"], e), "unreachable": True}
    finally:
        c.close()

def wait(req):
    end = time.monotonic() + req["timeout"]
    last = None
    while time.monotonic() < end:
        r = call({"method": "GET", "path": req["path"], "timeout": min(5, max(0.1, end - time.monotonic()))})
        if r.get("status") == 200 or r.get("exited"):
            return r
        last = r
        time.sleep(0.05)
    return {"error": "not ready: the last try got %s" % json.dumps(last), "timed_out": True, "log": tail()}

for line in sys.stdin:
    try:
        req = json.loads(line)
        out = wait(req) if req.get("wait") else call(req)
    except Exception as e:
        out = {"error": "relay: %r" % e}
    sys.stdout.write(json.dumps(out) + "\n" + mark + "\n")
    sys.stdout.flush()
if server:
    server.kill()
