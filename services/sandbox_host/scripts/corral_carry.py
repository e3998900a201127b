"""How a fork-ready Python process is carried into a fork's children.

A process the sandbox host started fork-ready calls ready() once. When its sandbox is forked, the host writes
"fork N" on the process's control pipe and signals it; the process, between two bytecodes, forks N copies and
carries each into a child: the copy becomes the child's uid in the child's user namespace, joins the child's
network namespace and a mount namespace with the child's files where the parent's were, gets the child's
standard streams, and drops every capability; then it goes on from where the parent was. The parent itself moves to its own next
generation (the files it sees now are frozen into the layer its children share), and stays fork-ready. The host
checks each process before it goes on; one that cheats is killed.

Only the standard library: this file runs inside sandboxes.
"""

import ctypes
import os
import platform
import signal

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
CONTROL_FD = 3
PLAN_FD = 4
_NUMBERS = {"x86_64": {"capset": 126}, "aarch64": {"capset": 91}}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _ok(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _syscall(name, *args):
    return _libc.syscall(ctypes.c_long(_NUMBERS[platform.machine()][name]), *args)


def _read_plan():
    data = b""
    while True:
        chunk = os.read(PLAN_FD, 4096)
        if not chunk:
            break
        data += chunk
    steps = []
    for line in data.decode().split("\n"):
        if line == "end":
            return steps
        word, _, rest = line.partition(" ")
        steps.append((word, rest))
    raise OSError(0, "the carry plan ended early")


def _drop_capabilities():
    _ok(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing ambient capabilities")
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: none, twice
    _ok(_syscall("capset", header, data), "dropping capabilities")


def carry(own=False):
    """The steps of a carry: a copy right after its fork (True once carried; False when nothing was planned
    for it: it should exit), or the parent itself (own) after forking its copies."""
    os.closerange(PLAN_FD if own else CONTROL_FD, os.sysconf("SC_OPEN_MAX"))
    if not own:
        os.setsid()  # out of its parent's process group and session: what ends the parent must not end it
    if _libc.unshare(0) != 0:  # announces it; returns once the host installed the plan and its descriptors
        return False
    steps = _read_plan()
    os.close(PLAN_FD)
    plan = dict(steps)
    uid, gid = (int(x) for x in plan["ids"].split())
    fds = []
    if "userns" in plan:  # a copy: it becomes its child's ids there (the parent's own keeps its ids)
        fds.append(int(plan["userns"]))
        _ok(_libc.setns(int(plan["userns"]), CLONE_NEWUSER), "joining its user namespace")
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    if "netns" in plan:
        fds.append(int(plan["netns"]))
        _ok(_libc.setns(int(plan["netns"]), CLONE_NEWNET), "joining its network namespace")
    if "mntns" in plan:  # its files: the host mounted them where its old ones were
        fds.append(int(plan["mntns"]))
        _ok(_libc.setns(int(plan["mntns"]), CLONE_NEWNS), "joining its mount namespace")
    for fd in fds:
        os.close(fd)
    if "cwd" in plan:
        os.chdir(plan["cwd"])
    if "ready" not in plan:
        _drop_capabilities()
    _ok(_libc.unshare(0), "finishing the carry")  # the host checks it before this returns
    return True


def fork(count):
    """Forks `count` copies, each carried into its child, then carries this process to its next generation.
    Returns True in a copy (which goes on from here), False in the parent."""
    pid = os.fork()
    if pid == 0:
        # The copies' own parent: it forks them and ends, so that the host, not this process, adopts them.
        for _ in range(count):
            if os.fork() == 0:
                if carry():
                    return True
                os._exit(0)
        os._exit(0)
    os.waitpid(pid, 0)
    # Refused when the fork was given up (its copies are gone then): this process goes on as it was.
    carry(own=True)
    return False


def _on_signal(signum, frame):
    try:
        request = os.read(CONTROL_FD, 64).decode()
    except BlockingIOError:
        return
    for line in request.splitlines():
        word, _, count = line.partition(" ")
        if word == "fork" and fork(int(count)):
            return  # a copy: it goes on where its parent was


def ready():
    """Makes this process forkable with its memory: the host started it fork-ready (CORRAL_CARRY_SIGNAL set)."""
    number = os.environ.get("CORRAL_CARRY_SIGNAL")
    if number is None:
        return False
    os.set_blocking(CONTROL_FD, False)
    signal.signal(int(number), _on_signal)
    return True
