"""The server factory and its LSP handlers: thin adapters from LSP to the plain feature functions.

`create_server()` builds a fresh `CudiceServer` (no module-level singleton); `run()` starts it on
stdio or TCP. `initialize` is answered at once (nothing heavy is imported: no torch); the model
loads afterwards in its worker process, with work-done progress. Handlers that must be instant
(code action, hover, code lens) are plain `def`s over already-computed data; everything slow is an
`async` flow awaiting a worker process, so neither the event loop nor pygls' thread pool (which
also reads stdin) is ever busy with model or kernel work.

Not covered: pull diagnostics, inlay hints, completion inside the CUDA string.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudice.server.core import CudiceServer
from cudice.server.protocol import (
    CMD_CANCEL,
    CMD_GENERATE,
    CMD_INFILL,
    CMD_RELOAD_MODEL,
    CMD_VERIFY,
    KIND_GENERATE,
    KIND_INFILL,
)
from cudice.server.session import arm_exit_watchdog, cancel_work, finish_release, release, start_release
from cudice.server.transport.pygls_fixes import INTERRUPTED, exit_code
from lsprotocol import types as lsp

if TYPE_CHECKING:
    from cudice.server.fast_init import EarlyFrame
    from cudice.verifier.source.positions import LineIndex

# Only what answering `initialize` needs is imported above (pygls and lsprotocol are most of the
# start-up; docs/server.md: `initialize` within 0.5 s). Features, flows, workers and watchdog are
# imported where they are first used, and preloaded in a thread once `initialized` arrives.
PRELOAD = (
    "cudice.server.candidacy",
    "cudice.server.model_loading",
    "cudice.server.features.code_actions",
    "cudice.server.features.code_lens",
    "cudice.server.features.display",
    "cudice.server.features.hover",
    "cudice.server.generation",
    "cudice.server.verification",
    "cudice.server.watch",
    "cudice.server.progress",
)

log = logging.getLogger("cudice.server")


async def _pull_configuration(ls: CudiceServer) -> Any:
    ws = ls.client_capabilities.workspace
    if not (ws and ws.configuration):
        return None
    try:
        items = await asyncio.wait_for(
            ls.workspace_configuration_async(
                lsp.ConfigurationParams(items=[lsp.ConfigurationItem(section="cudice")])
            ),
            5.0,
        )
    except Exception as exc:  # a client that cannot answer: keep initializationOptions
        log.info("workspace/configuration failed: %s", exc)
        return None
    return items[0] if items else None


def _merge_settings(ls: CudiceServer, pulled: Any) -> None:
    ls.apply_settings(ls.init_options)
    if isinstance(pulled, dict) and pulled:
        ls.apply_settings(pulled, ls.settings)
    if ls.cli_log_level:
        logging.getLogger("cudice").setLevel(ls.cli_log_level.upper())


async def _warm_quick(ls: CudiceServer) -> None:
    """Start the quick worker (it warms clangd's torch-header preamble); close it again if the
    session ended while it started."""
    await ls.quick.start()
    if _released(ls):
        await ls.quick.shutdown()


def _released(ls: CudiceServer) -> bool:
    return ls.released  # a call, so that mypy does not narrow the flag across awaits


def _preload() -> None:
    """Import what the handlers use, off the event loop, so the first hover or code action is fast."""
    for name in PRELOAD:
        importlib.import_module(name)


def _offsets(index: LineIndex, rng: lsp.Range) -> tuple[int, int]:
    return (index.offset(rng.start.line, rng.start.character), index.offset(rng.end.line, rng.end.character))


def create_server(
    *,
    worker_env: dict[str, str] | None = None,
    results_dir: Path | None = None,
    cli_log_level: str | None = None,
) -> CudiceServer:
    """A fresh cudice language server with every feature registered."""
    server = CudiceServer(worker_env=worker_env, results_dir=results_dir)
    server.cli_log_level = cli_log_level

    @server.feature(lsp.INITIALIZE)
    def initialize(ls: CudiceServer, params: lsp.InitializeParams) -> None:
        if ls.log_to_client:  # first: the settings' warnings below are logged already
            from cudice.server.client_log import start_sending

            start_sending(ls, asyncio.get_running_loop())
        ls.init_options = params.initialization_options
        _merge_settings(ls, None)

    @server.feature(lsp.INITIALIZED)
    async def initialized(ls: CudiceServer, params: lsp.InitializedParams) -> None:
        from cudice.server.verification import reference_changed, verify_open_documents
        from cudice.server.watch import PathWatcher

        ls.ref_watcher = PathWatcher(asyncio.get_running_loop(), lambda ref: reference_changed(ls, ref), 0.5)

        async def startup() -> None:
            await asyncio.get_running_loop().run_in_executor(None, _preload)
            _merge_settings(ls, await _pull_configuration(ls))
            if _released(ls):  # the client left (TCP) or shut down meanwhile: start no workers
                return
            ls.send_status()
            if ls.settings.verify_on_save:
                verify_open_documents(ls)  # saved before the server was ready: not lost
            from cudice.server.model_loading import start_model

            await start_model(ls)

        ls.spawn(startup())

    @server.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: CudiceServer, params: lsp.DidChangeConfigurationParams) -> None:
        before = ls.load_request()
        pulled = await _pull_configuration(ls)
        if pulled is None and isinstance(params.settings, dict):
            pulled = params.settings.get("cudice", params.settings)
        _merge_settings(ls, pulled)
        if ls.load_request() != before:
            from cudice.server.model_loading import start_model

            ls.spawn(start_model(ls))

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: CudiceServer, params: lsp.DidOpenTextDocumentParams) -> None:
        from cudice.server.candidacy import show_syntax_error
        from cudice.server.publishing import show_reference_findings
        from cudice.server.verification import show_cached, verify_open_documents, verify_reopened

        uri = params.text_document.uri
        if ls.document(uri).closed_while_verified:  # closed while verified, reopened: verdict wanted
            ls.document(uri).closed_while_verified = False
            ls.spawn(verify_reopened(ls, uri))
        elif not show_cached(ls, uri) and ls.settings.verify_on_save:
            verify_open_documents(ls, [uri])  # saved while the editor was attaching: verify it now
        show_syntax_error(ls, uri)  # a reference that does not parse says so before any save
        show_reference_findings(ls, uri)  # a reference whose `get_inputs()` raised for a candidate
        if not ls.released and ls.analyse(uri, params.text_document.text)[0].is_candidate:
            ls.spawn(_warm_quick(ls))  # clangd's minutes-long preamble only once a candidate is open
            if ls.wants_warm_verifier():
                ls.spawn(ls.jobs.prestart())  # on a GPU box, the first save's judge starts now
            else:  # elsewhere the first compile error's lists, at the lowest priority, before a save
                ls.jobs.prepare_when_idle()

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: CudiceServer, params: lsp.DidChangeTextDocumentParams) -> None:
        from cudice.server import prebuild
        from cudice.server.candidacy import note_edit

        prebuild.schedule(ls, params.text_document.uri)  # on a GPU box: build while the user types
        note_edit(ls, params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: CudiceServer, params: lsp.DidCloseTextDocumentParams) -> None:
        from cudice.server import prebuild

        uri = params.text_document.uri
        if ls.is_building(uri):  # starting (it sees `closes`) or running (cancelled below)
            ls.document(uri).closed_while_verified = True
        ls.document(uri).closes += 1  # a run still starting sees it
        prebuild.cancel(ls, uri)
        if "jobs" in ls.__dict__ and ls.jobs.cancel(uri):  # nobody is looking at its verdict any more
            log.info("%s closed: its verification is cancelled", uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE, lsp.SaveOptions(include_text=False))
    def did_save(ls: CudiceServer, params: lsp.DidSaveTextDocumentParams) -> None:
        from cudice.server import prebuild
        from cudice.server.verification import verify_document

        ls.document(params.text_document.uri).saved = True
        prebuild.cancel(ls, params.text_document.uri)  # the save's verification builds this text now
        if ls.settings.verify_on_save:
            ls.spawn(verify_document(ls, params.text_document.uri))

    @server.feature(
        lsp.TEXT_DOCUMENT_CODE_ACTION,
        lsp.CodeActionOptions(
            code_action_kinds=[lsp.CodeActionKind.RefactorRewrite, KIND_GENERATE, KIND_INFILL]
        ),
    )
    def code_action(ls: CudiceServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction] | None:
        from cudice.server.features.code_actions import ModelAvailability, code_actions

        doc = ls.read_document(params.text_document.uri)
        if doc is None:
            return None
        source, version, _ = doc
        doc_model, index = ls.analyse(params.text_document.uri, source)
        start, end = _offsets(index, params.range)
        caps = ls.client_capabilities.text_document
        disabled_support = bool(caps and caps.code_action and caps.code_action.disabled_support)
        model = ModelAvailability(ls.model.state, ls.model.message)
        return (
            code_actions(
                uri=params.text_document.uri,
                doc=doc_model,
                start=start,
                end=end,
                version=version,
                model=model,
                disabled_support=disabled_support,
            )
            or None
        )

    @server.feature(lsp.TEXT_DOCUMENT_HOVER)
    def hover(ls: CudiceServer, params: lsp.HoverParams) -> lsp.Hover | None:
        from cudice.server.features.hover import hover_card, hover_target
        from cudice.server.publishing import compile_only_reason

        uri = params.text_document.uri
        doc = ls.read_document(uri)
        if doc is None:
            return None
        doc_model, index = ls.analyse(uri, doc[0])
        span = hover_target(doc_model, index.offset(params.position.line, params.position.character))
        if span is None:
            return None
        latest, is_running = ls.document(uri).latest, ls.is_building(uri)
        text = hover_card(
            doc[0],
            latest.result if latest is not None else None,
            result_source=latest.source if latest is not None else None,
            version=latest.version if latest is not None else None,
            is_running=is_running,
            # asked only for a verdict on show: the GPU probe may still be running before the first
            compile_only_reason=compile_only_reason(ls) if latest is not None and not is_running else None,
            required_speedup=ls.settings.verify_required_speedup,
        )
        rng = lsp.Range(lsp.Position(*index.position(span.start)), lsp.Position(*index.position(span.end)))
        return lsp.Hover(contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=text), range=rng)

    @server.feature(lsp.TEXT_DOCUMENT_CODE_LENS)
    def code_lens(ls: CudiceServer, params: lsp.CodeLensParams) -> list[lsp.CodeLens] | None:
        from cudice.server.features.code_lens import code_lenses

        uri = params.text_document.uri
        doc = ls.read_document(uri)
        if doc is None:
            return None
        latest = ls.document(uri).latest
        doc_model, index = ls.analyse(uri, doc[0])
        return code_lenses(
            uri=uri,
            doc=doc_model,
            index=index,
            result=latest.result if latest else None,
            is_running=ls.is_building(uri),
            is_stale=latest is not None and latest.source is not None and latest.source != doc[0],
            required_speedup=ls.settings.verify_required_speedup,
        )

    @server.command(CMD_GENERATE)
    async def cmd_generate(ls: CudiceServer, *args: Any) -> dict[str, Any]:
        from cudice.server.generation import generate_kernel

        return await generate_kernel(ls, args[0] if args else None, args[1] if len(args) > 1 else None)

    @server.command(CMD_INFILL)
    async def cmd_infill(ls: CudiceServer, *args: Any) -> dict[str, Any]:
        from cudice.server.generation import infill_kernel

        return await infill_kernel(
            ls,
            args[0] if args else None,
            args[1] if len(args) > 1 else None,
            args[2] if len(args) > 2 else None,
        )

    @server.command(CMD_VERIFY)
    async def cmd_verify(ls: CudiceServer, *args: Any) -> dict[str, Any] | None:
        from cudice.server.verification import verify_document

        uri = args[0] if args else None
        if not isinstance(uri, str):
            ls.notice(f"cudice.verify needs the document URI as its argument, got {uri!r}")
            return None
        result = await verify_document(ls, uri, force=True)
        return None if result is None else {"verdict": result.verdict.value, "speedup": result.speedup}

    @server.command(CMD_RELOAD_MODEL)
    async def cmd_reload(ls: CudiceServer, *args: Any) -> dict[str, Any]:
        ls.model.num_restarts = 0
        from cudice.server.model_loading import load_model

        await load_model(ls, force=True)  # multi-client: the shared model, for everyone
        return {"model": ls.model.state, "message": ls.model.message}

    @server.command(CMD_CANCEL)
    def cmd_cancel(ls: CudiceServer, *args: Any) -> dict[str, Any]:
        return {"cancelled": cancel_work(ls, args[0] if args and isinstance(args[0], str) else None)}

    @server.feature(lsp.SHUTDOWN)
    async def shutdown(ls: CudiceServer, params: None) -> None:
        await start_release(ls)

    return server


def run(
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 2087,
    log_level: str | None = None,
    early: EarlyFrame | None = None,
    multi: bool = False,
    max_pending: int = 4,
) -> None:
    """Start the server (blocks). Logs go to stderr, never stdout (stdout is the protocol in stdio mode)."""
    logging.basicConfig(
        stream=sys.stderr,
        level=(log_level or "info").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if (log_level or "info") != "debug":  # pygls logs every message at INFO
        logging.getLogger("pygls").setLevel(logging.WARNING)
    if transport == "tcp" and multi:
        from cudice.server.team import run_team

        sys.exit(run_team(host, port, lambda: create_server(cli_log_level=log_level), release, max_pending))
    if transport == "tcp":
        # Not pygls' start_tcp: it closes the listener when its first connection ends (transport/tcp.py).
        from cudice.server.transport.tcp import serve_tcp

        try:
            code = asyncio.run(serve_tcp(host, port, lambda: create_server(cli_log_level=log_level), release))
        except KeyboardInterrupt:
            code = 130
        except OSError as exc:  # port taken, address not on this machine
            log.error("cannot listen on %s:%d: %s (pick another --port or --host)", host, port, exc)
            code = 1
        sys.exit(code)
    server = create_server(cli_log_level=log_level)
    # stdio: stderr is the editor's log, which may label it all errors (Neovim does). Routed before
    # the first message is read, so no info line of the server lands there (client_log.py).
    from cudice.server.client_log import route_to_client

    server.log_to_client = True
    route_to_client(server)

    # `exit` may come before the reply to `shutdown`, or without it: the release ends first, and
    # the process ends within a bound whatever still runs (session.py)
    async def after_exit() -> None:
        arm_exit_watchdog(exit_code(server))
        await finish_release(server)

    code = server.start_io(early=early, after_exit=after_exit)
    if code == INTERRUPTED:  # a thread still blocks on stdin: end without joining it (pygls_fixes.py)
        log.info("interrupted (Ctrl-C); exiting")
        logging.shutdown()
        sys.stdout.flush()
        os._exit(code)
    sys.exit(code)
