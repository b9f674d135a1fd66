"""The OS boundary around a runner process (Linux): namespaces, a private file-system view, a uid.

`wrap(argv, spec)` returns the command that starts `argv` inside the boundary, or the plain
command plus `sandbox.*` diagnostics saying which piece is missing (never a silent downgrade).
The boundary is util-linux `unshare` (no bubblewrap: the GPU box has none) plus
`run/boundary_init.py`, which runs as PID 1 of the new namespaces before any candidate code:

- PID namespace with its own /proc (`--mount-proc`): the parent's processes and their
  `/proc/<pid>/environ` are invisible; `--kill-child` ties the namespace's PID 1 (boundary_init,
  which stays there as the runner's parent) to `unshare`, and PID 1 dying kills every process in
  the namespace, `setsid` children included;
- mount namespace: private tmpfs on /tmp, /var/tmp, /dev/shm and the home directories;
  site-packages, the cudice sources and the build cache bound read-only; directories the
  unprivileged uid could not traverse (e.g. `/root` holding the interpreter) replaced by a tmpfs
  holding read-only binds of just the paths the runner needs;
- network and IPC namespaces (no network, no shared SysV/POSIX IPC);
- as root: `setuid` to a per-runner unprivileged uid (no file on the disk belongs to it),
  `RLIMIT_NPROC`, `no_new_privs`; as another user: a user namespace (the same uid outside, so
  the user's other files stay writable: reported as `sandbox.same_user`).

Paths the runner needs below a private directory (a checkout or venv under /tmp) are bound back
read-only; as root, such a path must be traversable by other users itself (a 0700 folder holding
the interpreter below /tmp stays closed to the runner's uid: the run fails visibly).

Not covered: GPU memory of other processes (driver-level isolation only), CPU and memory
cgroups (RLIMIT_DATA from the caller bounds host memory), side channels, kernel exploits.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import asdict, dataclass, field
from pathlib import Path

UID_BASE = 2_000_000_000  # far above any real account: no file on the disk belongs to these uids


@dataclass(frozen=True, slots=True)
class BoundarySpec:
    """What one runner may see. Paths are absolute; `uid` is used only when starting as root."""

    read_paths: tuple[str, ...]  # must stay readable: interpreter, site-packages, cudice, build cache
    read_only_paths: tuple[str, ...]  # bound read-only: site-packages, cudice, build cache
    private_dirs: tuple[str, ...] = ("/tmp", "/var/tmp", "/dev/shm")
    home_dirs: tuple[str, ...] = ()
    uid: int = UID_BASE
    max_processes: int = 512  # RLIMIT_NPROC counts threads too; torch starts one per core
    report_fd: int = -1  # where boundary_init writes what it applied, before the runner starts
    extra: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self))


@dataclass(frozen=True, slots=True)
class Missing:
    """A piece of the boundary that could not be applied: a `sandbox.*` diagnostic code and why."""

    code: str
    message: str


def default_spec(cache_dir: Path, *, uid: int, report_fd: int) -> BoundarySpec:
    """The paths of this interpreter and of cudice, and the build cache `cache_dir`."""
    import cudice.verifier as pkg

    purelib, platlib = sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]
    cudice_src = str(Path(pkg.__path__[0]).resolve().parent)  # the tree holding verifier/, model/, server/
    exe = str(Path(sys.executable).resolve())
    reads = {
        sys.prefix,
        sys.base_prefix,
        str(Path(exe).parent.parent),
        purelib,
        platlib,
        cudice_src,
        str(cache_dir),
    }
    cwd = os.getcwd()  # the judge's work directory (its runners' logs): not the runner's business
    imports = {p for p in sys.path if p and p != cwd and Path(p).is_dir()}  # PYTHONPATH may point under /tmp
    reads |= imports
    cuda = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda:
        reads.add(cuda)
    ro = {purelib, platlib, cudice_src, str(cache_dir)} | {p for p in sys.path if "site-packages" in p}
    homes = {
        str(Path.home()),
        pwd.getpwuid(os.getuid()).pw_dir,
    }  # $HOME may point elsewhere (run/sandbox.py sets it)
    if os.environ.get("HOME"):
        homes.add(os.environ["HOME"])
    tmp_dirs = BoundarySpec.__dataclass_fields__["private_dirs"].default
    homes = {h for h in homes if not any(h == t or h.startswith(t + "/") for t in tmp_dirs)}  # type: ignore[union-attr]
    private = set(tmp_dirs) | homes  # type: ignore[arg-type]

    def shared(p: str) -> bool:
        # A private dir (/tmp, a home) is never shared whole; the paths the runner needs below one
        # are (read-only where listed in `ro`): a checkout or a venv under /tmp must stay importable.
        return Path(p).exists() and p not in private and p != "/"

    reads = {p for p in reads if shared(p)}
    return BoundarySpec(
        tuple(sorted(reads)),
        tuple(sorted(p for p in ro if shared(p))),
        home_dirs=tuple(sorted(homes)),
        uid=uid,
        report_fd=report_fd,
    )


def _unshare_flags(as_root: bool) -> list[str]:
    flags = ["--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--net", "--ipc"]
    return flags if as_root else ["--user", "--map-root-user", *flags]


@functools.cache
def probe() -> Missing | None:
    """None when `unshare` can build the boundary here, else what is missing (cached per process)."""
    if sys.platform != "linux":
        return Missing(
            "sandbox.unavailable", f"no OS boundary on {sys.platform}: the runner is a plain child process"
        )
    exe = shutil.which("unshare")
    if exe is None:
        return Missing(
            "sandbox.unavailable",
            "util-linux `unshare` was not found: the runner is a plain child "
            "process (install util-linux for namespaces)",
        )
    try:
        out = subprocess.run(
            [exe, *_unshare_flags(os.geteuid() == 0), "true"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Missing("sandbox.unavailable", f"`unshare` could not run: {exc}")
    if out.returncode != 0:
        return Missing(
            "sandbox.unavailable",
            f"`unshare` refused to create namespaces ({out.stderr.strip()[:300]}); "
            "a container may need --privileged or user namespaces enabled (sysctl "
            "kernel.unprivileged_userns_clone=1)",
        )
    return None


def wrap(argv: list[str], spec: BoundarySpec) -> tuple[list[str], list[Missing]]:
    """The command running `argv` inside the boundary, and the pieces that could not be applied."""
    missing = probe()
    if missing is not None:
        return argv, [missing]
    exe = shutil.which("unshare")
    assert exe is not None
    notes = (
        []
        if os.geteuid() == 0
        else [
            Missing(
                "sandbox.same_user",
                "not running as root: the runner keeps this user's uid (in a user namespace), so files "
                "of this user outside the read-only and private paths stay writable; run the verifier "
                "as root (it then drops to an unprivileged uid) or in a container",
            )
        ]
    )
    init = [sys.executable, "-m", "cudice.verifier.run.boundary_init", spec.to_json(), "--"]
    return [exe, *_unshare_flags(os.geteuid() == 0), *init, *argv], notes


def readable_by_runners(cache_dir: Path, library: Path) -> None:
    """Let a runner's unprivileged uid open `library`: search permission (g+x, o+x) on every directory
    from `cache_dir` down to it, read permission (g+r, o+r) on the file.

    The boundary binds the cache read-only at its own path, with its own modes; as root the runner
    runs as a uid that owns nothing, so a cache made by `tempfile.mkdtemp` (0700), or under a umask
    of 077, would make every `load_inline` fail with EACCES. Nothing is made writable and no
    directory listable by others. Outside root the runner keeps this uid: nothing to change.
    Called by the judge, which answers every runner's `load_inline` with the library's path.
    """
    import stat

    if os.geteuid() != 0:
        return
    try:
        rel = library.resolve().relative_to(cache_dir.resolve())
    except (OSError, ValueError):
        return  # not in the cache: nothing of ours to open up
    chain = [cache_dir.resolve()]
    for part in rel.parts:
        chain.append(chain[-1] / part)
    for p in chain:
        want = stat.S_IRGRP | stat.S_IROTH if p == chain[-1] else stat.S_IXGRP | stat.S_IXOTH
        try:
            mode = p.stat().st_mode
            if mode & want != want:
                os.chmod(p, stat.S_IMODE(mode) | want)
        except OSError:
            return  # the runner's import then fails with the OS's message
