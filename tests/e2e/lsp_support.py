"""Test harness for the language-server e2e tests: a pytest-lsp client with a tiny editor model.

`Editor` starts `python -m cudice.server` over stdio with a recorded real client's capabilities
(`neovim@v0.11`, `visual-studio-code`), keeps the buffers it opened (text + version), applies
`workspace/applyEdit` the way an editor does (refusing a stale version), answers
`window/showMessageRequest` with a scripted choice, and collects `cudice/status`.
Waits are on named notifications with a deadline, never sleeps.

`Editors` (the `editors` fixture of conftest.py) starts editors and stops every one at teardown,
also after a failed test: `shutdown` unless the test sent it (`Editor.shutdown`), `exit`, then a
kill when the server does not go within its bound. Every server runs with `CUDICE_TEST_FAMILY=<tag>`
in its environment, inherited by all it starts (workers, clangd, compilers in their own sessions),
so teardown also finds re-parented descendants: it waits for them to end and kills and reports any
that outlive the server. A teardown problem (no answer to `shutdown`, a server that crashed or had
to be killed, a leftover process) fails the test at teardown. Not covered: processes that drop the
variable from their environment (the verifier's sandboxed runners on a GPU box start with a clean one).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Union

from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import make_test_lsp_client

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CLIENTS = ("neovim@v0.11", "visual-studio-code")
FAKES_ENV = {
    "CUDICE_ENGINE_MODULE": "lsp_fakes.fake_engine",
    "CUDICE_VERIFY_MODULE": "lsp_fakes.fake_verifier",
}
FAMILY_VAR = "CUDICE_TEST_FAMILY"
# Teardown bounds (a loaded 2-core box; a healthy server takes well under a second for each step).
SHUTDOWN_S = 10.0  # `shutdown` answered
EXIT_S = 20.0  # the process gone after `exit` (and again after a kill)
SLOW_EXIT_S = 10.0  # an exit slower than this is reported as a warning (the server's bound is 15 s)
FAMILY_S = 60.0  # its descendants gone after the server


def copy_example(name: str, dest: Path) -> Path:
    """Copy `examples/<name>` to `dest`, dated an hour back: a server verifies on open the files
    saved while it started (their time is after its process start, which /proc gives to 10 ms), so
    a copy made just before a server starts could count as such a save."""
    import shutil

    shutil.copy(REPO / "examples" / name, dest)
    past = time.time() - 3600
    os.utime(dest, (past, past))
    return dest


def shared_build_cache() -> Path:
    """The cudice cache root (`CUDICE_CACHE_DIR`) of every real-backend e2e server of this pytest
    run: `CUDICE_TEST_BUILD_CACHE`, which tests/conftest.py sets before collection. The verifier
    tests' session build cache is its `build/`, so the toolchain probe, the first-error lists and
    the examples' objects (the pybind `main.o`, ~40 s of g++ cold and minutes on a loaded box) are
    computed once per run. Objects are keyed by content and flags and results by file path, so no
    test sees another's verdict."""
    return Path(os.environ["CUDICE_TEST_BUILD_CACHE"])


