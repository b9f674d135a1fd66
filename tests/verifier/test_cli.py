"""`cudice verify` and `cudice version` as a user runs them (real process, real nvcc via the session cache).
`cudice eval` is tested in tests/verifier/eval/test_eval_cli.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cudice_cli import cudice
from verifier_marks import needs_nvcc


@needs_nvcc
@pytest.mark.slow
@pytest.mark.e2e
def test_verify_json_relu_broken_line_14(examples_dir: Path, cache_root: Path) -> None:
    proc = cudice("verify", "--json", str(examples_dir / "relu_broken.py"), cache=cache_root)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # exactly one JSON object, nothing else on stdout
    assert out["verdict"] == "compile_error"
    errors = [d for d in out["diagnostics"] if d["severity"] == "error"]
    assert [(d["line"], d["column"], d["code"]) for d in errors] == [(14, 18, "compile.error")]
    assert {"speedup", "runtime_ms", "reference_runtime_ms"} <= set(out)


@needs_nvcc
@pytest.mark.slow
@pytest.mark.e2e
def test_verify_relu_cuda_readable_report_says_what_was_skipped(examples_dir: Path, cache_root: Path) -> None:
    proc = cudice("verify", str(examples_dir / "relu_cuda.py"), cache=cache_root)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    if "no CUDA GPU" not in text and "No CUDA GPU" not in text:
        pytest.skip("this machine has a GPU: the report covers correctness and timing instead")
    assert "verdict: compiled" in text and "skipped: correctness, timing (no CUDA GPU)" in text


def test_usage_error_exits_non_zero(tmp_path: Path) -> None:
    proc = cudice("verify", str(tmp_path / "missing.py"), cache=tmp_path)
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def _runtime_built(tmp_path: Path, examples_dir: Path) -> Path:
    text = (examples_dir / "relu_cuda.py").read_text().replace('relu_source = """', 'relu_source = f"""')
    text = text.replace("{\n", "{{\n").replace("}\n", "}}\n").replace("threads = 256", "threads = {256}")
    (tmp_path / "relu.py").write_text((examples_dir / "relu.py").read_text())
    cand = tmp_path / ("relu_cuda_" + "x" * 60 + ".py")
    cand.write_text(text)
    return cand


def test_exit_code_strictness_and_unwrapped_locations(tmp_path: Path, examples_dir: Path) -> None:
    cand = _runtime_built(tmp_path, examples_dir)  # verdict `checked`: nvcc never sees an f-string's text
    plain = cudice("verify", "--compile-only", str(cand), cache=tmp_path)
    assert plain.returncode == 0, plain.stderr
    strict = cudice(
        "verify", "--compile-only", "--exit-code", "--strictness", "strict", str(cand), cache=tmp_path
    )
    assert strict.returncode == 1 and "verdict: checked" in strict.stdout, strict.stdout + strict.stderr
    # piped: a finding stays on one line, location to code (the path alone is over 80 columns)
    (line,) = [t for t in strict.stdout.splitlines() if "[verify.not_compiled]" in t]
    assert line.strip().startswith(f"{cand}:") and ": warning: " in line
    assert strict.stdout.count("[verify.not_compiled]") == 1  # one line per problem
    bad = cudice("verify", "--strictness", "paranoid", str(cand), cache=tmp_path)
    assert bad.returncode == 2 and "paranoid" in bad.stderr


def test_version_shows_the_nvcc_release(tmp_path: Path) -> None:
    import shutil

    out = cudice("version", cache=tmp_path)
    assert out.returncode == 0, out.stderr
    (line,) = [t for t in out.stdout.splitlines() if t.startswith("nvcc ")]
    if shutil.which("nvcc") is None:
        assert "not found" in line
    else:
        assert line.split()[1][0].isdigit() and "V" in line, line  # e.g. "nvcc 13.0, V13.0.48 (/usr/...)"


def _without_reference(text: str) -> str:
    """`text` without its `# cudice: reference=` comment, every other line where it was."""
    return "\n".join("# (no reference)" if "cudice: reference=" in t else t for t in text.split("\n"))


@needs_nvcc
@pytest.mark.slow
@pytest.mark.e2e
def test_verify_without_reference_locates_compile_errors_and_says_what_was_not_checked(
    tmp_path: Path, examples_dir: Path, cache_root: Path
) -> None:
    """The session's relu_broken and relu_cuda builds, from files that name no reference."""
    broken, good = tmp_path / "broken.py", tmp_path / "good.py"
    broken.write_text(_without_reference((examples_dir / "relu_broken.py").read_text()))
    good.write_text(_without_reference((examples_dir / "relu_cuda.py").read_text()))
    bad = cudice("verify", str(broken), cache=cache_root)
    assert bad.returncode == 0, bad.stderr
    assert "verdict: compile_error" in bad.stdout, bad.stdout
    assert f"{broken}:14:18: error: " in bad.stdout and "[parse.no_reference]" in bad.stdout
    text = cudice("verify", str(good), cache=cache_root)
    assert "verdict: compiled" in text.stdout, text.stdout + text.stderr
    (line,) = [t for t in text.stdout.splitlines() if t.startswith("not checked:")]
    assert "correctness, speed (no reference" in line and "--reference PATH" in line
    assert "# cudice: reference=" in line and "get_inputs()" in line
    as_json = json.loads(cudice("verify", "--json", str(good), cache=cache_root).stdout)
    assert as_json["verdict"] == "compiled" and as_json["compile_only"] is True
    assert [d["severity"] for d in as_json["diagnostics"] if d["code"] == "parse.no_reference"] == ["warning"]
    assert cudice("verify", "--exit-code", str(good), cache=cache_root).returncode == 1  # not `correct`
    assert cudice("verify", "--exit-code", "--compile-only", str(good), cache=cache_root).returncode == 0


