#!/usr/bin/env python3
"""An OpenEnv-shaped environment server: an arithmetic drill, standard library only.

    POST /reset {"seed": int, "episode_id": str, "questions": int}   -> {"observation", "reward": null, "done": false}
    POST /step  {"action": {"message": "The answer is 42."}}          -> {"observation", "reward": 0|1, "done": bool}
    GET  /state                                                       -> {"episode_id", "step_count", ...}
    GET  /health                                                      -> {"status": "healthy"}

Each question is "What is A + B?" with A and B drawn from the seed, so a reset with the same seed asks the same
questions; a step's reward is 1.0 when the last number of the message is the sum. The optimal play answers every
question right: a reward of `questions` (3 by default) summed over the steps.

Run it with `--port N` (TCP on 127.0.0.1) or `--unix-socket PATH`. How it keeps an episode, `--sessions`:
  http     (the default) one drill for the server's life: /reset then /step, as above
  openenv  as a stock OpenEnv server: HTTP /reset and /step each act on a fresh drill (so a /step after a /reset
           steps a drill that was never reset: reward 0), and an episode lives in a WebSocket session on /ws, one
           drill per connection: text frames {"type": "reset", "data": {...}}, {"type": "step", "data": <action>},
           {"type": "state"}, {"type": "close"}, answered {"type": "observation", "data": {"observation", "reward",
           "done"}}, {"type": "state", "data": {...}} or {"type": "error", "data": {"message", "code"}}
  cookie   one drill per session cookie: /reset sets `drill_session`, later calls send it back
For Corral's failure tests, /reset also takes a "fault" object: {"crash_at_step": k} (the server kills itself
with SIGKILL at step k), {"hang_at_step": k} (step k never answers), {"bad_at_step": k, "field":
"done"|"reward"|"observation"} (step k answers with that field malformed or missing), and in a /ws session
{"error_at_step": k} (step k answers an error frame) or {"drop_at_step": k} (the server closes the connection).
"""
import argparse
import base64
import hashlib
import http.server
import json
import os
import random
import re
import signal
import socketserver
import time
import uuid

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Drill:
    def __init__(self):
        self.reset({})
        self.fresh = True  # never reset by a caller: its steps earn nothing (an OpenEnv HTTP /step)

    def reset(self, body):
        self.fresh = False
        self.seed = body.get("seed")
        self.episode_id = body.get("episode_id", "")
        self.total = int(body.get("questions", 3))
        self.fault = body.get("fault") or {}
        rng = random.Random(self.seed)
        self.questions = [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(self.total)]
        self.step_count = 0
        return self.answer(None, False)

    def observation(self):
        if self.step_count >= self.total:
            return {"prompt": "The drill is over.", "question": self.step_count}
        a, b = self.questions[self.step_count]
        return {"prompt": "Question %d of %d: What is %d + %d?" % (self.step_count + 1, self.total, a, b),
                "question": self.step_count + 1}

    def answer(self, reward, done):
        return {"observation": self.observation(), "reward": reward, "done": done}

    def step(self, action):
        k = self.step_count + 1
        if self.fault.get("crash_at_step") == k:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.fault.get("hang_at_step") == k:
            time.sleep(3600)
        numbers = re.findall(r"-?\d+", str((action or {}).get("message", "")))
        a, b = self.questions[min(self.step_count, self.total - 1)]
        reward = 1.0 if numbers and int(numbers[-1]) == a + b and not self.fresh else 0.0
        self.step_count += 1
        out = self.answer(reward, self.step_count >= self.total)
        if self.fault.get("bad_at_step") == k:
            field = self.fault.get("field", "done")
            if field == "observation":
                del out["observation"]
            else:
                out[field] = "yes"
        return out

    def state(self):
        return {"episode_id": self.episode_id, "step_count": self.step_count, "questions": self.total}


