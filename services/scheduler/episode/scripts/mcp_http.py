# MCP's streamable HTTP transport for a task's MCP server that listens (mcp_tools.cc), run in the episode's
# sandbox after sandbox_server.py (which starts the server). The scheduler speaks to this program as to a stdio
# MCP server, one JSON-RPC message per line both ways; each message it writes is POSTed to the server's endpoint
# (cfg["path"]), and each JSON-RPC message of the answer (a JSON body or an SSE stream) comes back as a line.
# Both eras of the protocol:
#   modern (2026-07-28 and later, stateless): probed with server/discover when the scheduler initializes; the
#     initialize is then answered here from the discovery, notifications/initialized goes no further, every
#     request carries the version, capabilities and client info in params._meta and the MCP-Protocol-Version,
#     Mcp-Method and Mcp-Name headers, and a cancelled request's connection is closed.
#   legacy (2025-11-25 and earlier): initialize goes to the server; the Mcp-Session-Id it sets is sent on every
#     later request (a 404 for it means the session expired: a new one is initialized and the request sent
#     again once), MCP-Protocol-Version carries the negotiated version, and the session is deleted at the end.
#   openenv (an OpenEnv server's /mcp: JSON-RPC without initialize, which it refuses as an unknown method): the
#     initialize is answered here, a session is opened with openenv/session/create and named on every request
#     (X-OpenEnv-Session-Id, params.session_id), and closed with openenv/session/close at the end.
# Each POST runs on its own thread, so the server's own requests on an open SSE stream can be answered. An HTTP
# error answers its request with a JSON-RPC error; when the server exits, so does this program (the scheduler
# starts both again on the next call).

MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "corral", "version": "1"}}
ACCEPT = "application/json, text/event-stream"
MAX_MESSAGE = 16 << 20

out_lock = threading.Lock()
state = {"era": None, "session": None, "version": None, "init": None, "openenv": None}
inflight = {}  # request id (as JSON) -> its open connection
cancelled = set()  # ids (as JSON) of requests whose connection was closed here: nothing more is said of them


def emit(message):
    with out_lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def die_gone(dead):
    die("%s; its log ends: %s" % (dead["error"], dead.get("log", "")[-600:]))


def die(why):
    """The server is gone or never listened: say so (the scheduler shows it when initialize fails) and end, the
    server too (an agent's MCP client that started this relay does not stop its process group)."""
    with out_lock:
        sys.stdout.write(why.replace("\n", " ") + "\n")
        sys.stdout.flush()
    if server and server.poll() is None:
        server.kill()
    os._exit(0)


def error_for(msg, text, code=-32000):
    return {"jsonrpc": "2.0", "id": msg.get("id"), "error": {"code": code, "message": text}}


def wait_ready():
    """Until the server accepts connections (its process still running)."""
    end = time.monotonic() + cfg["ready_timeout"]
    while True:
        dead = gone()
        if dead:
            die_gone(dead)
        try:
            connect(1.0).close()
            return
        except OSError:
            if time.monotonic() > end:
                die("nothing listens on %s after %ds" % (cfg["socket"] or "port %d" % cfg["port"],
                                                        cfg["ready_timeout"]))
            time.sleep(0.05)


def headers_for(msg, era):
    h = {"Content-Type": "application/json", "Accept": ACCEPT}
    if state["session"]:
        h["Mcp-Session-Id"] = state["session"]
    if era == "modern":
        h["MCP-Protocol-Version"] = MODERN
        if "method" in msg:
            h["Mcp-Method"] = msg["method"]
            params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
            name = params.get("name", params.get("uri"))
            if isinstance(name, str) and name.isprintable() and len(name) < 1024:
                h["Mcp-Name"] = name
    elif state["version"]:
        h["MCP-Protocol-Version"] = state["version"]
    if state["openenv"]:
        h["X-OpenEnv-Session-Id"] = state["openenv"]
    return h


def for_era(msg, era):
    """msg as `era` wants it: requests with the modern era's metadata, or the OpenEnv session's id."""
    if "method" not in msg or "id" not in msg or era not in ("modern", "openenv"):
        return msg
    params = dict(msg.get("params") or {})
    if era == "modern":
        params["_meta"] = {**(params.get("_meta") or {}), **META}
    elif state["openenv"]:
        params["session_id"] = state["openenv"]
    return {**msg, "params": params}


