"""The quick check uses the user's strictness, so its first findings are the verdict's.

`quick_child.answer` with the real verifier and no clangd: a forward that multiplies the kernel's
output is a violation under the default policy and a warning under the lenient one; a request
that names no policy gets the verifier's default.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from cudice.server.workers.quick_child import answer
from cudice.verifier import api
from cudice.verifier.source.result import Severity, Verdict

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "relu_cuda.py"


def test_the_quick_check_follows_the_requested_strictness() -> None:
    source = EXAMPLE.read_text().replace("return self.relu.relu_cuda(x)", "return self.relu.relu_cuda(x) * 2")
    no_clangd = SimpleNamespace(available=False)

    def found(**policy: str) -> tuple[Verdict, set[tuple[str, Severity]]]:
        result = answer(api, {"path": str(EXAMPLE), "source": source, "config": policy}, no_clangd)
        return result.verdict, {
            (d.code, d.severity) for d in result.diagnostics if d.code.startswith("static.")
        }

    default_verdict, default_found = found()
    assert default_verdict is Verdict.STATIC_VIOLATION
    assert ("static.torch_op_in_forward", Severity.ERROR) in default_found
    assert found(static_policy="default") == (default_verdict, default_found)
    lenient_verdict, lenient_found = found(static_policy="lenient")
    assert lenient_verdict is Verdict.CHECKED
    assert ("static.torch_op_in_forward", Severity.WARNING) in lenient_found
