"""The OS boundary (run/boundary.py + run/boundary_init.py) around a runner, probed from inside on the CPU.

A small probe script runs inside the boundary exactly as a runner would and reports what it
could do; the assertions are on the host: site-packages, the cudice sources, the build cache
and the real home stay unwritten, /tmp is private, the parent's processes are invisible, no
descriptor but the ones handed over is open, a `setsid` child dies with the runner, the network
is unreachable, and the uid is an unprivileged one with a process limit.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from cudice.verifier.run import boundary

pytestmark = pytest.mark.skipif(
    boundary.probe() is not None, reason=f"no OS boundary here: {boundary.probe()}"
)

PROBE = r"""
import json, os, resource, socket, sys, time
mark, targets, parent, keep = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
out = {"uid": os.getuid(), "pid": os.getpid(), "nproc": resource.getrlimit(resource.RLIMIT_NPROC)[0],
       "wrote": [], "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
for d in targets:
    try:
        with open(os.path.join(d, mark), "w") as f:
            f.write("x")
        out["wrote"].append(d)
    except OSError:
        pass
out["parent_visible"] = os.path.exists(f"/proc/{parent}")
out["tmp_listing"] = sorted(os.listdir("/tmp"))
out["open_fds"] = sorted(int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) > 2)
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    out["network"] = True
except OSError:
    out["network"] = False
if os.fork() == 0:  # a setsid grandchild that would outlive a process-group kill
    os.setsid()
    os.environ["CUDICE_BOUNDARY_SURVIVOR"] = mark
    os.execvp("sleep", ["sleep", "600"])
