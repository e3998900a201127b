// A fork-ready Python REPL of sorts for the live fork tests: one command per line, one line per answer. It
// keeps variables (set K V / get K), reads and writes files, says who it is (ids, pid), and tries what a copy
// should not manage (signal PID, peek PID: open its memory), and runs shell commands (sh CMD: "exit N OUT"); a
// refused call answers "refused <errno>".
#pragma once

namespace corral::testing {

inline constexpr char kCarryRepl[] = R"(
import os, subprocess, sys
import corral_carry
corral_carry.ready()
state, buf = {}, b""
def say(*words): os.write(1, (" ".join(str(w) for w in words) + "\n").encode())
while True:
    while b"\n" not in buf:
        chunk = os.read(0, 4096)
        if not chunk: sys.exit(0)
        buf += chunk
    line, _, buf = buf.partition(b"\n")
    cmd, _, arg = line.decode().partition(" ")
    try:
        if cmd == "set":
            key, _, value = arg.partition(" ")
            state[key] = value
            say("ok")
        elif cmd == "get": say(state.get(arg, "<none>"))
        elif cmd == "write":
            path, _, text = arg.partition(" ")
            with open(path, "w") as f: f.write(text)
            say("ok")
        elif cmd == "read":
            with open(arg) as f: say(f.read())
        elif cmd == "ids": say(os.getuid(), os.getgid())
        elif cmd == "sh":
            done = subprocess.run(["sh", "-c", arg], capture_output=True, timeout=20)
            say("exit", done.returncode, done.stdout.decode().strip().replace("\n", " "))
        elif cmd == "stat":
            st = os.stat(arg)
            say(st.st_uid, oct(st.st_mode))
        elif cmd == "cwd": say(os.getcwd())
        elif cmd == "pid": say(os.getpid())
        elif cmd == "signal":
            os.kill(int(arg), 0)
            say("ok")
        elif cmd == "peek":
            with open(f"/proc/{arg}/mem", "rb"): say("ok")
    except OSError as e:
        say("refused", e.errno)
)";

}  // namespace corral::testing
