"""The JSON records of compile-only verifications stay what they were.

`tests/verifier/data/verify_records.json` holds, per file, the record `cudice verify --json
--compile-only FILE` prints (`VerifyResult.to_dict()`, run from the repository root) for every
bundled example (`examples/`) and the corpus files in `CORPUS`, picked for their different
verdicts and stages: a reference file given as a candidate (parse), Python- and C++-side static
violations that are still compiled, a warning that still compiles, an honest candidate. A
refactor that changes one field of one record (a verdict, a stage, a diagnostic's text or place,
a key added or dropped) fails here, with a diff per file.

The records come from `api.verify` in this process, with the config the CLI's `--compile-only`
builds (`VerifyConfig().with_(compile_only=True, static_policy="default")`, the build cache of
the test session: tests/verifier/conftest.py `build_cache`), so the builds are the ones other
tests share; one file also goes through the `cudice verify` command itself, which must print the
same record. Normalised before comparing, as volatile: `stage_wall_s` (the stages are kept, their
seconds become "<s>"), `measured_at` ("<time>"), the values of `versions` (torch, the nvcc found,
the arch list: "<version>"), and in every string the repository's root ("<repo>") and the build
cache ("<cache>").

Regenerate after a deliberate change, and review the file's diff with it:
    CUDICE_UPDATE_GOLDEN=1 python -m pytest -q tests/verifier/eval/test_records_golden.py
(the test then writes the file and passes).

Cost on a 2-core machine: 45-90 s with a cold build cache (relu_broken's first compile error
computes the slim build's lists; each other candidate compiles in 3-6 s), about a second when the
session's cache holds the checks already.
Not covered: runs past the compile stage (they need a GPU; the timings are not reproducible
anyway), other strictness levels; recorded with a CPU-only torch and CUDA 13's nvcc: a toolkit
whose messages read differently changes the compile errors' text.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cudice.verifier.api import verify
from cudice.verifier.config import VerifyConfig
from cudice.verifier.dist.tasks import replace_in_strings
from verifier_marks import needs_nvcc

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "verifier" / "data" / "verify_records.json"
UPDATE_VAR = "CUDICE_UPDATE_GOLDEN"
CORPUS = (
    "tests/verifier/corpus/adv_st_cpp_fopen_forge.py",  # C++ file access: static violation, compiled
    "tests/verifier/corpus/exec_hidden.py",  # exec of built code: static violation
    "tests/verifier/corpus/honest_relu_empty_like.py",  # honest: compiled, no finding
    "tests/verifier/corpus/hostile_exit_at_import.py",  # source that cannot be mapped: no compile
    "tests/verifier/corpus/no_custom_kernel_call.py",  # a kernel never launched
    "tests/verifier/corpus/precision_half.py",  # a warning that still compiles
    "tests/verifier/corpus/tensor_arithmetic.py",  # a torch op in forward
    "tests/verifier/corpus/wrapper_cublas.py",  # an ATen op in host code
)
CLI_FILE = "examples/relu_cuda.py"  # also run through `cudice verify --json --compile-only`

pytestmark = [needs_nvcc, pytest.mark.slow]


def files() -> list[str]:
    """The files recorded, relative to the repository's root."""
    examples = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "examples").glob("*.py"))
    return [*examples, *CORPUS]


def cli_config(build_cache: Path) -> VerifyConfig:
    """What `cudice verify --compile-only` verifies with (verifier/cli.py), in the session's cache."""
    return VerifyConfig().with_(compile_only=True, static_policy="default", cache_dir=build_cache)


def normalised(record: dict[str, Any], build_cache: Path) -> dict[str, Any]:
    """`record` with its volatile fields replaced (module docstring)."""
    out = dict(record)
    out["stage_wall_s"] = dict.fromkeys(sorted(record.get("stage_wall_s") or {}), "<s>")
    if out.get("measured_at") is not None:
        out["measured_at"] = "<time>"
    out["versions"] = dict.fromkeys(sorted(record.get("versions") or {}), "<version>")
    roots = {  # longest first (replace_in_strings): the cache may lie under the repository
        str(build_cache.resolve()): "<cache>",
        str(build_cache): "<cache>",
        str(REPO): "<repo>",
        str(REPO.resolve()): "<repo>",
    }
    return replace_in_strings(out, roots)  # type: ignore[no-any-return]


def records(build_cache: Path) -> dict[str, dict[str, Any]]:
    """Every file's normalised record (run from the repository's root, as the CLI from there)."""
    config = cli_config(build_cache)
    out = {}
    for name in files():
        result = verify(name, config=config, warm_judge=True)
        out[name] = normalised(json.loads(result.to_json()), build_cache)
    return out


def _dump(record: Any) -> list[str]:
    return json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False).splitlines(keepends=True)


def differences(want: dict[str, Any], got: dict[str, Any]) -> str:
    """A unified diff per file whose record changed, and the files added or removed."""
    parts = []
    for name in sorted(set(want) | set(got)):
        if name not in want or name not in got:
            parts.append(
                f"{name}: {'not in the golden file' if name not in want else 'no longer recorded'}\n"
            )
        elif want[name] != got[name]:
            parts.append(
                "".join(
                    difflib.unified_diff(
                        _dump(want[name]), _dump(got[name]), f"golden {name}", f"now {name}", n=2
                    )
                )
            )
    return "\n".join(parts)


def test_the_compile_only_records_are_the_recorded_ones(
    build_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    got = records(build_cache)
    if os.environ.get(UPDATE_VAR) == "1":
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        return
    want = json.loads(GOLDEN.read_text())
    diff = differences(want, got)
    if diff:  # the diff alone, not the assertion's repr of it
        pytest.fail(
            f"verification records changed (if meant, regenerate: {UPDATE_VAR}=1, docstring):\n{diff}",
            pytrace=False,
        )


def test_the_cli_prints_the_recorded_record(build_cache: Path, cache_root: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cudice.server.cli", "verify", "--json", "--compile-only", CLI_FILE],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "CUDICE_CACHE_DIR": str(cache_root)},
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    got = normalised(json.loads(done.stdout), build_cache)
    want = json.loads(GOLDEN.read_text())[CLI_FILE]
    diff = differences({CLI_FILE: want}, {CLI_FILE: got})
    if diff:
        pytest.fail(
            f"`cudice verify --json --compile-only {CLI_FILE}` printed another record:\n{diff}", pytrace=False
        )
