"""Verification results cached by content hash, in memory and on disk.

The key hashes the candidate text, the reference (its resolved path and its text) and the
verification settings, so an unchanged file with an unchanged reference shows its last result at
once when reopened, even after a server restart, while an edited reference, or a comment that
names another one, is verified again. The disk cache lives in the `results` subfolder of cudice's one
cache root (`cudice.verifier.config.cache_root`: `$CUDICE_CACHE_DIR`, else `$XDG_CACHE_HOME/cudice`,
else `~/.cache/cudice`; the verifier's builds are its `build` subfolder), one JSON file per key.

Not covered: eviction (files are small; delete the folder to clear it); sharing between machines
(results carry the GPU name, so a result from another GPU would still say where it came from).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from cudice.verifier.config import cache_subdir
from cudice.verifier.source.result import VerifyResult

log = logging.getLogger(__name__)


def default_results_dir() -> Path:
    return cache_subdir("results")


def result_key(
    source: str, reference_path: str | None, reference_text: str | None, config: dict[str, Any]
) -> str:
    """The cache key of verifying `source` against the reference file at `reference_path` whose text
    is `reference_text` (None: no reference file, or an unreadable one) with the settings `config`."""
    h = hashlib.sha256()
    reference = json.dumps([reference_path, reference_text])  # None stays apart from an empty file
    for part in (source, reference, json.dumps(config, sort_keys=True, default=str)):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()


class ResultCache:
    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory if directory is not None else default_results_dir()
        self._memory: dict[str, VerifyResult] = {}

    def get(self, key: str) -> VerifyResult | None:
        hit = self._memory.get(key)
        if hit is not None:
            return hit
        path = self.directory / f"{key}.json"
        try:
            result = VerifyResult.from_json(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable cached result %s: %s", path, exc)
            return None
        self._memory[key] = result
        return result

    def put(self, key: str, result: VerifyResult) -> None:
        self._memory[key] = result
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(result.to_json())
            os.replace(tmp, self.directory / f"{key}.json")
        except OSError as exc:  # a read-only cache only costs the restart case
            log.warning("could not store result in %s: %s", self.directory, exc)
            with contextlib.suppress(OSError, UnboundLocalError):
                os.unlink(tmp)