class Editor:
    def __init__(self, client: LanguageClient) -> None:
        self.client = client
        self.buffers: dict[str, list[Any]] = {}  # uri -> [text, version]
        self.statuses: list[dict[str, Any]] = []
        self.message_request_answer: str | None = None
        self.message_requests: list[lsp.ShowMessageRequestParams] = []
        self.applied_edits: list[lsp.WorkspaceEdit] = []
        self.lens_refreshes = 0
        self.position_encoding = "utf-16"  # what the server chose at initialize
        self.family = ""  # the CUDICE_TEST_FAMILY tag of the server and everything it starts
        self.is_shut_down = False  # `shutdown` was sent: teardown sends only `exit`

    async def shutdown(self) -> None:
        """Send `shutdown` from the test (to time it, say); the teardown then skips it."""
        self.is_shut_down = True
        await self.client.shutdown_async(None)

    # -- editor behaviour ----------------------------------------------------------------------
    def _apply(self, params: lsp.ApplyWorkspaceEditParams) -> lsp.ApplyWorkspaceEditResult:
        from cudice.verifier.source.positions import LineIndex

        changes: list[tuple[str, int | None, list[lsp.TextEdit]]] = []
        for change in params.edit.document_changes or []:
            assert isinstance(change, lsp.TextDocumentEdit)
            edits = [e for e in change.edits if isinstance(e, lsp.TextEdit)]
            changes.append((change.text_document.uri, change.text_document.version, edits))
        for uri, edits in (params.edit.changes or {}).items():
            changes.append((uri, None, list(edits)))
        for uri, version, edits in changes:
            buf = self.buffers[uri]
            if version is not None and version != buf[1]:
                return lsp.ApplyWorkspaceEditResult(applied=False, failure_reason="version mismatch")
            for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
                index = LineIndex.of(buf[0], self.position_encoding)
                start = index.offset(e.range.start.line, e.range.start.character)
                end = index.offset(e.range.end.line, e.range.end.character)
                buf[0] = buf[0][:start] + e.new_text + buf[0][end:]
            buf[1] += 1
        self.applied_edits.append(params.edit)
        return lsp.ApplyWorkspaceEditResult(applied=True)

    def open(self, path: Path) -> str:
        uri = path.as_uri()
        text = path.read_text()
        self.buffers[uri] = [text, 1]
        self.client.text_document_did_open(
            lsp.DidOpenTextDocumentParams(
                lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
            )
        )
        return uri

    def change(self, uri: str, text: str) -> None:
        buf = self.buffers[uri]
        buf[0], buf[1] = text, buf[1] + 1
        self.client.text_document_did_change(
            lsp.DidChangeTextDocumentParams(
                lsp.VersionedTextDocumentIdentifier(uri=uri, version=buf[1]),
                [lsp.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )

    def save(self, uri: str) -> None:
        Path(lsp_path(uri)).write_text(self.buffers[uri][0])
        self.client.text_document_did_save(lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(uri=uri)))

    # -- waiting -------------------------------------------------------------------------------
    async def wait_for(self, method: str, done: Callable[[], bool], timeout: float = 60.0) -> None:
        async def loop() -> None:
            while not done():
                await self.client.wait_for_notification(method)

        await asyncio.wait_for(loop(), timeout)

    async def wait_status(
        self, pred: Callable[[dict[str, Any]], bool], timeout: float = 60.0
    ) -> dict[str, Any]:
        await self.wait_for("cudice/status", lambda: any(pred(s) for s in self.statuses), timeout)
        return next(s for s in reversed(self.statuses) if pred(s))

    async def wait_model(self, state: str, timeout: float = 60.0) -> dict[str, Any]:
        return await self.wait_status(lambda s: s["model"] == state, timeout)

    async def wait_diagnostics(
        self, uri: str, pred: Callable[[list[lsp.Diagnostic]], bool], timeout: float = 60.0
    ) -> list[lsp.Diagnostic]:
        await self.wait_for(
            "textDocument/publishDiagnostics",
            lambda: uri in self.client.diagnostics and pred(list(self.client.diagnostics[uri])),
            timeout,
        )
        return list(self.client.diagnostics[uri])

    async def code_actions(self, uri: str, line: int, character: int) -> list[lsp.CodeAction]:
        pos = lsp.Position(line, character)
        got = await self.client.text_document_code_action_async(
            lsp.CodeActionParams(
                lsp.TextDocumentIdentifier(uri=uri),
                lsp.Range(pos, pos),
                lsp.CodeActionContext(diagnostics=[]),
            )
        )
        return list(got or [])

    async def command(self, name: str, *args: Any) -> Any:
        return await self.client.workspace_execute_command_async(
            lsp.ExecuteCommandParams(command=name, arguments=list(args))
        )


def lsp_path(uri: str) -> str:
    from pygls.uris import to_fs_path

    path = to_fs_path(uri)
    assert path is not None
    return path


async def _launch(root: Path, env: dict[str, str]) -> Editor:
    """Start `python -m cudice.server` with a client; not initialized yet."""
    holder: list[Editor] = []

    def factory() -> LanguageClient:
        client = make_test_lsp_client()
        _fix_code_action_union(client)
        editor = Editor(client)
        holder.append(editor)

        @client.feature(lsp.WORKSPACE_APPLY_EDIT)
        def apply_edit(params: lsp.ApplyWorkspaceEditParams) -> lsp.ApplyWorkspaceEditResult:
            return editor._apply(params)

        @client.feature(lsp.WINDOW_SHOW_MESSAGE_REQUEST)
        def message_request(params: lsp.ShowMessageRequestParams) -> lsp.MessageActionItem | None:
            editor.message_requests.append(params)
            ans = editor.message_request_answer
            return lsp.MessageActionItem(title=ans) if ans else None

        @client.feature(lsp.WORKSPACE_CODE_LENS_REFRESH)
        def lens_refresh(params: None) -> None:
            editor.lens_refreshes += 1

        @client.feature("cudice/status")
        def status(params: Any) -> None:
            editor.statuses.append(_to_dict(params))

        return client

    full_env = {**os.environ, **FAKES_ENV, **env}
    full_env["PYTHONPATH"] = os.pathsep.join([str(HERE), full_env.get("PYTHONPATH", "")])
    full_env.setdefault("CUDICE_CACHE_DIR", str(root / ".cudice-cache"))
    config = ClientServerConfig(
        server_command=[sys.executable, "-m", "cudice.server"], server_env=full_env, client_factory=factory
    )
    client = await config.start()
    editor = holder[0]
    assert editor.client is client
    editor.family = full_env[FAMILY_VAR]
    return editor


async def _initialize(
    editor: Editor, client_name: str, root: Path, init_options: Any, configuration: Any
) -> None:
    client = editor.client
    if configuration is not None:
        client.set_configuration(configuration, section="cudice")
    result = await client.initialize_session(
        lsp.InitializeParams(
            capabilities=client_capabilities(client_name),
            initialization_options=init_options,
            root_uri=root.as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(uri=root.as_uri(), name="ws")],
        )
    )
    editor.position_encoding = str(result.capabilities.position_encoding or "utf-16")