os.write(keep, json.dumps(out).encode())
os.close(keep)
time.sleep(0.5)
"""


def _survivors(mark: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if f"CUDICE_BOUNDARY_SURVIVOR={mark}".encode() in Path(f"/proc/{pid}/environ").read_bytes():
                    found.append(int(pid))
            except OSError:
                continue
    return found


def test_the_boundary_holds(tmp_path: Path) -> None:
    mark = f"cudice_boundary_{uuid.uuid4().hex}"
    cache = tmp_path / "cache"
    cache.mkdir()
    import cudice.verifier as pkg

    cudice_src = Path(pkg.__path__[0]).resolve()
    site = sysconfig.get_paths()["purelib"]
    targets = [site, str(cudice_src), str(cache), str(Path.home()), "/tmp", "/var/tmp"]
    host_tmp = Path("/tmp") / f"{mark}.host"
    host_tmp.write_text("visible only outside")
    mine, theirs = socket.socketpair()  # an extra descriptor the runner must not get
    r, w = os.pipe()
    report_r, report_w = os.pipe()
    spec = boundary.default_spec(cache, uid=boundary.UID_BASE + 99, report_fd=report_w)
    argv, missing = boundary.wrap(
        [sys.executable, "-c", PROBE, mark, json.dumps(targets), str(os.getpid()), str(w)], spec
    )
    try:
        proc = subprocess.Popen(
            argv, pass_fds=(w, report_w), env={"PATH": os.environ["PATH"], "HOME": "/tmp"}
        )
        os.close(w)
        os.close(report_w)
        report = json.loads(os.fdopen(report_r).readline())
        with os.fdopen(r) as f:
            out = json.loads(f.read())
        proc.wait(timeout=120)
        deadline = time.monotonic() + 30
        while _survivors(mark) and time.monotonic() < deadline:
            time.sleep(0.05)
        survivors = _survivors(mark)
        fds = (mine.fileno(), theirs.fileno())
    finally:
        host_tmp.unlink()
        mine.close()
        theirs.close()
    leaked = [t for t in targets if (Path(t) / mark).exists()]
    for t in leaked:
        (Path(t) / mark).unlink()
    assert leaked == [], "the runner wrote outside its private directories"
    assert survivors == [], "a setsid child outlived the runner's namespace"
    assert report["missing"] == [] and report["pid"] == 1, report
    # own PID namespace: PID 1 is the trusted boundary_init, the runner its child
    assert out["pid"] == 2 and not out["parent_visible"] and max(out["pids"]) < 100, out["pids"]
    assert f"{mark}.host" not in out["tmp_listing"]  # private /tmp
    # nothing but what was handed over: the report pipe is closed before the probe runs
    assert w in out["open_fds"] and not {*fds, report_w} & set(out["open_fds"])
    assert out["network"] is False
    if os.geteuid() == 0:
        assert missing == []
        assert out["uid"] == boundary.UID_BASE + 99 and out["nproc"] == spec.max_processes
        assert set(out["wrote"]) <= {"/tmp", "/var/tmp", str(Path.home())}  # only private tmpfs mounts
    else:
        assert [m.code for m in missing] == ["sandbox.same_user"]


def test_a_missing_unshare_is_reported_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    boundary.probe.cache_clear()
    monkeypatch.setattr(boundary.shutil, "which", lambda name: None)
    try:
        argv, missing = boundary.wrap(
            ["python", "-c", "pass"], boundary.default_spec(Path("/nonexistent"), uid=1, report_fd=-1)
        )
        assert argv == ["python", "-c", "pass"]
        assert [m.code for m in missing] == ["sandbox.unavailable"] and "unshare" in missing[0].message
    finally:
        boundary.probe.cache_clear()


VENV_PROBE = r"""
import subprocess, sys, tempfile
from pathlib import Path
from cudice.verifier.run import boundary
spec = boundary.default_spec(Path(tempfile.mkdtemp()), uid=boundary.UID_BASE + 98, report_fd=-1)
argv, _ = boundary.wrap([sys.executable, "-c", "import cudice.verifier, sys; print(sys.prefix)"], spec)
env = {"PATH": sys.argv[1], "HOME": "/tmp"}
run = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
print(run.stdout.strip() or run.stderr.strip()[-400:])
"""


def test_an_interpreter_in_a_venv_under_tmp_still_runs_inside(tmp_path: Path) -> None:
    """The runner's /tmp is a private tmpfs; a venv (or checkout) below the real /tmp, as a CI job's
    clone often is, must still be visible to it, read-only, or no runner could start."""
    venv = Path(tempfile.mkdtemp(prefix="cudice-test-venv-"))  # below /tmp, not below tmp_path's root
    os.chmod(venv, 0o755)  # as `python -m venv` or `git clone` leave their folders (mkdtemp's is 0700)
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        (site_dir,) = venv.glob("lib/python*/site-packages")
        outer = sysconfig.get_paths()["purelib"]  # this interpreter's packages (cudice, torch, ...)
        (site_dir / "outer.pth").write_text(f"import site; site.addsitedir({outer!r})\n")
        out = subprocess.run(
            [str(venv / "bin" / "python"), "-c", VENV_PROBE, os.environ["PATH"]],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.stdout.strip() == str(venv), out.stdout + out.stderr
    finally:
        subprocess.run(["rm", "-rf", str(venv)], check=False)


def test_the_runner_gets_no_root_group_and_no_group_of_a_folder(tmp_path: Path) -> None:
    """On the H200 box `/dev/nvidia-caps` (a directory, group root) once put the runner in group 0,
    whose closed group bits then hid every 0701 build cache from it. Only character devices the
    runner could not open as `other` give their group, and group 0 never."""
    import stat as st

    from cudice.verifier.run.boundary_init import _closed_device_gids, _device_groups

    (tmp_path / "nvidia-caps").mkdir(mode=0o755)
    (tmp_path / "nvidia0.txt").write_text("not a device")
    (tmp_path / "null").write_text("")
    assert _device_groups(_closed_device_gids(str(tmp_path))) == []
    try:  # device nodes need root (CAP_MKNOD); creating one never opens it
        os.mknod(tmp_path / "nvidia0", 0o660 | st.S_IFCHR, os.makedev(1, 3))
        os.mknod(tmp_path / "nvidia1", 0o660 | st.S_IFCHR, os.makedev(1, 3))
        os.mknod(tmp_path / "nvidiactl", 0o666 | st.S_IFCHR, os.makedev(1, 3))
        os.chown(tmp_path / "nvidia0", 0, 0)
        os.chown(tmp_path / "nvidia1", 0, 44)
        os.chown(tmp_path / "nvidiactl", 0, 45)
        for name, mode in (("nvidia0", 0o660), ("nvidia1", 0o660), ("nvidiactl", 0o666)):
            os.chmod(tmp_path / name, mode)  # mknod's mode passes through the umask
    except PermissionError:
        pytest.skip("creating device nodes needs root")
    # nvidia0: group root -> never; nvidia1: group 44; nvidiactl: world-writable, no group needed
    assert _device_groups(_closed_device_gids(str(tmp_path))) == [44]
    assert _closed_device_gids(str(tmp_path)) == {0, 44}  # group root: reported, never given


# candidate code in the runner: clear its own parent-death signal, leave the judge's process
# group, try to end or stop PID 1, then wait
RUNNER = """
import ctypes, os, signal, time
ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)
os.setsid()
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL, signal.SIGSTOP):
    try:
        os.kill(1, sig)
    except OSError:
        pass
