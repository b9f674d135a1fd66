"""File watching for the server (watchdog): hot reload of checkpoints, re-verification on reference edits.

`PathWatcher` watches a set of paths (a file's parent folder is observed) and calls
`on_change(key)` on the asyncio loop, debounced per key: a burst of writes gives one call after
`debounce_s` of quiet. `checkpoint_signature(dir)` tells a complete checkpoint from a half-written
one: the trainer's completion marker (`cudice_checkpoint.json`, written last, model/train) when
present, else `config.json` plus every weight shard named by the index, with no temporary files.

Not covered: network file systems without inotify (watchdog falls back to polling there only if
configured to); checkpoints whose shards change size after the marker was written.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

log = logging.getLogger(__name__)

CHECKPOINT_MARKER = "cudice_checkpoint.json"
_TEMP_SUFFIXES = (".tmp", ".part", ".partial", ".incomplete", ".lock")


def checkpoint_signature(directory: str | Path) -> str | None:
    """A fingerprint of a complete checkpoint in `directory`, or None while it is incomplete."""
    d = Path(directory)
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return None
    if any(n.endswith(_TEMP_SUFFIXES) or n.startswith(".tmp") for n in names):
        return None
    h = hashlib.sha256()
    if CHECKPOINT_MARKER in names:
        try:
            h.update((d / CHECKPOINT_MARKER).read_bytes())
        except OSError:
            return None
        return "marker:" + h.hexdigest()
    if "config.json" not in names:
        return None
    shards = [n for n in names if n.endswith((".safetensors", ".bin"))]
    index = d / "model.safetensors.index.json"
    if index.exists():
        try:
            wanted = set(json.loads(index.read_text()).get("weight_map", {}).values())
        except (OSError, ValueError):
            return None
        if not wanted <= set(shards):
            return None
    if not shards:
        return None
    for n in ["config.json", *shards]:
        st = (d / n).stat()
        h.update(f"{n}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return "files:" + h.hexdigest()


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: PathWatcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        paths = [event.src_path, getattr(event, "dest_path", "")]
        for p in paths:
            if p:
                self.watcher._from_thread(os.fsdecode(p))


class PathWatcher:
    """Watch files or folders; `on_change(key)` runs on `loop` after `debounce_s` of quiet per key."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, on_change: Callable[[str], Any], debounce_s: float = 1.0
    ) -> None:
        self.loop = loop
        self.on_change = on_change
        self.debounce_s = debounce_s
        self._keys: dict[str, str] = {}  # watched absolute path -> key
        self._observer: Any = None
        self._scheduled: set[str] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def watch(self, path: str, key: str | None = None) -> None:
        """Watch `path` (a file, or a folder and everything directly in it)."""
        p = os.path.abspath(path)
        self._keys[p] = key or p
        folder = p if os.path.isdir(p) else os.path.dirname(p)
        if folder in self._scheduled or not os.path.isdir(folder):
            return
        if self._observer is None:
            self._observer = Observer()
            self._observer.daemon = True
            self._observer.start()
        self._observer.schedule(_Handler(self), folder, recursive=False)
        self._scheduled.add(folder)

    def unwatch_all(self) -> None:
        self._keys.clear()

    def _from_thread(self, path: str) -> None:
        for watched, key in list(self._keys.items()):
            if path == watched or os.path.dirname(path) == watched:
                self.loop.call_soon_threadsafe(self._bump, key)

    def _bump(self, key: str) -> None:
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        self._timers[key] = self.loop.call_later(self.debounce_s, self._fire, key)

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        try:
            result = self.on_change(key)
            if asyncio.iscoroutine(result):
                self.loop.create_task(result)
        except Exception:
            log.exception("file-change handler failed for %s", key)

    def stop(self) -> None:
        for t in self._timers.values():
            t.cancel()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=2)
            self._observer = None
