"""The real verifier (`cudice.verifier.api`) for worker processes, counting the static checks.

Point `CUDICE_VERIFY_MODULE` at this module (with this folder on `PYTHONPATH`) and every run of
`check_document` in the worker appends one line, `<worker script name> <pid>`, to the file named by
`CUDICE_TEST_STATIC_LOG`. Two changes from the real verifier keep the test fast and offline:
`quick_check` gets no clangd (its compile findings are not what is counted), and `verify` ends
after its static stage, with that stage's partial result as the final one (no compiler runs).
`StaticResult` is the real one, so the workers take the static result the server hands them.
"""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace
from typing import Any

from cudice.verifier import api
from cudice.verifier.api import StaticResult as StaticResult
from cudice.verifier.source.result import Stage, VerifyResult
from cudice.verifier.static import checks

_check = checks.check_document


def _counted_check(doc: Any, config: Any = None) -> Any:
    with open(os.environ["CUDICE_TEST_STATIC_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{os.path.basename(sys.argv[0])} {os.getpid()}\n")
    return _check(doc, config)


checks.check_document = _counted_check  # api.run_static_checks looks it up at each call


def quick_check(path: str, source: str, checker: Any = None, **kw: Any) -> VerifyResult:
    return api.quick_check(path, source, SimpleNamespace(available=False), **kw)  # type: ignore[arg-type]


class _StaticDone(Exception):
    def __init__(self, result: VerifyResult) -> None:
        self.result = result


def verify(path: str, *, on_stage: Any = None, **kw: Any) -> VerifyResult:
    def stop_after_static(partial: Any, *rest: Any) -> None:
        if on_stage is not None:
            on_stage(partial, *rest)
        if isinstance(partial, VerifyResult) and partial.stage is Stage.STATIC:
            raise _StaticDone(partial)

    try:
        return api.verify(path, on_stage=stop_after_static, **kw)
    except _StaticDone as done:
        return done.result