os.execvp("sleep", ["sleep", "600"])  # done: the test waits for this
"""

JUDGE = r"""
import os, subprocess, sys, tempfile
from test_boundary import RUNNER
from pathlib import Path
from cudice.verifier.process import die_with_parent
from cudice.verifier.run import boundary
mark = sys.argv[1]
report_r, report_w = os.pipe()
spec = boundary.default_spec(Path(tempfile.mkdtemp()), uid=boundary.UID_BASE + 97, report_fd=report_w)
argv, _ = boundary.wrap([sys.executable, "-c", RUNNER], spec)
env = {"PATH": os.environ["PATH"], "HOME": "/tmp", "CUDICE_BOUNDARY_SURVIVOR": mark}
proc = subprocess.Popen(argv, pass_fds=(report_w,), env=env, preexec_fn=die_with_parent)
os.close(report_w)
print(os.fdopen(report_r).readline().strip(), flush=True)  # the boundary is up: the runner is next
sys.stdin.read()  # until killed
"""


def _sleeping(mark: str) -> bool:
    for pid in _survivors(mark):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep"):
                return True
        except OSError:
            continue
    return False


def test_a_runner_dies_with_a_killed_judge() -> None:
    """A runner whose judge was SIGKILLed (a killed test run, a killed editor) must die, whatever
    its candidate did: as root the uid change once cleared the parent-death signal of the
    namespace's PID 1 — then the runner itself — and runners outlived their judges on the GPU; and
    a runner can clear its own signal and `setsid`. PID 1 is now the trusted boundary_init, which
    the runner can neither signal nor trace: it dies with `unshare`, and the namespace with it."""
    mark = f"cudice_judge_{uuid.uuid4().hex}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    judge = subprocess.Popen(
        [sys.executable, "-c", JUDGE, mark], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert judge.stdout is not None
        report = json.loads(judge.stdout.readline())
        assert report["pid"] == 1, report
        deadline = time.monotonic() + 120
        while not _sleeping(mark) and time.monotonic() < deadline:  # the runner sent its signals
            time.sleep(0.05)
        assert _sleeping(mark), "the runner never got past its signals to PID 1 (or PID 1 died of them)"
    finally:
        judge.kill()
        judge.wait(timeout=60)
    deadline = time.monotonic() + 60
    while _survivors(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = _survivors(mark)
    for pid in survivors:  # leave nothing behind, even when the assertion fails
        os.kill(pid, 9)
    assert survivors == [], "the runner outlived its judge"


def test_no_runner_starts_once_the_judge_is_gone(tmp_path: Path) -> None:
    """A judge that died while the boundary was being set up closed its end of the report pipe:
    boundary_init says so and never starts the runner (which nothing would end any more)."""
    mark = f"cudice_gone_{uuid.uuid4().hex}"
    report_r, report_w = os.pipe()
    os.close(report_r)  # the judge is gone before the report is written
    spec = boundary.default_spec(tmp_path, uid=boundary.UID_BASE + 96, report_fd=report_w)
    argv, _ = boundary.wrap(["sleep", "600"], spec)
    env = {"PATH": os.environ["PATH"], "HOME": "/tmp", "CUDICE_BOUNDARY_SURVIVOR": mark}
    try:
        run = subprocess.run(argv, pass_fds=(report_w,), env=env, capture_output=True, text=True, timeout=120)
    finally:
        os.close(report_w)
    assert run.returncode != 0 and "the judge is gone" in run.stderr, (run.returncode, run.stderr[-500:])
    assert _survivors(mark) == []
