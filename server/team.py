"""`cudice-lsp --tcp --multi`: one server process for a team, many editors at once over TCP.

Role: one listener accepts any number of connections; each connection is its own language-server
session (a fresh `CudiceServer`: its own documents, settings, workspace, progress tokens,
cancellation, result memory and quick worker, a warm clangd), while all sessions share what is
expensive:

- ONE model worker (`ModelWorker`), loaded lazily once: the first session that needs it loads it
  (`cudice.model.path` of that editor, or the bundled model), later sessions find it loaded (or
  wait for that load) and never reload it; a session that names another checkpoint is told which
  one is shared. Generate and infill requests of all clients are *batched*: each is a row of one
  continuous-batching engine in the worker (`cudice.model.batching.ContinuousBatcher` over a paged
  KV cache; server/workers/model_batched.py), joining and leaving at block boundaries, each with
  the tokens it would get alone (greedy). Its size comes from the environment (`BatchOptions`:
  CUDICE_TEAM_MAX_BATCH rows, default 32; CUDICE_TEAM_MAX_QUEUE waiting, default 64;
  CUDICE_TEAM_KV_PAGES x CUDICE_TEAM_KV_PAGE_SIZE token slots, default 4096 x 16 on a GPU,
  2048 x 16 on a CPU);
  CUDICE_TEAM_BATCHING=0, or an engine that cannot batch, serialises them as before (one job at a
  time). `cudice.reloadModel` reloads the shared model for everyone (after the running jobs end).
- ONE verification job manager (`VerifyJobs`: the verifier's worker processes and their warm
  spare). Its job keys are namespaced per session (`shared.SessionJobs`: "<session>|<uri>"), so a run
  supersedes only its own session's earlier run of that document: two editors with the same file
  URI never cancel each other.

Contract:
- users never see each other's documents or verdicts: diagnostics, hover, lenses and
  `cudice/status` come from the session's own state; the result cache (results.py) is per
  session in memory, and its shared disk part is keyed by the full candidate text (and reference,
  settings, path), so a client only ever gets a cached verdict for the exact text it sent itself;
- a connection that ends (with or without `shutdown`/`exit`) cancels its own verifications and
  generations only (`release_session`): its rows leave the batch at the engine's next iteration,
  other sessions' rows and work go on (a client's `cudice.cancel` likewise stops its own row
  only). `exit` ends that connection, not the process (SIGINT/SIGTERM ends the process);
- at most `max_pending` verifications + generations per session are pending at once (running or
  waiting for the model); a new one beyond that is refused, not queued: a generate/infill command
  answers `{"ok": false, "reason": ...}` and the user gets a `window/showMessage` warning, a
  save's verification is skipped with the same warning. A newer save of a document already being
  verified replaces its run and does not count twice;
- at most the batching engine's capacity (rows + queue) of generations of all sessions at once:
  one beyond it is refused the same way (`claim_work` -> `Team.claim_generation`), and so is one
  the engine's own queue bound refuses in a race (`ModelBusy`, "the shared model is busy"): never
  an unbounded wait.

Not covered: fairness beyond the per-client bound (the batching engine admits FIFO; verification
runs of different sessions proceed in parallel); the static fast path (CUDA graphs,
torch.compile) for team generations: the batcher's paged forward is eager, so a lone user of a
team server decodes slower on a GPU than with a single-editor server; authentication/TLS (bind to
127.0.0.1 and forward over ssh); process-wide settings (the log level is the last applied; one
checkpoint for all; no reload on new checkpoints in team mode: use `cudice.reloadModel`); two
users on one file path of the server's disk share that file (generated `_cuda.py` files are
written there).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from threading import Event
from typing import TYPE_CHECKING, Any

from cudice.server.shared import Team, WorkLimit
from cudice.server.transport.rpc_reader import read_messages
from cudice.server.transport.tcp import RELEASE_TIMEOUT_S, release_in_background

if TYPE_CHECKING:
    from cudice.server.core import CudiceServer
    from cudice.server.workers.model import LoadRequest

log = logging.getLogger(__name__)


def claim_work(ls: CudiceServer, kind: str, uri: str) -> str | None:
    """Count one pending `kind` ("verify", "generate") of `uri` against the session's bound (and a
    generation against the shared model's capacity); None when admitted (call `release_work` when
    it ends), else why it was refused. Unbounded outside team mode."""
    if ls.work_limit is None:
        return None
    if ls.work_limit.claim(kind, uri):
        busy = ls.team.claim_generation() if kind == "generate" and ls.team is not None else None
        if busy is not None:
            ls.work_limit.release(kind, uri)
        return busy
    return (
        f"too much work queued for this editor: at most {ls.work_limit.limit} verifications and "
        f"generations may be pending at once on this shared server (cudice-lsp --max-pending); "
        f"the new {'verification' if kind == 'verify' else 'generation'} was not started. "
        "Wait for one to finish or cancel one (cudice.cancel)"
    )


def release_work(ls: CudiceServer, kind: str, uri: str) -> None:
    if ls.work_limit is not None:
        ls.work_limit.release(kind, uri)
        if kind == "generate" and ls.team is not None:
            ls.team.release_generation()


async def load_shared_model(ls: CudiceServer, request: LoadRequest | None, *, force: bool = False) -> bool:
    """Load the team's model once: a session finding it loaded or loading (by an earlier session)
    uses it, whatever it asked for (told once when that differs). `force` (cudice.reloadModel)
    reloads the shared request. Returns whether the model is ready."""
    team = ls.team
    assert team is not None
    model = team.model
    async with team.load_lock:
        shared = model.request
        if shared is not None and (force or model.state == "error"):
            request = shared  # a reload, or a retry of a failed load: the team's checkpoint
        elif shared is not None and model.state in ("ready", "loading"):
            if request is not None and request != shared:
                ls.report_once(
                    f"cudice: this server is shared; it uses the model {shared.path} for every editor "
                    f"(this editor's cudice.model settings, {request.path}, are not loaded)"
                )
            return model.state == "ready"
        elif request is None:
            return await model.load(None) if shared is None else False
        team.num_loads += 1
        log.info(
            "session %s loads the shared model %s (load %d)", ls.session_id, request.path, team.num_loads
        )
        return await model.load(request)


def attach(server: CudiceServer, team: Team) -> None:
    """Make `server` a session of `team`: its model and jobs are the shared ones, its work bounded."""
    server.team = team
    server.session_id = team.new_id()
    server.work_limit = WorkLimit(team.max_pending)
    team.sessions[server.session_id] = server


def detach(server: CudiceServer) -> None:
    if server.team is not None:
        server.team.sessions.pop(server.session_id, None)


async def serve_team(
    host: str,
    port: int,
    make_server: Callable[[], CudiceServer],
    release: Callable[[Any], Awaitable[None]],
    team: Team,
) -> int:
    """Listen on host:port and serve every connection at once, each with its own session, until
    the process is interrupted; returns 0. `release(server)` is awaited when each connection ends,
    as in `transport.tcp.serve_tcp` (it joins a release `shutdown` started)."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = str(writer.get_extra_info("peername"))
        server = make_server()
        attach(server, team)
        log.info(
            "client %s connected: session %s (%d connected)", peer, server.session_id, len(team.sessions)
        )
        server._stop_event = stop = Event()
        server.protocol.set_writer(writer)  # a StreamWriter, as in pygls' own TCP server
        try:
            await read_messages(stop, reader, server.protocol)
            log.info("session %s (%s) disconnected", server.session_id, peer)
        except SystemExit:  # `exit`: ends this connection only, never the shared process
            log.info("session %s (%s) sent exit", server.session_id, peer)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            log.info("session %s (%s): connection lost (%s)", server.session_id, peer, exc)
        finally:
            detach(server)
            try:
                if not await release_in_background(release(server), RELEASE_TIMEOUT_S):
                    log.error(
                        "closing session %s took over %.0f s; it goes on in the background",
                        server.session_id,
                        RELEASE_TIMEOUT_S,
                    )
            finally:
                server.shutdown()  # type: ignore[no-untyped-call]  # its thread pool; it has no listener
                writer.close()

    listener = await asyncio.start_server(connection, host, port)
    addrs = ", ".join(str(s.getsockname()) for s in listener.sockets)
    log.info(
        "cudice language server listening on %s (multi-client: one shared model, %s, at most %d "
        "pending jobs per client)",
        addrs,
        f"generations batched ({team.batch.max_batch} rows + {team.batch.max_queue} waiting)"
        if team.batch is not None
        else "generations one at a time",
        team.max_pending,
    )
    try:
        async with listener:
            await asyncio.Event().wait()  # until the process is interrupted
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(team.close(), RELEASE_TIMEOUT_S)
    return 0


def run_team(
    host: str,
    port: int,
    make_server: Callable[[], CudiceServer],
    release: Callable[[Any], Awaitable[None]],
    max_pending: int,
) -> int:
    """Serve until SIGINT or SIGTERM (both stop every session's work and the shared model); the exit code."""
    import signal

    from cudice.server.workers.model import BatchOptions

    try:
        batch = BatchOptions.from_env()
    except ValueError as exc:
        log.error("cannot start the team server: %s", exc)
        return 2

    async def main() -> int:
        team = Team(max_pending=max_pending, batch=batch)
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            return await serve_team(host, port, make_server, release, team)
        except asyncio.CancelledError:
            log.info("stopping: the shared model and every session's runs are closed")
            return 0

    try:
        return asyncio.run(main())
    except OSError as exc:  # port taken, address not on this machine
        log.error("cannot listen on %s:%d: %s (pick another --port or --host)", host, port, exc)
        return 1
