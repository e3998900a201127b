# What the relays share (env_relay.py, mcp_http.py: each runs with this part first, as one program): the
# configuration the scheduler passes in __CORRAL_RELAY ({"argv", "env", "cwd", "port", "socket", "log", ...}), the
# server started as the relay's child (in its process group, so ending the relay's call ends both; its output to
# the log), and connections to the server's unix socket or its port on 127.0.0.1, from inside the sandbox.
import base64, hashlib, http.client, json, os, socket, subprocess, sys, threading, time
cfg = json.loads(os.environ.pop("__CORRAL_RELAY"))
log = open(cfg["log"], "ab", buffering=0)
env = dict(os.environ)
env.update(cfg["env"])
try:
    server = subprocess.Popen(cfg["argv"], cwd=cfg["cwd"] or None, env=env, stdin=subprocess.DEVNULL,
                              stdout=log, stderr=log)
    start_error = None
except OSError as e:
    server, start_error = None, str(e)


def connect(timeout):
    """A connection to the server: its unix socket, else its port."""
    if cfg["socket"]:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(cfg["socket"])
        except OSError:
            s.close()
            raise
        return s
    return socket.create_connection(("127.0.0.1", cfg["port"]), timeout=timeout)


class Connection(http.client.HTTPConnection):
    """HTTP to the server, over whichever of the two it listens on."""

    def __init__(self, timeout):
        super().__init__("localhost" if cfg["socket"] else "127.0.0.1", cfg["port"] or None, timeout=timeout)

    def connect(self):
        self.sock = connect(self.timeout)


def tail():
    """The end of the server's log."""
    try:
        with open(cfg["log"], "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 2048))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def gone_after_error():
    """gone() after a connection failed: a server that is crashing gets a moment to exit, so that its exit, not
    the failed connection, is what is said."""
    if server is not None:
        try:
            server.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
    return gone()


def gone():
    """None while the server runs, else why it does not (with its log)."""
    if server is None:
        return {"error": "the server could not be started: " + start_error, "exited": True}
    code = server.poll()
    if code is None:
        return None
    how = "signal %d" % -code if code < 0 else "code %d" % code
    return {"error": "the server exited with " + how, "exited": True, "log": tail()}
