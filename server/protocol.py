"""Names the editors and the server agree on: commands, the status notification, its values.

The VS Code extension and the Neovim plugin use exactly these strings (docs/server.md lists
them). This module holds constants only; it does not implement any of them.
"""

from __future__ import annotations

from typing import Final, Literal

# workspace/executeCommand names.
CMD_GENERATE: Final = "cudice.generateKernel"  # args: uri, position {line, character} or class name
CMD_INFILL: Final = (
    "cudice.infillKernel"  # args: uri, {"start": offset, "end": offset} or an LSP range[, version]
)
CMD_VERIFY: Final = "cudice.verify"  # args: uri
CMD_RELOAD_MODEL: Final = "cudice.reloadModel"  # no args
CMD_CANCEL: Final = "cudice.cancel"  # optional args: uri (cancels that document's jobs; none: all jobs)
COMMANDS: Final = (CMD_GENERATE, CMD_INFILL, CMD_VERIFY, CMD_RELOAD_MODEL, CMD_CANCEL)

# Custom server -> client notification:
#   {"model": ModelState, "message": str, "lastVerdict": str | None, "uri": str | None}
STATUS_NOTIFICATION: Final = "cudice/status"
ModelState = Literal["missing", "loading", "ready", "error"]
MODEL_STATES: Final = ("missing", "loading", "ready", "error")

# Diagnostics: the `source` every cudice diagnostic carries.
DIAGNOSTIC_SOURCE: Final = "cudice"

# Code action kinds.
KIND_GENERATE: Final = "refactor.rewrite.cudice.generate"
KIND_INFILL: Final = "refactor.rewrite.cudice.infill"