def _fix_code_action_union(client: LanguageClient) -> None:
    """lsprotocol 2025.0.0 parses every CodeAction that carries a command as a Command (its hook tests
    `"command" in obj`); editors test whether `command` is a string. Do as editors do."""
    converter = client.protocol._converter

    def hook(obj: Any, _: type) -> lsp.Command | lsp.CodeAction:
        if isinstance(obj.get("command"), str):
            return converter.structure(obj, lsp.Command)
        return converter.structure(obj, lsp.CodeAction)

    converter.register_structure_hook(Union[lsp.Command, lsp.CodeAction], hook)  # noqa: UP007


def _to_dict(obj: Any) -> dict[str, Any]:
    """pygls hands custom notifications' params over as namedtuples."""
    return dict(obj) if isinstance(obj, dict) else dict(obj._asdict())


class Editors:
    """The editors of one test: `start` them; `stop` one early, or let teardown (`stop_all`) stop
    the rest, whatever the test did to them."""

    def __init__(self) -> None:
        self._running: list[Editor] = []
        self._problems: list[str] = []

    async def start(
        self,
        client_name: str,
        root: Path,
        *,
        init_options: Any = None,
        env: dict[str, str] | None = None,
        configuration: Any = None,
    ) -> Editor:
        """An initialized editor of `client_name` (a recorded client, see CLIENTS) on the workspace
        `root`; `env` is added to the server's environment (the scripted stand-ins by default),
        `init_options` are its initializationOptions, `configuration` answers its
        `workspace/configuration` requests for the `cudice` section."""
        env = {FAMILY_VAR: uuid.uuid4().hex, **(env or {})}
        editor = await _launch(root, env)
        self._running.append(editor)  # before initialize: a server that never answers is stopped too
        await _initialize(editor, client_name, root, init_options, configuration)
        return editor

    async def stop(self, editor: Editor) -> None:
        """Stop `editor`'s server and wait for its descendants; raises AssertionError if it did not
        end cleanly (its processes are gone either way)."""
        if editor in self._running:
            self._running.remove(editor)
            self._problems += await _stop(editor)
        self._raise()

    async def stop_all(self) -> None:
        while self._running:
            self._problems += await _stop(self._running.pop())
        self._raise()

    def _raise(self) -> None:
        if self._problems:
            problems, self._problems = self._problems, []
            raise AssertionError("editor teardown: " + "; ".join(problems))


async def _stop(editor: Editor) -> list[str]:
    """shutdown -> exit -> wait; SIGKILL past a bound; then the same for the server's descendants.
    Returns what went wrong, in words."""
    client, problems = editor.client, []
    proc = client._server
    assert proc is not None, "the client never started its server"
    if proc.returncode is None and not editor.is_shut_down:
        try:
            await asyncio.wait_for(client.shutdown_async(None), SHUTDOWN_S)
        except Exception as exc:  # a time-out, an error answer, the server dying meanwhile
            if proc.returncode is None:
                problems.append(f"`shutdown` failed after the test ({type(exc).__name__}: {exc})")
    if proc.returncode is None:
        with contextlib.suppress(Exception):  # the pipe may be closed already
            client.exit(None)
        exit_sent = time.monotonic()
        try:
            if await asyncio.wait_for(proc.wait(), EXIT_S) != 0:
                problems.append(f"the server exited with {proc.returncode} after `shutdown` and `exit`")
            if (took := time.monotonic() - exit_sent) > SLOW_EXIT_S:  # its stderr (above) has its stacks
                warnings.warn(f"the server (pid {proc.pid}) took {took:.1f} s to exit", stacklevel=1)
        except asyncio.TimeoutError:
            problems.append(
                f"the server (pid {proc.pid}) was still running {EXIT_S:.0f} s after `exit`: killed"
            )
            proc.kill()
            await asyncio.wait_for(proc.wait(), EXIT_S)
    elif proc.returncode not in (0, -signal.SIGKILL):  # the tests themselves only SIGKILL it
        problems.append(f"the server exited with {proc.returncode} before teardown (see its stderr above)")
    try:
        await asyncio.wait_for(client.stop(), EXIT_S)
    except asyncio.TimeoutError:
        problems.append(f"the client's reader tasks did not end within {EXIT_S:.0f} s")
    leftover = await wait_family_gone(editor.family, FAMILY_S)
    if leftover:
        for pid in leftover:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        problems.append(
            f"{len(leftover)} process(es) outlived the server by {FAMILY_S:.0f} s and were "
            "killed: " + ", ".join(f"{pid} {cmd!r}" for pid, cmd in leftover.items())
        )
    return problems


async def wait_family_gone(tag: str, timeout_s: float) -> dict[int, str]:
    deadline = time.monotonic() + timeout_s
    while (found := family_processes(tag)) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return found


def family_processes(tag: str) -> dict[int, str]:
    """pid -> command line of every live process whose environment holds CUDICE_TEST_FAMILY=tag
    (zombies are left out: they are dead, their parent reaps them)."""
    marker = f"{FAMILY_VAR}={tag}".encode()
    found: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if marker not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
        except OSError:
            continue
        found[int(entry.name)] = cmd
    return found
