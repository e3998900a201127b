"""How a fork-ready Python process is carried into a fork's child sandbox.

A fork-ready process (started by corral-sandbox-host under its fork gate) forks itself when the host asks; each
copy then calls carry(), which does the steps the host planned for it, through the gate: it becomes the child's
uid in the child's user namespace, joins the child's network namespace, mounts the child's files where the
parent's were, and drops every capability. The host checks the result before carry() returns; a copy that
cheats is killed. carry() returns False when the host planned nothing for this process (it should exit then).

Only the standard library: this file runs inside sandboxes.
"""

import ctypes
import os
import platform

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MOVE_MOUNT_F_EMPTY_PATH = 0x00000004
AT_FDCWD = -100
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PLAN_FD = 3
_NUMBERS = {
    "x86_64": {"move_mount": 429, "capset": 126},
    "aarch64": {"move_mount": 429, "capset": 91},
}

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


def carry():
    """Called in a copy right after os.fork(). True once carried; False when no carry was planned for it."""
    os.closerange(PLAN_FD, os.sysconf("SC_OPEN_MAX"))
    if _libc.unshare(0) != 0:  # announces it: the gate installs the plan and its descriptors
        return False
    steps = _read_plan()
    os.close(PLAN_FD)
    plan, mounts = {}, []
    for word, rest in steps:
        if word == "mount":
            fd, _, path = rest.partition(" ")
            mounts.append((int(fd), path))
        else:
            plan[word] = rest
    uid, gid = (int(x) for x in plan["ids"].split())
    fds = [fd for fd, _ in mounts]
    if "userns" in plan:
        fds.append(int(plan["userns"]))
        _ok(_libc.setns(int(plan["userns"]), CLONE_NEWUSER), "joining its user namespace")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if "netns" in plan:
        fds.append(int(plan["netns"]))
        _ok(_libc.setns(int(plan["netns"]), CLONE_NEWNET), "joining its network namespace")
    if mounts:
        _ok(_libc.unshare(CLONE_NEWNS), "making its mount namespace")
        for fd, path in mounts:
            moved = _syscall("move_mount", fd, b"", AT_FDCWD, path.encode(), MOVE_MOUNT_F_EMPTY_PATH)
            _ok(moved, f"mounting {path}")
    for fd in fds:
        os.close(fd)
    if "cwd" in plan:
        os.chdir(plan["cwd"])
    _drop_capabilities()
    _ok(_libc.unshare(0), "finishing the carry")  # the host checks it before this returns
    return True
