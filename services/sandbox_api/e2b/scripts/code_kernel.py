# The code interpreter's kernel (code_interpreter.cc): one per context, run in the sandbox. Each line on stdin is
# a request, {"code", "env_vars"}; the code runs in one globals dict kept between requests, and what it does comes
# back on stdout as the lines @e2b/code-interpreter reads: {"type": "stdout"|"stderr", "text"}, {"type": "result",
# "text", "html", ..., "is_main_result"} (the last expression's value, and display() calls), {"type": "error",
# "name", "value", "traceback"}, {"type": "number_of_executions", "execution_count"}, then {"type":
# "end_of_execution"}. Output is captured, print's and a subprocess's alike; stdin is /dev/null to the code. SIGINT interrupts the code running (a KeyboardInterrupt error) and nothing else.
# Started fork-ready (CORRAL_CARRY_SIGNAL set), it carries itself into a fork's children (fork_now).
import ast
import base64
import io
import json
import os
import select
import signal
import sys
import threading
import traceback

proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
proto_err = os.dup(2)  # the host's stderr, given back at a fork
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
emit_lock = threading.Lock()
# Held while output is taken from the pipes or Python's streams and sent: what reached a file descriptor before a
# print is sent before it. Reentrant: a signal handler may print while the main thread holds it.
output_lock = threading.RLock()
SENTINEL = b"\0corral-end-of-output\0"


def emit(message):
    with emit_lock:
        proto_out.write(json.dumps(message) + "\n")
        proto_out.flush()


class Capture:
    """File descriptor `fd` as a pipe; each whole line of it a `kind` event, the rest at each sentinel. Read only
    under output_lock, by its thread or by a print (Stream), so no bytes are ever read and not yet sent."""

    def __init__(self, fd, kind):
        read, write = os.pipe()
        os.dup2(write, fd)
        os.close(write)
        os.set_blocking(read, False)
        self.read, self.fd, self.kind, self.pending, self.stopping = read, fd, kind, b"", False
        self.drained = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def send(self, data):
        """Each whole line of `data` as an event, then what follows the last newline (if anything)."""
        lines = data.split(b"\n")
        for i, line in enumerate(lines):
            text = line + b"\n" if i < len(lines) - 1 else line
            if text:
                emit({"type": self.kind, "text": text.decode("utf-8", "replace")})

    def pump(self):
        """Sends what the pipe holds now (whole lines; the rest at a sentinel). False at its end. Under output_lock."""
        while True:
            try:
                data = os.read(self.read, 65536)
            except BlockingIOError:
                return True
            if not data:
                return False
            self.pending += data
            while SENTINEL in self.pending:
                before, self.pending = self.pending.split(SENTINEL, 1)
                self.send(before)
                self.drained.set()
            cut = self.pending.rfind(b"\n") + 1  # whole lines now; the rest (maybe a sentinel's start) waits
            if cut > 0:
                self.send(self.pending[:cut])
                self.pending = self.pending[cut:]

    def run(self):
        while True:
            select.select([self.read], [], [])
            with output_lock:
                if self.stopping or not self.pump():
                    return

    def stop(self):
        """Ends its thread (what the pipe holds is sent first) and closes the pipe's read end."""
        with output_lock:
            self.pump()
            self.stopping = True
        os.write(self.fd, b"\n")  # wakes its select
        self.thread.join()
        os.close(self.read)

    def drain(self):
        self.drained.clear()
        os.write(self.fd, SENTINEL)
        self.drained.wait()


class Stream(io.TextIOBase):
    """sys.stdout or sys.stderr: whole lines as `kind` events at once, in the order the code writes them, after
    whatever a subprocess or os.write put on the file descriptors before."""

    def __init__(self, fd, kind):
        self.fd, self.kind, self.pending = fd, kind, ""

    @property
    def encoding(self):
        return "utf-8"

    def writable(self):
        return True

    def fileno(self):
        return self.fd

    def write(self, text):
        with output_lock:
            for capture in captures:
                capture.pump()
            self.pending += text
            cut = self.pending.rfind("\n") + 1
            if cut > 0:
                emit({"type": self.kind, "text": self.pending[:cut]})
                self.pending = self.pending[cut:]
        return len(text)

    def flush(self):
        with output_lock:
            for capture in captures:
                capture.pump()
            if self.pending:
                emit({"type": self.kind, "text": self.pending})
                self.pending = ""


