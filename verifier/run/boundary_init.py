"""PID 1 of a runner's namespaces: apply the boundary, report it, start the runner, stay PID 1.

`python -m cudice.verifier.run.boundary_init SPEC_JSON -- ARGV...` is started by `unshare`
(run/boundary.py) and runs trusted code only. In order: 1. open handles on the paths the runner must
read; 2. replace directories an unprivileged uid cannot traverse, the home directories and the
temporary directories with private tmpfs mounts, and bind the needed paths back read-only;
3. bind site-packages, cudice and the build cache read-only; 4. as root: supplementary groups
of the GPU device nodes, `RLIMIT_NPROC`, then `setuid` to the spec's unprivileged uid (all
capabilities go with it); in a user namespace: drop every capability; 5. `no_new_privs`;
6. write one JSON line to `report_fd` (what was applied, what was not) and close it, so
nothing the candidate runs later can add to the report; 7. fork: the child execs ARGV (the
runner, PID 2), and this process stays PID 1 until it ends.

Why PID 1 stays trusted: when a namespace's PID 1 dies, the kernel kills every process in it,
and this PID 1 dies with `unshare` (its parent-death signal, which `unshare --kill-child` sets
and which is set again after the uid change of 4, since a uid change clears it), and `unshare`
dies with the judge. Were the runner PID 1 itself, candidate code could clear that signal
(`prctl`) and `setsid` out of the judge's process group, and outlive the judge on the GPU.
The candidate cannot take this process over or keep it from dying: it is not dumpable (no
`ptrace` by the same uid), holds no descriptor but the standard ones, and a signal sent to a
namespace's PID 1 from inside it is dropped unless PID 1 handles it (none is handled). The
candidate can still end it (lowering its resource limits with `prlimit`, as the same uid), which
only ends the namespace, the candidate included. PID 1 reaps whatever is re-parented to
it, and exits with the runner's status (128 + N for a runner killed by signal N).

Not covered: anything outside this process's namespaces (see run/boundary.py).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import stat
import sys
from pathlib import Path
from typing import Any, NoReturn

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 1, 4, 38, 24
_libc = ctypes.CDLL(None, use_errno=True)


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(s: str | None) -> bytes | None:
        return s.encode() if s is not None else None

    if _libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {src} on {target}: {os.strerror(err)}")


def _bind_read_only(src: str, target: str) -> None:
    _mount(src, target, None, MS_BIND | MS_REC)
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _hidden_ancestor(path: str) -> str | None:
    """The topmost directory on `path` that other users cannot traverse (no o+x), if any."""
    cur = Path("/")
    for part in Path(path).parts[1:]:
        cur = cur / part
        try:
            st = os.stat(cur)
        except OSError:
            return None
        if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IXOTH:
            return str(cur)
    return None


def _device_groups(closed: set[int]) -> list[int]:
    """The runner's groups, from the groups of the devices it could not open as `other` (`closed`):
    never group 0, since a runner in the root group would pass every root-owned file's group bits
    (and could not read a 0701 build cache, whose group bits are closed)."""
    return sorted(closed - {0})


def _closed_device_gids(dev: str) -> set[int]:
    """The groups of the NVIDIA character devices that `other` cannot read and write (character
    devices only: `/dev/nvidia-caps` is a directory)."""
    out = set()
    for n in os.listdir(dev):
        if not n.startswith("nvidia"):
            continue
        try:
            st = os.stat(os.path.join(dev, n))
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode) and st.st_mode & 0o006 != 0o006:
            out.add(st.st_gid)
    return out


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def apply(spec: dict[str, Any]) -> dict[str, Any]:
    """Steps 1–5 of the module docstring; returns the report (`applied`, `missing`)."""
    applied: list[str] = []
    missing: list[dict[str, str]] = []
    as_root = os.getuid() == 0 and _outside_uid() == 0
    uid = int(spec["uid"]) if as_root else os.getuid()
    # 1. handles on the paths to keep, taken before tmpfs mounts hide them
    targets = set(spec["private_dirs"]) | set(spec["home_dirs"])
    if as_root:
        targets |= {a for a in (_hidden_ancestor(p) for p in spec["read_paths"]) if a is not None}
    targets = {t for t in targets if os.path.isdir(t)}
    targets = {t for t in targets if not any(o != t and _under(t, o) for o in targets)}  # outermost only
    keep = {p: os.open(p, os.O_PATH) for p in spec["read_paths"] if any(_under(p, t) for t in targets)}
    # 2. private tmpfs mounts; the kept paths come back read-only inside them
    for d in sorted(targets):
        try:
            _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=4g")
            applied.append(f"tmpfs:{d}")
        except OSError as exc:
            missing.append({"code": "sandbox.private_dir", "message": f"{d} stays shared: {exc}"})
    for p, fd in sorted(keep.items()):
        try:
            Path(p).mkdir(parents=True, exist_ok=True)
            _bind_read_only(f"/proc/self/fd/{fd}", p)
            applied.append(f"ro-kept:{p}")
        except OSError as exc:
            missing.append(
                {"code": "sandbox.unreadable", "message": f"{p} could not be kept readable: {exc}"}
            )
        finally:
            os.close(fd)
    # 3. read-only binds of site-packages, cudice and the build cache
    for p in spec["read_only_paths"]:
        if p in keep:
            continue
        try:
            _bind_read_only(p, p)
            applied.append(f"ro:{p}")
        except OSError as exc:
            missing.append({"code": "sandbox.read_only", "message": f"{p} stays writable: {exc}"})
    # 4. identity and limits
    if as_root:
        closed = _closed_device_gids("/dev")
        groups = _device_groups(closed)
        if 0 in closed:
            missing.append(
                {
                    "code": "sandbox.gpu_group_root",
                    "message": "an NVIDIA device here opens only to group root, which the runner is "
                    "never given, so the kernel cannot reach the GPU; give the devices their own group "
                    "(or mode 0666, as the driver's default udev rules do)",
                }
            )
        nproc = int(spec["max_processes"])
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        os.setgroups(groups)
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        applied += [f"uid:{uid}", f"nproc:{nproc}"]
    else:
        for cap in range(64):
            _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
        _drop_capabilities()
        missing.append(
            {
                "code": "sandbox.no_process_limit",
                "message": "RLIMIT_NPROC not set: in a user namespace "
                "it would count every process of this user; the PID namespace still ends them all",
            }
        )
    # The uid change above cleared the parent-death signal `unshare --kill-child` gave this process
    # (prctl(2): any change of the effective or file-system uid or gid does): arm it again, or a
    # runner would outlive a judge killed by SIGKILL. `main` then writes the report: a judge that
    # died before this point closed the report pipe, and the write fails instead of the exec.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # 5. no privilege regained through exec (setuid binaries, file capabilities)
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0:
        applied.append("no_new_privs")
    return {"op": "boundary", "pid": os.getpid(), "uid": os.getuid(), "applied": applied, "missing": missing}


def _outside_uid() -> int:
    """This uid as the initial user namespace sees it (0 for real root)."""
    try:
        first = Path("/proc/self/uid_map").read_text().split()
        return int(first[1]) if first and int(first[0]) == 0 else -1
    except (OSError, ValueError, IndexError):
        return -1


def _drop_capabilities() -> None:
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        ]

    header, data = Header(0x20080522, 0), (Data * 2)()
    _libc.capset(ctypes.byref(header), data)


def main(argv: list[str]) -> None:
    spec, argv = json.loads(argv[0]), argv[argv.index("--") + 1 :]
    report = apply(spec)
    fd = int(spec["report_fd"])
    if fd >= 0:
        try:
            os.write(fd, (json.dumps(report) + "\n").encode())
        except BrokenPipeError:
            sys.exit("boundary_init: the judge is gone (its report pipe is closed); not starting the runner")
        os.close(fd)
    # before the fork, so the runner never meets a PID 1 it could trace or signal (its own exec
    # makes the runner dumpable again and gives it default signal handlers)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # the uid change did too; in a user namespace it did not
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Python's own handler would let the runner end PID 1
    runner = os.fork()
    if runner == 0:
        try:
            os.execve(argv[0], argv, os.environ)
        except OSError as exc:
            os.write(2, f"boundary_init: cannot start the runner {argv[0]!r}: {exc}\n".encode())
        os._exit(127)
    stay_init(runner)


def stay_init(runner: int) -> NoReturn:
    """PID 1's life after the runner started: holding nothing of the runner's, reaping, then the
    runner's exit status."""
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])  # the runner's socket stays the runner's
    while True:
        pid, status = os.wait()  # the runner, or a process re-parented to PID 1
        if pid == runner:
            code = os.waitstatus_to_exitcode(status)
            os._exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main(sys.argv[1:])