class Handler(http.server.BaseHTTPRequestHandler):
    drill = Drill()
    sessions = "http"
    by_cookie = {}

    def reply(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            return self.reply(200, {"status": "healthy"})
        if self.path == "/state":
            return self.reply(200, self.drill.state())
        if self.path == "/ws" and self.sessions == "openenv" and "websocket" in self.headers.get("Upgrade", "").lower():
            return self.websocket()
        self.reply(404, {"detail": "not found"})

    def cookie_drill(self):
        for part in self.headers.get("Cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == "drill_session" and value in self.by_cookie:
                return value, self.by_cookie[value]
        return None, None

    def do_POST(self):
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        except ValueError:
            return self.reply(422, {"detail": "the body is not JSON"})
        if self.path not in ("/reset", "/step"):
            return self.reply(404, {"detail": "not found"})
        if self.sessions == "openenv":  # simulation mode: a fresh drill per call
            drill = Drill()
        elif self.sessions == "cookie":
            session, drill = self.cookie_drill()
            if self.path == "/reset" and drill is None:
                session, drill = uuid.uuid4().hex, Drill()
                self.by_cookie[session] = drill
                self.cookie = session
            elif drill is None:
                return self.reply(400, {"detail": "no session: reset first"})
        else:
            drill = self.drill
        self.reply(200, drill.reset(body) if self.path == "/reset" else drill.step(body.get("action")))

    def end_headers(self):
        if getattr(self, "cookie", None):
            self.send_header("Set-Cookie", "drill_session=%s; Path=/; HttpOnly" % self.cookie)
            self.cookie = None
        super().end_headers()

    # An OpenEnv session: one drill per connection, text frames both ways.
    def websocket(self):
        self.protocol_version = "HTTP/1.1"
        self.close_connection = True  # once the session ends
        accept = base64.b64encode(hashlib.sha1((self.headers["Sec-WebSocket-Key"] + WS_GUID).encode()).digest())
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept.decode())
        super().end_headers()
        self.wfile.flush()
        drill = Drill()
        while True:
            message = self.read_frame()
            if message is None:
                return
            try:
                msg = json.loads(message)
            except ValueError:
                self.send_frame({"type": "error", "data": {"message": "the frame is not JSON", "code": "INVALID_JSON"}})
                continue
            kind = msg.get("type")
            if kind == "close":
                return
            if kind == "state":
                self.send_frame({"type": "state", "data": drill.state()})
            elif kind == "reset":
                self.send_frame({"type": "observation", "data": drill.reset(msg.get("data") or {})})
            elif kind == "step":
                k = drill.step_count + 1
                if drill.fault.get("error_at_step") == k:
                    self.send_frame({"type": "error", "data": {"message": "the drill broke at step %d" % k,
                                                               "code": "EXECUTION_ERROR"}})
                elif drill.fault.get("drop_at_step") == k:
                    return
                else:
                    self.send_frame({"type": "observation", "data": drill.step(msg.get("data"))})
            else:
                unknown = {"message": "unknown type %r" % kind, "code": "UNKNOWN_TYPE"}
                self.send_frame({"type": "error", "data": unknown})

    def read_frame(self):
        """The next text message from the client (masked frames), or None when it closes."""
        parts = []
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return None
            opcode, n = head[0] & 0x0F, head[1] & 0x7F
            if n >= 126:
                n = int.from_bytes(self.rfile.read(2 if n == 126 else 8), "big")
            mask = self.rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(n)))
            if opcode == 0x8:
                return None
            if opcode == 0x9:
                self.send_raw(0xA, payload)
                continue
            if opcode in (0x0, 0x1, 0x2):
                parts.append(payload)
                if head[0] & 0x80:
                    return b"".join(parts).decode()

    def send_raw(self, opcode, data):
        n = len(data)
        size = bytes([n]) if n < 126 else bytes([126]) + n.to_bytes(2, "big") if n < 65536 else \
            bytes([127]) + n.to_bytes(8, "big")
        self.wfile.write(bytes([0x80 | opcode]) + size + data)
        self.wfile.flush()

    def send_frame(self, obj):
        self.send_raw(0x1, json.dumps(obj).encode())

    def log_message(self, *args):
        pass


class UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        request, _ = super().get_request()
        return request, ("local", 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int)
    parser.add_argument("--unix-socket")
    parser.add_argument("--sessions", choices=["http", "openenv", "cookie"], default="http")
    args = parser.parse_args()
    Handler.sessions = args.sessions
    if args.unix_socket:
        if os.path.exists(args.unix_socket):
            os.unlink(args.unix_socket)
        server = UnixServer(args.unix_socket, Handler)
    else:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port or 8000), Handler)
    server.serve_forever()


if __name__ == "__main__":
    main()
