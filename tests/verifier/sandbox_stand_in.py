"""Child module for the CPU hostile-code tests: `python -m sandbox_stand_in --result-fd FD`, job on
stdin.

The real judge (`cudice.verifier.run.judge`) stops before running candidate code when there is
no GPU, so the sandbox tests run this stand-in instead: it loads the candidate through the
judges' own `judging.exec_module` (the same exec, the same error handling) and writes a result the way
`judge.main` does (to the result pipe). `torch` is replaced by a stub module, because the
attacks under test run at import, before `load_inline`, and importing the real torch per case
would cost seconds on CI.
"""

from __future__ import annotations

import json
import os
import sys
import types


def _stub_torch() -> None:
    torch = types.ModuleType("torch")
    nn = types.ModuleType("torch.nn")
    utils = types.ModuleType("torch.utils")
    ext = types.ModuleType("torch.utils.cpp_extension")
    nn.Module = object  # type: ignore[attr-defined]
    torch.Tensor = object  # type: ignore[attr-defined]
    ext.load_inline = lambda *a, **k: types.SimpleNamespace()  # type: ignore[attr-defined]
    torch.nn, torch.utils, utils.cpp_extension = nn, utils, ext  # type: ignore[attr-defined]
    sys.modules.update(
        {"torch": torch, "torch.nn": nn, "torch.utils": utils, "torch.utils.cpp_extension": ext}
    )


def main() -> None:
    from cudice.verifier.run.judging import Stop, exec_module
    from cudice.verifier.source.result import Stage, Verdict

    job = json.loads(sys.stdin.read())
    fd = int(sys.argv[sys.argv.index("--result-fd") + 1])
    _stub_torch()
    try:
        exec_module("cudice_candidate", job["candidate_source"], job["candidate_path"], Stage.LOAD)
        result = {"verdict": Verdict.COMPILED.value, "stage": Stage.LOAD.value}
    except Stop as stop:
        result = {
            "verdict": stop.verdict.value,
            "stage": stop.stage.value,
            "error": stop.error,
            "diagnostics": [d.to_dict() for d in stop.diagnostics],
        }
    except BaseException as exc:  # as worker.main: SystemExit and friends become a crash report
        result = {"verdict": Verdict.CRASH.value, "stage": Stage.LOAD.value, "error": repr(exc)}
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(result))


if __name__ == "__main__":
    main()