def sse_messages(r):
    """The JSON-RPC messages of an SSE stream, as they come."""
    data, size = [], 0
    while True:
        line = r.readline(MAX_MESSAGE)
        if not line:
            break
        line = line.rstrip(b"\r\n")
        if not line:
            if data:
                yield from parsed(b"\n".join(data))
            data, size = [], 0
        elif line.startswith(b"data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(b" ") else value)
            size += len(value)
            if size > MAX_MESSAGE:
                raise ValueError("an event of more than %d bytes" % MAX_MESSAGE)
    if data:
        yield from parsed(b"\n".join(data))


def parsed(body):
    try:
        value = json.loads(body)
    except ValueError:
        return []
    batch = value if isinstance(value, list) else [value]
    return [m for m in batch if isinstance(m, dict)]


def exchange(msg, era=None):
    """POSTs msg as `era` (default: the server's) wants it and yields what comes back: ("status", code, headers),
    then the messages (or ("body", text) for an error that is not JSON)."""
    era = era or state["era"]
    sent = for_era(msg, era)
    c = Connection(None)
    key = json.dumps(msg.get("id")) if "id" in msg and "method" in msg else None
    if key:
        inflight[key] = c
    try:
        c.request("POST", cfg["path"], body=json.dumps(sent).encode(), headers=headers_for(sent, era))
        r = c.getresponse()
        yield ("status", r.status, r.msg)
        kind = (r.getheader("Content-Type") or "").split(";")[0].strip().lower()
        if kind == "text/event-stream":
            for m in sse_messages(r):
                yield m
        else:
            body = r.read(MAX_MESSAGE)
            if r.status < 300 or kind == "application/json":
                yield from parsed(body)
            else:
                yield ("body", body.decode("utf-8", "replace"))
    finally:
        if key:
            inflight.pop(key, None)
        c.close()


def post(msg, again=True):
    """Carries msg to the server; what comes back goes to the scheduler."""
    want = msg.get("id") if "method" in msg else None
    answered, status, body = False, 0, ""
    try:
        for item in exchange(msg):
            if isinstance(item, tuple):
                if item[0] == "status":
                    status = item[1]
                else:
                    body = item[1]
                continue
            if want is not None and "method" not in item and item.get("id") is None and "error" in item:
                item = {**item, "id": want}  # an error the server could not tie to the request (a parse error)
            if want is not None and "method" not in item and item.get("id") == want:
                answered = True
                result = item.get("result")
                if isinstance(result, dict) and result.get("resultType") == "input_required":
                    item = error_for(msg, "the server asked the client for input (%s), which Corral does not "
                                     "provide" % ", ".join(sorted((result.get("inputRequests") or {}).keys())))
                if status >= 300 and "error" not in item:
                    item = error_for(msg, "HTTP %d from POST %s" % (status, cfg["path"]))
            if status == 404 and state["session"] and again:
                break
            emit(item)
            if answered:
                return
    except (OSError, http.client.HTTPException, ValueError) as e:
        dead = gone_after_error()
        if dead:
            die_gone(dead)
        if want is not None and json.dumps(want) not in cancelled:
            emit(error_for(msg, "POST %s: %s" % (cfg["path"], e)))
        return
    if status == 404 and state["session"] and again:  # the session expired: a new one, and this once more
        state["session"] = None
        if initialize(dict(state["init"]), quiet=True):
            emit_initialized()
            return post(msg, again=False)
        emit(error_for(msg, "the server ended the MCP session and refused a new one"))
        return
    if want is not None and not answered:
        emit(error_for(msg, "HTTP %d from POST %s%s" % (status, cfg["path"],
                                                      (": " + body[:300]) if body else " without an answer")))


def emit_initialized():
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    for _ in exchange(note):
        pass


def discover():
    """The server's discovery when it speaks the modern era, else None."""
    probe = {"jsonrpc": "2.0", "id": "corral-discover", "method": "server/discover"}
    try:
        for item in exchange(probe, "modern"):
            if isinstance(item, tuple):
                if item[0] == "status" and item[1] >= 300:
                    break
                continue
            result = item.get("result")
            if item.get("id") == "corral-discover" and isinstance(result, dict) and \
                    MODERN in (result.get("supportedVersions") or []):
                return result
    except (OSError, http.client.HTTPException, ValueError):
        pass
    return None


def initialize(msg, quiet=False):
    """Opens the exchange: modern when the server speaks it, else a legacy session. Whether it worked."""
    state["init"] = msg
    found = discover()
    if found is not None:
        state["era"] = "modern"
        if not quiet:
            emit({"jsonrpc": "2.0", "id": msg.get("id"), "result": {
                "protocolVersion": MODERN, "capabilities": found.get("capabilities") or {},
                "serverInfo": found.get("serverInfo") or {}, "instructions": found.get("instructions") or ""}})
        return True
    state["era"] = "legacy"
    answer = None
    try:
        for item in exchange(msg):
            if isinstance(item, tuple):
                if item[0] == "status":
                    state["session"] = item[2].get("Mcp-Session-Id") or None
                continue
            if "method" not in item and (item.get("id") == msg.get("id") or
                                         (item.get("id") is None and "error" in item)):
                answer = {**item, "id": msg.get("id")}
    except (OSError, http.client.HTTPException, ValueError) as e:
        answer = error_for(msg, "POST %s: %s" % (cfg["path"], e))
    error = answer.get("error") if answer else None
    if isinstance(error, dict) and error.get("code") == -32601:  # no initialize: OpenEnv's JSON-RPC
        state["era"], state["session"] = "openenv", None
        state["openenv"] = openenv_session()
        answer = {"jsonrpc": "2.0", "id": msg.get("id"), "result": {
            "protocolVersion": (msg.get("params") or {}).get("protocolVersion"), "capabilities": {"tools": {}},
            "serverInfo": {"name": "openenv" if state["openenv"] else "json-rpc", "version": ""}}}
    elif answer and isinstance(answer.get("result"), dict):
        state["version"] = answer["result"].get("protocolVersion")
    if not quiet:
        emit(answer or error_for(msg, "no answer to initialize"))
    return bool(answer and "result" in answer)


def openenv_session():
    """A session of an OpenEnv server's /mcp (openenv/session/create), or None when it has none."""
    probe = {"jsonrpc": "2.0", "id": "corral-session", "method": "openenv/session/create", "params": {}}
    try:
        for item in exchange(probe):
            result = item.get("result") if isinstance(item, dict) else None
            if isinstance(result, dict) and isinstance(result.get("session_id"), str):
                return result["session_id"]
    except (OSError, http.client.HTTPException, ValueError):
        pass
    return None


def cancel(msg):
    """The legacy era cancels a request by the notification; the others by closing its connection."""
    if state["era"] != "legacy":
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        key = json.dumps(params.get("requestId"))
        cancelled.add(key)
        c = inflight.get(key)
        if c is not None and c.sock is not None:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return
    post(msg)


def end():
    if state["openenv"]:
        try:
            for _ in exchange({"jsonrpc": "2.0", "id": "corral-close", "method": "openenv/session/close",
                               "params": {"session_id": state["openenv"]}}):
                pass
        except (OSError, http.client.HTTPException, ValueError):
            pass
    if state["session"]:
        try:
            c = Connection(2)
            c.request("DELETE", cfg["path"], headers=headers_for({}, state["era"]))
            c.getresponse().read()
            c.close()
        except (OSError, http.client.HTTPException):
            pass
    if server:
        server.kill()


wait_ready()
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if not isinstance(msg, dict):
        continue
    method = msg.get("method")
    if method == "initialize" and "id" in msg:
        initialize(msg)
    elif method == "notifications/initialized":
        if state["era"] == "legacy":
            post(msg)  # before anything else is sent: some servers refuse requests until then
    elif method == "notifications/cancelled":
        threading.Thread(target=cancel, args=(msg,), daemon=True).start()
    else:
        threading.Thread(target=post, args=(msg,), daemon=True).start()
end()
