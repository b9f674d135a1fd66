"""`CudiceServer`: the pygls `LanguageServer` plus cudice's state (settings, workers, results, documents).

The state lives on the server instance (built by `app.create_server`, never a module-level
singleton), so each test gets a fresh one, and each TCP connection of a multi-client server its own
session; there only the model worker and the verification jobs are shared (`team.py`). What the
server keeps per document is one `DocumentState` in `documents` (document_state.py), its text
parsed once per text (`analysis`). Helpers here are small and non-blocking: reading a document,
publishing status, reporting messages once. The flows live in `generation.py`, `verification.py`,
`prebuild.py`, `model_loading.py` and `session.py`; the LSP handlers in `app.py`; the pygls
workarounds in `transport/`.

Not covered: multi-root workspaces get one settings object (the first folder's), not one each.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudice.server import __version__
from cudice.server.document_state import MAX_ANALYSES, Analysis, DocumentState, named_reference
from cudice.server.protocol import STATUS_NOTIFICATION
from cudice.server.settings import Settings, parse_settings
from cudice.server.transport import pygls_fixes
from cudice.verifier.run import gpu_probe
from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

if TYPE_CHECKING:  # imported when first used: `initialize` is answered before any of them loads
    from cudice.server.fast_init import EarlyFrame
    from cudice.server.results import ResultCache
    from cudice.server.shared import SessionJobs, Team, WorkLimit
    from cudice.server.watch import PathWatcher
    from cudice.server.workers.model import LoadRequest, ModelWorker
    from cudice.server.workers.quick import QuickChecks
    from cudice.server.workers.verify import VerifyJobs
    from cudice.verifier.source.document import Document
    from cudice.verifier.source.positions import LineIndex

log = logging.getLogger("cudice.server")
# The largest document text cudice parses (an `ast` parse per edit grows with the text, and on a
# small CPU a large file stalls hover, code actions and lenses, which each need one after every edit;
# docs/benchmarks.md).
MAX_DOCUMENT_CHARS = 512 * 1024


def process_started_at() -> float:
    """Wall-clock time this process started (Linux: /proc; else now). `initialize` may be answered
    before the server object exists (fast_init.py), so the object's creation time is too late."""
    try:
        with open("/proc/self/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])  # field 22: starttime since boot
        with open("/proc/uptime", "rb") as f:  # 10 ms resolution (/proc/stat's btime has whole seconds)
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.time()


class CudiceServer(LanguageServer):
    def __init__(self, *, worker_env: dict[str, str] | None = None, results_dir: Path | None = None) -> None:
        super().__init__("cudice", __version__, max_workers=4, protocol_cls=pygls_fixes.CudiceProtocol)
        pygls_fixes.install(self)
        self.settings = Settings()
        self.init_options: Any = None
        self.cli_log_level: str | None = None
        self.log_to_client = False  # client_log.py: the log below ERROR goes out as window/logMessage
        self._reported: set[str] = set()
        self.worker_env = worker_env
        self.released = False  # set by session.release(): the session is over, start no more workers
        self.releasing: asyncio.Task[None] | None = None  # that release, once started (session.py)
        self.results_dir = results_dir
        self.documents: dict[str, DocumentState] = {}  # uri -> what the server keeps about it
        self.last_verdict: str | None = None
        self.last_uri: str | None = None
        self.started_at = process_started_at()  # wall clock, compared with file modification times
        self.ref_watcher: PathWatcher | None = None
        self.ckpt_watcher: PathWatcher | None = None
        self.ckpt_signature: str | None = None
        self.tasks: set[asyncio.Task[Any]] = set()
        self.model_load: asyncio.Task[Any] | None = None  # a deferred model's load, once asked for
        # multi-client mode (team.py): the shared model and jobs, this session's id and work bound
        self.team: Team | None = None
        self.session_id = ""
        self.work_limit: WorkLimit | None = None
        gpu_probe.start_hardware_probe()  # done before the first verification asks, off the event loop

    # -- workers and caches: built (and their modules imported) on first use, after `initialize` --
    @cached_property
    def model(self) -> ModelWorker:
        if self.team is not None:  # one model for every session (team.py)
            return self.team.model
        from cudice.server.workers.model import ModelWorker

        return ModelWorker(on_state=self._on_model_state, on_notice=self.notice, env=self.worker_env)

    @cached_property
    def jobs(self) -> VerifyJobs | SessionJobs:
        if self.team is not None:  # the shared jobs, keyed by this session (team.py)
            from cudice.server.shared import SessionJobs

            return SessionJobs(self.team.jobs, self.session_id)
        from cudice.server.workers.verify import VerifyJobs

        return VerifyJobs(env=self.worker_env, spare=self.wants_warm_verifier)

    def wants_warm_verifier(self) -> bool:
        """Whether a verification worker should wait, warm, for the next save: runs reach a GPU here
        (a judge's processes start ahead, verify_child.py) and saves are verified with a run stage."""
        s = self.settings
        return s.verify_on_save and not s.verify_compile_only and gpu_probe.gpu_available()

    @cached_property
    def quick(self) -> QuickChecks:
        from cudice.server.workers.quick import QuickChecks

        return QuickChecks(env=self.worker_env)

    @cached_property
    def cache(self) -> ResultCache:
        from cudice.server.results import ResultCache

        return ResultCache(self.results_dir)

    # -- transport -----------------------------------------------------------------------------
    def start_io(
        self,
        stdin: Any = None,
        stdout: Any = None,
        *,
        early: EarlyFrame | None = None,
        after_exit: Callable[[], Awaitable[None]] | None = None,
    ) -> int:
        """Serve on stdio with cudice's read loop (`transport.pygls_fixes.serve_stdio`); the exit
        code (1 for an `exit` without `shutdown`). `early` is a first frame `fast_init` already read
        (and maybe answered); `after_exit` is awaited on `exit` before the event loop ends (app.py:
        the session's release, which a `shutdown` may have started)."""
        return pygls_fixes.serve_stdio(self, stdin, stdout, early=early, after_exit=after_exit)

    def report_server_error(self, error: Exception, source: Any) -> None:
        """pygls shows every internal error in a popup ("Error in server: ..."); cudice logs it to
        stderr (the editor's server log) and tells the user about its own failures itself. Nothing
        is sent to the client: a failed send reports itself here, and answering it with another
        send would loop once the connection is gone."""
        log.error(
            "server error (%s): %s: %s",
            getattr(source, "__name__", source),
            type(error).__name__,
            str(error)[:500],
        )

    # -- background tasks ----------------------------------------------------------------------
    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """Run `coro` in the background, keep a reference, log (never raise) its failure."""
        task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self.tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                exc = t.exception()
                log.error("background task failed", exc_info=exc)
                # the type and a bounded message: never a whole file (a UnicodeDecodeError's repr
                # holds its input)
                self.notice(
                    f"cudice: internal error: {type(exc).__name__}: {str(exc)[:300]} (see the server log)"
                )

        task.add_done_callback(done)
        return task

    # -- messages ------------------------------------------------------------------------------
    def notice(self, message: str, kind: lsp.MessageType = lsp.MessageType.Warning) -> None:
        log.info("%s", message)
        self.window_show_message(lsp.ShowMessageParams(type=kind, message=message))

    def report_once(self, message: str, kind: lsp.MessageType = lsp.MessageType.Warning) -> None:
        if message not in self._reported:
            self._reported.add(message)
            self.notice(message, kind)

    def send_status(self, message: str | None = None, uri: str | None = None) -> None:
        """`cudice/status`; `lastVerdict` is always the verdict of `uri` (null while it has none),
        never another file's, `verifying` says whether `uri` is being verified now, and `edited`
        whether its buffer changed since the text of that verdict."""
        uri = uri if uri is not None else self.last_uri
        state = self.documents.get(uri) if uri is not None else None
        latest = state.latest if state is not None else None
        self.protocol.notify(
            STATUS_NOTIFICATION,
            {
                "model": self.model.state,
                "message": message or self.model.message,
                "lastVerdict": latest.result.verdict.value if latest is not None else None,
                "uri": uri,
                "verifying": uri is not None and self.is_building(uri),
                "edited": state is not None and state.edited,
            },
        )

    def is_building(self, uri: str) -> bool:
        """A verification of `uri` is starting or running (set before its progress token exists,
        so a lens asked for meanwhile never shows the previous verdict as current)."""
        state = self.documents.get(uri)
        is_starting = state is not None and state.building > 0
        return is_starting or ("jobs" in self.__dict__ and self.jobs.is_running(uri))

    def open_text(self, uri: str) -> str | None:
        """The editor's current text of `uri` when it is open, else None."""
        doc = self.workspace.text_documents.get(uri)
        return doc.source if doc is not None else None

    def _on_model_state(self, state: str, message: str) -> None:
        log.info("model %s: %s", state, message)
        self.send_status(message)

    # -- settings ------------------------------------------------------------------------------
    def apply_settings(self, raw: Any, base: Settings | None = None) -> Settings:
        """Parse client settings on top of `base`; warn once per bad value; return the new settings."""
        settings, warnings = parse_settings(raw, base if base is not None else Settings())
        for w in warnings:
            self.report_once(f"cudice: {w}")
        self.settings = settings
        logging.getLogger("cudice").setLevel(settings.log_level.upper())
        return settings

    def load_request(self) -> LoadRequest | None:
        from cudice.model.bundled import resolve_model_path
        from cudice.server.workers.model import LoadRequest

        s = self.settings
        path, _ = resolve_model_path(s.model_path)  # no cudice.model.path: the bundled demo model
        return LoadRequest(path, s.model_device, s.model_dtype, s.model_fast) if path else None

    def settings_dict(self) -> dict[str, Any]:
        return asdict(self.settings)

    # -- documents -----------------------------------------------------------------------------
    def read_document(self, uri: str) -> tuple[str, int | None, str | None] | None:
        """(text, version, file path) of an open document or a file on disk; None when unreadable."""
        if not isinstance(uri, str) or not uri:
            return None
        try:
            doc = self.workspace.get_text_document(uri)
            return doc.source, doc.version, to_fs_path(uri)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            log.info("cannot read %s: %s", uri, exc)
            return None

    # -- documents' state ----------------------------------------------------------------------
    def document(self, uri: str) -> DocumentState:
        """The state of `uri`, created empty the first time it is asked for."""
        state = self.documents.get(uri)
        if state is None:
            state = self.documents[uri] = DocumentState(uri)
        return state

    @property
    def dependents(self) -> dict[str, set[str]]:
        """Reference path -> the URIs of the candidates verified against it that watch it."""
        found: dict[str, set[str]] = {}
        for uri, state in self.documents.items():
            if state.watched_reference is not None:
                found.setdefault(state.watched_reference, set()).add(uri)
        return found

    def analyse(self, uri: str, source: str) -> tuple[Document, LineIndex]:
        """The verifier's document model of a document's text and its line index in the client's
        position encoding (`analysis`)."""
        found = self.analysis(uri, source)
        return found.doc, found.index

    def analysis(self, uri: str, source: str) -> Analysis:
        """`source` of `uri` parsed, computed once per text (hover and code actions ask many times
        between edits, and a save verifies the text the editor last showed): the document model,
        the line index and the reference path it names."""
        from cudice.verifier.source.document import parse_document
        from cudice.verifier.source.positions import LineIndex

        state = self.document(uri)
        encoding = self.position_encoding
        hit = state.analysed(source, encoding)
        if hit is not None:
            return hit
        path = to_fs_path(uri) or uri
        if self.too_large(uri, source):  # bounded work per request: an empty document offers nothing
            empty = parse_document("", path, require_candidate=False)
            return Analysis(source, empty, LineIndex.of("", encoding), None)
        doc = parse_document(source, path, require_candidate=False)
        found = Analysis(source, doc, LineIndex.of(source, encoding), named_reference(doc))
        if sum(s.analysis is not None for s in self.documents.values()) >= MAX_ANALYSES:
            for other in self.documents.values():
                other.analysis = None
        state.analysis = found
        return found

    def too_large(self, uri: str, source: str) -> bool:
        """Whether `source` is over `MAX_DOCUMENT_CHARS`: cudice then leaves the file alone (says so once)."""
        if len(source) <= MAX_DOCUMENT_CHARS:
            return False
        name = os.path.basename(to_fs_path(uri) or uri)
        self.report_once(
            f"cudice: {name} has {len(source) // 1024} KiB of text, over the "
            f"{MAX_DOCUMENT_CHARS // 1024} KiB cudice reads; its actions, hover, lens and "
            "verification are off for this file (KernelBench files are a few KiB)",
            lsp.MessageType.Info,
        )
        return True

    @property
    def position_encoding(self) -> str:
        """The position unit negotiated at `initialize` ("utf-16" until then)."""
        caps = self.protocol.server_capabilities if hasattr(self.protocol, "server_capabilities") else None
        value = str(caps.position_encoding) if caps is not None and caps.position_encoding else "utf-16"
        from cudice.verifier.source.positions import ENCODINGS

        return value if value in ENCODINGS else "utf-16"

    def client_supports_lens_refresh(self) -> bool:
        ws = self.client_capabilities.workspace
        return bool(ws and ws.code_lens and ws.code_lens.refresh_support)

    def client_supports_document_changes(self) -> bool:
        ws = self.client_capabilities.workspace
        return bool(ws and ws.workspace_edit and ws.workspace_edit.document_changes)

    def refresh_lenses(self) -> None:
        if self.client_supports_lens_refresh():
            self.spawn(self.workspace_code_lens_refresh_async(None))
