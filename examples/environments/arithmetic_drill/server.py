#!/usr/bin/env python3
"""An OpenEnv-shaped environment server: an arithmetic drill, standard library only.

    POST /reset {"seed": int, "episode_id": str, "questions": int}   -> {"observation", "reward": null, "done": false}
    POST /step  {"action": {"message": "The answer is 42."}}          -> {"observation", "reward": 0|1, "done": bool}
    GET  /state                                                       -> {"episode_id", "step_count", ...}
    GET  /health                                                      -> {"status": "healthy"}

Each question is "What is A + B?" with A and B drawn from the seed, so a reset with the same seed asks the same
questions; a step's reward is 1.0 when the last number of the message is the sum. The optimal play answers every
question right: a reward of `questions` (3 by default) summed over the steps.

Run it with `--port N` (TCP on 127.0.0.1) or `--unix-socket PATH`. For Corral's failure tests, /reset also takes
a "fault" object: {"crash_at_step": k} (the server kills itself with SIGKILL at step k), {"hang_at_step": k}
(step k never answers) or {"bad_at_step": k, "field": "done"|"reward"|"observation"} (step k answers with that
field malformed or missing).
"""
import argparse
import http.server
import json
import os
import random
import re
import signal
import socketserver
import time


class Drill:
    def __init__(self):
        self.reset({})

    def reset(self, body):
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
        reward = 1.0 if numbers and int(numbers[-1]) == a + b else 0.0
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
        self.reply(404, {"detail": "not found"})

    def do_POST(self):
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        except ValueError:
            return self.reply(422, {"detail": "the body is not JSON"})
        if self.path == "/reset":
            return self.reply(200, self.drill.reset(body))
        if self.path == "/step":
            return self.reply(200, self.drill.step(body.get("action")))
        self.reply(404, {"detail": "not found"})

    def log_message(self, *args):
        pass


class UnixServer(socketserver.UnixStreamServer):
    def get_request(self):
        request, _ = super().get_request()
        return request, ("local", 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int)
    parser.add_argument("--unix-socket")
    args = parser.parse_args()
    if args.unix_socket:
        if os.path.exists(args.unix_socket):
            os.unlink(args.unix_socket)
        server = UnixServer(args.unix_socket, Handler)
    else:
        server = http.server.HTTPServer(("127.0.0.1", args.port or 8000), Handler)
    server.serve_forever()


if __name__ == "__main__":
    main()
