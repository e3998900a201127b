# The environment relay (env_relay.cc), run in the episode's sandbox after sandbox_server.py (which starts the
# task's environment server): waits for its health check, and carries each request the scheduler writes on stdin
# (one JSON object per line) to the server. One JSON answer per request, followed by the marker line
# (cfg["mark"]).
#   {"wait": true, "path", "timeout"}            GET path until 200 (the health check)
#   {"method", "path", "body", "timeout"}         one HTTP request
#   {"open": "auto"|"http"|"websocket", "ws_path", "timeout"}
#                                                 the episode's transport: a WebSocket session on ws_path (OpenEnv's
#                                                 /ws) when the server accepts the upgrade ("auto") or must
#                                                 ("websocket"), else plain HTTP
#   {"env": "reset"|"step", "body", "timeout"}    a reset or step (body: the HTTP body {"seed", ...} or {"action"}),
#                                                 over the session ({"type": "reset"|"step", "data": ...} frames,
#                                                 answered by an "observation" or an "error" frame) or by POST
# Cookies the server sets are sent back on every later request: one relay per episode, so never shared.

jar = {}  # cookies the server set, by name
ws = None  # the WebSocket session: [socket, bytes read past the last frame]
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_FRAME = 16 << 20

def call(req):
    dead = gone()
    if dead:
        return dead
    timeout = max(0.05, req.get("timeout", 30))
    c = Connection(timeout)
    try:
        body = req.get("body")
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if jar:
            headers["Cookie"] = "; ".join("%s=%s" % kv for kv in jar.items())
        c.request(req["method"], req["path"], body=None if body is None else body.encode(), headers=headers)
        r = c.getresponse()
        for set_cookie in r.msg.get_all("Set-Cookie") or []:
            name, eq, value = set_cookie.split(";", 1)[0].partition("=")
            if eq and name.strip():
                jar[name.strip()] = value.strip()
        return {"status": r.status, "body": r.read().decode("utf-8", "replace")}
    except socket.timeout:
        return {"error": "no answer in time", "timed_out": True}
    except (OSError, http.client.HTTPException) as e:
        return gone_after_error() or {"error": "%s %s: %s" % (req["method"], req["path"], e), "unreachable": True}
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

def ws_upgrade(path, timeout):
    """Opens the session: the server's HTTP status (101 when it accepted)."""
    global ws
    key = base64.b64encode(os.urandom(16)).decode()
    s = connect(timeout)
    head = ["GET %s HTTP/1.1" % path, "Host: localhost", "Upgrade: websocket", "Connection: Upgrade",
            "Sec-WebSocket-Key: " + key, "Sec-WebSocket-Version: 13"]
    if jar:
        head.append("Cookie: " + "; ".join("%s=%s" % kv for kv in jar.items()))
    s.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    got = b""
    while b"\r\n\r\n" not in got and len(got) < 65536:
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    header, _, rest = got.partition(b"\r\n\r\n")
    status_line = header.split(b"\r\n")[0].split()
    status = int(status_line[1]) if len(status_line) > 1 and status_line[1].isdigit() else 0
    accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest())
    if status != 101 or accept not in header:
        s.close()
        return status if status != 101 else 0
    ws = [s, rest]
    return 101