@needs_nvcc
@pytest.mark.slow
@pytest.mark.e2e
def test_verify_compile_only_reports_a_reference_whose_get_inputs_raises(
    tmp_path: Path, examples_dir: Path, cache_root: Path
) -> None:
    ref_text = (examples_dir / "relu.py").read_text()
    (tmp_path / "relu.py").write_text(
        ref_text.replace("torch.randn(batch_size, dim)", "torch.randn(batch_size, dimm)")
    )
    cand = tmp_path / "relu_cuda.py"
    cand.write_text((examples_dir / "relu_cuda.py").read_text())  # the session's relu_cuda build
    line = next(i for i, t in enumerate(ref_text.split("\n"), 1) if "torch.randn(batch_size, dim)" in t)
    proc = cudice("verify", "--compile-only", "--exit-code", str(cand), cache=cache_root)
    assert proc.returncode == 1 and "verdict: runtime_error (stage load" in proc.stdout, (
        proc.stdout + proc.stderr
    )
    (found,) = [t for t in proc.stdout.splitlines() if "[reference.get_inputs_failed]" in t]
    assert found.strip().startswith(f"{(tmp_path / 'relu.py').resolve()}:{line}:5: error: ")
    assert "NameError" in found and "would stop here with `runtime_error`" in found


@needs_nvcc
@pytest.mark.slow
@pytest.mark.e2e
def test_prepare_computes_the_first_error_lists_once(tmp_path: Path) -> None:
    """`cudice prepare` leaves the lists a first compile error reads in the build cache; run again,
    it reuses them (the same files, nothing recomputed)."""
    cache = tmp_path / "cache"
    first = cudice("prepare", cache=cache)
    assert first.returncode == 0 and "lists are ready" in first.stdout, first.stdout + first.stderr

    def lists() -> dict[str, int]:
        return {
            str(p): p.stat().st_mtime_ns
            for pattern in ("macros-*.txt", "names-*.txt")
            for p in (cache / "build").rglob(pattern)
        }

    made = lists()
    assert any("names-" in p for p in made) and any("macros-" in p for p in made), made
    again = cudice("prepare", cache=cache)
    assert again.returncode == 0 and "lists are ready" in again.stdout, again.stdout + again.stderr
    assert lists() == made