# Python's own output through sys.stdout and sys.stderr; what reaches the file descriptors (a subprocess,
# os.write) through the pipes; the two in the order they were written.
captures = [Capture(1, "stdout"), Capture(2, "stderr")]
sys.stdout, sys.stderr = Stream(1, "stdout"), Stream(2, "stderr")

MIME = {
    "_repr_html_": "html",
    "_repr_markdown_": "markdown",
    "_repr_svg_": "svg",
    "_repr_png_": "png",
    "_repr_jpeg_": "jpeg",
    "_repr_latex_": "latex",
    "_repr_json_": "json",
    "_repr_javascript_": "javascript",
}


def bundle(value, main):
    """A value as a result: its repr as text, and each rich form its object offers (IPython's _repr_*_)."""
    out = {"type": "result", "text": repr(value), "is_main_result": main}
    for method, key in MIME.items():
        form = getattr(value, method, None)
        if not callable(form):
            continue
        try:
            data = form()
        except Exception:
            continue
        if isinstance(data, bytes):
            data = base64.b64encode(data).decode("ascii")
        if data is not None:
            out[key] = data
    return out


def display(*values):
    for value in values:
        emit(bundle(value, False))


running = False


def on_interrupt(signum, frame):
    if running:
        raise KeyboardInterrupt


signal.signal(signal.SIGINT, on_interrupt)


fork_pending = None  # a fork's count of copies, asked for by the host
idle = False  # blocked reading the next request: where a fork may run at once


class ForkNow(Exception):
    pass


def on_fork(signum, frame):
    """The host asks for copies (the kernel was started fork-ready): made at once when the kernel waits for a
    request, else once the run under way is over (no lock is held there)."""
    global fork_pending
    try:
        request = os.read(corral_carry.CONTROL_FD, 64).decode()
    except BlockingIOError:
        return
    for line in request.splitlines():
        word, _, count = line.partition(" ")
        if word == "fork":
            fork_pending = int(count)
    if idle and fork_pending is not None:
        raise ForkNow()


def fork_now():
    """Puts the streams back where the host gave them and ends the capture threads (a fork copies one thread),
    has corral_carry carry a copy into each child, then sets the captures up again over the streams each has."""
    global proto_in, proto_out, proto_err, captures, fork_pending
    count, fork_pending = fork_pending, None
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    for capture in captures:
        capture.stop()
    proto_out.flush()
    os.dup2(proto_in.fileno(), 0)
    os.dup2(proto_out.fileno(), 1)
    os.dup2(proto_err, 2)
    for f in (proto_in, proto_out):
        f.close()
    os.close(proto_err)
    corral_carry.fork(count)  # closes every other descriptor; a copy's streams are its child's
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    proto_err = os.dup(2)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    captures = [Capture(1, "stdout"), Capture(2, "stderr")]


if os.environ.get("CORRAL_CARRY_SIGNAL"):
    import corral_carry

    os.set_blocking(corral_carry.CONTROL_FD, False)
    signal.signal(int(os.environ["CORRAL_CARRY_SIGNAL"]), on_fork)
names = {"__name__": "__main__", "__builtins__": __builtins__, "display": display}
count = 0
while True:
    if fork_pending is not None:
        fork_now()
    try:
        idle = True
        line = proto_in.readline()
    except ForkNow:
        continue
    finally:
        idle = False
    if not line:
        break
    try:
        request = json.loads(line)
        code, env = request.get("code", ""), request.get("env_vars") or {}
    except (ValueError, AttributeError):
        continue
    count += 1
    saved = {key: os.environ.get(key) for key in env}
    result = error = None
    try:
        os.environ.update({str(k): str(v) for k, v in env.items()})
        tree = ast.parse(code, "<cell>", "exec")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        running = True
        exec(compile(tree, "<cell>", "exec"), names)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), names)
            running = False
            if value is not None:
                result = bundle(value, True)
    except BaseException as e:  # the code's, KeyboardInterrupt and SystemExit included: the kernel lives on
        running = False
        frames = e.__traceback__.tb_next if e.__traceback__ is not None else None
        error = {
            "type": "error",
            "name": type(e).__name__,
            "value": str(e),
            "traceback": "".join(traceback.format_exception(type(e), e, frames)),
        }
    finally:
        running = False
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    for capture in captures:
        capture.drain()
    if result is not None:
        emit(result)
    if error is not None:
        emit(error)
    emit({"type": "number_of_executions", "execution_count": count})
    emit({"type": "end_of_execution"})
# Without finalizing: a capture thread frozen by it while holding output_lock would hang the final flush of
# sys.stdout; everything the kernel says has been sent.
proto_out.flush()
os._exit(0)