def ws_send(text, opcode=0x1):
    data, mask = text.encode(), os.urandom(4)
    n = len(data)
    size = bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big") if n < 65536 else \
        bytes([0x80 | 127]) + n.to_bytes(8, "big")
    ws[0].sendall(bytes([0x80 | opcode]) + size + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

def ws_read(n):
    while len(ws[1]) < n:
        chunk = ws[0].recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        ws[1] += chunk
    out, ws[1] = ws[1][:n], ws[1][n:]
    return out

def ws_message():
    """The next text message (pings answered, fragments joined); ConnectionError when the session ends."""
    parts = []
    while True:
        b0, b1 = ws_read(2)
        opcode, n = b0 & 0x0F, b1 & 0x7F
        if n >= 126:
            n = int.from_bytes(ws_read(2 if n == 126 else 8), "big")
        if n > MAX_FRAME:
            raise ConnectionError("a frame of %d bytes (at most %d)" % (n, MAX_FRAME))
        mask = ws_read(4) if b1 & 0x80 else None
        payload = ws_read(n)
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        if opcode == 0x9:
            ws_send(payload.decode("latin-1"), 0xA)
        elif opcode == 0x8:
            code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 0
            reason = payload[2:].decode("utf-8", "replace")
            raise ConnectionError("the server closed the session (%d %s)" % (code, reason))
        elif opcode in (0x0, 0x1, 0x2):
            parts.append(payload)
            if b0 & 0x80:
                return b"".join(parts).decode("utf-8", "replace")

def ws_end():
    global ws
    if ws:
        try:
            ws_send(json.dumps({"type": "close"}))
            ws_send("", 0x8)
        except OSError:
            pass
        ws[0].close()
        ws = None

def open_session(req):
    mode, path = req["open"], req.get("ws_path") or "/ws"
    if mode == "http":
        return {"transport": "http"}
    dead = gone()
    if dead:
        return dead
    try:
        status = ws_upgrade(path, max(0.05, req.get("timeout", 30)))
    except socket.timeout:
        return {"error": "no answer to the WebSocket upgrade at %s in time" % path, "timed_out": True}
    except OSError as e:
        return gone() or {"error": "GET %s (upgrade): %s" % (path, e), "unreachable": True}
    if status == 101:
        return {"transport": "websocket", "ws_path": path}
    if mode == "websocket":
        return {"env_error": "the server refused the WebSocket upgrade at %s (HTTP %d)" % (path, status)}
    return {"transport": "http", "upgrade_status": status}

def env_call(req):
    """The answer, with "call": how it was asked."""
    kind = req["env"]
    if ws is None:
        name = "POST /" + kind
        out = call({"method": "POST", "path": name[5:], "body": req["body"], "timeout": req.get("timeout", 30)})
    else:
        name = "%s over the WebSocket session" % kind
        out = session_call(kind, req, name)
    out["call"] = name
    return out

def session_call(kind, req, name):
    dead = gone()
    if dead:
        return dead
    body = json.loads(req["body"])
    frame = {"type": "reset", "data": body} if kind == "reset" else {"type": "step", "data": body.get("action")}
    ws[0].settimeout(max(0.05, req.get("timeout", 30)))
    try:
        ws_send(json.dumps(frame))
        text = ws_message()
    except socket.timeout:
        return {"error": "no answer in time", "timed_out": True}
    except (OSError, ConnectionError) as e:
        ws_end()
        return gone_after_error() or {"error": "%s: %s" % (name, e), "unreachable": True}
    try:
        msg = json.loads(text)
    except ValueError:
        return {"env_error": "the server answered %s with a frame that is not JSON: %s" % (name, text[:300])}
    kind_of = msg.get("type") if isinstance(msg, dict) else None
    if kind_of == "observation":
        return {"status": 200, "body": json.dumps(msg.get("data"))}
    if kind_of == "error":
        data = msg.get("data") if isinstance(msg.get("data"), dict) else {"message": msg.get("data")}
        code = " [%s]" % data["code"] if data.get("code") is not None else ""
        return {"env_error": "the environment answered %s with an error%s: %s" % (name, code, data.get("message"))}
    return {"env_error": "the server answered %s with a frame of type %r: %s" % (name, kind_of, text[:300])}

for line in sys.stdin:
    try:
        req = json.loads(line)
        if req.get("wait"):
            out = wait(req)
        elif "open" in req:
            out = open_session(req)
        elif "env" in req:
            out = env_call(req)
        else:
            out = call(req)
    except Exception as e:
        out = {"error": "relay: %r" % e}
    sys.stdout.write(json.dumps(out) + "\n" + cfg["mark"] + "\n")
    sys.stdout.flush()
ws_end()
if server:
    server.kill()
