"""A runner process: serves one model (the candidate's `ModelNew`, or `Model` for timing) to the judge.

`python -m cudice.verifier.run.runner --fd N` runs inside the OS boundary (run/boundary.py) and
talks to the judge over the socket `N` (run/channel.py). It holds no verdict, no reference output,
no seed of the inputs and no clock the judge trusts: it loads the model it is told to, runs
it on the inputs it receives and answers requests:

- `load`    exec the file, build the model after the given seed (`load_inline` asks the judge to
            build through the shared cache, which this process can only read);
- `inputs`  keep the tensors sent as the current inputs;
- `call`    one forward on them, with in-process observations (inputs unchanged, outputs plain
            and not aliasing the inputs, no new threads, free memory poisoned with NaN first);
- `fetch`   send the last outputs back;
- `stage`   keep the input sets of the next timed calls (sent by the judge before its clock starts);
- `stream`  timed calls, one binary message each (run/channel.py): unseal a staged set, forward,
            the keyed digests of its outputs (run/witness.py), sent back at once. The judge's clock
            runs from each call's message to its digests, a reply cannot be right before every
            output exists, and the next call is sent only then. The outputs are kept (`kept`
            sends one back). Both runners run the same loop, so its cost cancels in the
            difference of their times;
- `batch`   the same calls in one request, digests at the end (warm-up; `profile` runs it under
            the profiler);
- `profile` one forward under `torch.profiler`: kernel names, device time, stream;
- `guards`  whether timers, comparison functions or dispatcher entries were replaced, or global
            module hooks or torch function/dispatch modes installed.

Everything this process reports besides the outputs is an observation made where the candidate's
code runs: plain Python can forge it (the runner's Python is the candidate's). The judge bases
the verdict on outputs it compares itself and on its own clock; see docs/anticheat.md for what
stays open. Not covered: multi-GPU models.
"""

from __future__ import annotations

import gc
import socket
import sys
import time
import traceback
import types
from typing import Any

from cudice.verifier.run import channel
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage, Verdict

MAX_REQUEST_BYTES = 1 << 40  # the judge is trusted; its inputs may be large
DIGEST_SLOTS = 64  # output and input tensors of a call whose digests have room made beforehand
# ops whose dispatcher entries a candidate could override to fool a comparison in its own process
WATCHED_OPS = (
    "aten::allclose",
    "aten::isclose",
    "aten::eq.Tensor",
    "aten::sub.Tensor",
    "aten::abs",
    "aten::copy_",
    "aten::clone",
    "aten::mm",
    "aten::addmm",
    "aten::_to_copy",
)


# dispatch keys a dense CPU/CUDA tensor's call goes through; Meta, functorch and tracing keys are left
# out: PyTorch registers some of those lazily (fake tensors, torch.compile), which is no override
DISPATCH_KEYS = (
    "CPU",
    "CUDA",
    "Autograd",
    "AutogradCPU",
    "AutogradCUDA",
    "AutogradOther",
    "BackendSelect",
    "ADInplaceOrView",
    "AutocastCPU",
    "AutocastCUDA",
    "Python",
    "CompositeExplicitAutograd",
    "CompositeImplicitAutograd",
    "CompositeExplicitAutogradNonFunctional",
)


def warm_gpu(*, profiler: bool = False) -> None:
    """Pay the first-use costs of a GPU process before any job: the CUDA context, cuBLAS (a small
    matmul) and, with `profiler`, the profiler's first session (CUPTI). Nothing without a GPU;
    a profiler that cannot start here is left to say so when a job profiles."""
    import torch

    if not torch.cuda.is_available():
        return
    from cudice.verifier.run import witness

    x = torch.ones(8, 8, device="cuda")
    (x @ x).sum().item()
    witness.digest([x], 1, "cuda").cpu()  # builds the digest kernel before any candidate code exists
    if profiler:
        from torch.profiler import ProfilerActivity, profile

        try:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
                x.add_(1.0)
                torch.cuda.synchronize()
        except Exception:  # op_profile reports the same failure with its reason
            pass


def hook_state() -> dict[str, int]:
    """How many global module hooks and torch function/dispatch modes are installed in this process."""
    import torch
    import torch.nn.modules.module as nn_module

    state = {
        name: len(getattr(nn_module, name))
        for name in dir(nn_module)
        if name.startswith("_global_")
        and name.endswith("_hooks")
        and isinstance(getattr(nn_module, name), dict)
    }
    state["torch_function_modes"] = int(torch._C._len_torch_function_stack())
    state["torch_dispatch_modes"] = int(torch._C._len_torch_dispatch_stack())
    return state


def dispatcher_state() -> dict[str, str]:
    """The registrations of `WATCHED_OPS` for `DISPATCH_KEYS` (torch's dispatcher dump): a
    `torch.library` or `TORCH_LIBRARY_IMPL(aten, ...)` override changes them."""
    import torch

    def keyed(dump: str) -> str:
        return "\n".join(
            line
            for line in dump.splitlines()
            if line.split(":", 1)[0].removesuffix("[alias]") in DISPATCH_KEYS
        )

    return {op: keyed(torch._C._dispatch_dump(op)) for op in WATCHED_OPS}


class Server:
    """The request loop; one instance per process."""

    def __init__(self, sock: socket.socket, role: str = "candidate") -> None:
        self.sock, self.role = sock, role
        self.model: Any = None
        self.inputs: list[Any] = []
        self.args: list[Any] = []
        self.last: Any = None
        self.device = "cpu"
        self.where = Location("<candidate>", 1, 1)
        self.guards: dict[str, object] = {}
        self.dispatch: dict[str, str] = {}
        self.hooks: dict[str, int] = {}
        self.flush: Any = None
        self.sets: list[list[Any]] = []  # staged input sets of the timed calls
        self.seal_plans: list[list[Any]] = []  # per staged set, its seal.Plan list
        self.digest_room: Any = None  # zeroed (calls, 4 * DIGEST_SLOTS) float64 during a stream
        self.kept: dict[int, Any] = {}  # every output of the timed calls since the last staging, by set
        self.trace: list[list[Any]] = []  # per traced timed call: host stamps and CUDA events

    def reply(self, header: dict[str, Any], blobs: list[memoryview] | None = None) -> None:
        channel.send(self.sock, header, blobs or [])

    def serve(self) -> None:
        import torch
        from cudice.verifier.run import dynamic_checks as dyn

        # before the job: a warm spare's runner has its context ready (only the candidate is profiled)
        # both roles: a profiler session leaves CUPTI's callbacks on every later kernel launch of the
        # process (https://github.com/pytorch/pytorch/issues/144455); the candidate's runner is
        # profiled, so the reference's must carry the same per-launch cost for the difference of
        # their request times to be the difference of the two forwards
        warm_gpu(profiler=True)
        self.guards = dyn.snapshot_guarded()  # before any candidate code
        self.reply({"op": "ready", "torch": torch.__version__})
        while True:
            try:
                req, blobs = channel.recv(self.sock, MAX_REQUEST_BYTES)
            except channel.ChannelError:
                return
            op = req.get("op")
            try:
                handler = getattr(self, f"op_{op}", None)
                if handler is None:
                    self.reply({"ok": False, "error": f"unknown request {op!r}"})
                    continue
                if op == "exit":
                    return
                handler(req, blobs)
            except _Failure as f:
                self.reply(
                    {
                        "ok": False,
                        "verdict": f.verdict,
                        "diagnostics": [d.to_dict() for d in f.diagnostics],
                        "error": f.error,
                    }
                )
            except channel.ChannelError:
                return
            except Exception as exc:  # this runner's own code failed on what the candidate left: not a crash
                self.reply(
                    {
                        "ok": False,
                        "verdict": Verdict.RUNTIME_ERROR.value,
                        "diagnostics": [
                            Diagnostic(
                                Severity.ERROR,
                                f"the runner could not serve {op!r}: {type(exc).__name__}: {exc}",
                                "runtime.exception",
                                Stage.CORRECTNESS,
                                self.where,
                            ).to_dict()
                        ],
                        "error": traceback.format_exc(),
                    }
                )

    # -- requests -------------------------------------------------------------------------------------
    def op_exit(self, req: dict[str, Any], blobs: list[bytearray]) -> None:
        return None

    def op_load(self, req: dict[str, Any], blobs: list[bytearray]) -> None:
        import torch
        from cudice.verifier.run.judging import Stop, exec_module

        self.device = str(req["device"])
        path = str(req["path"])
        self.where = Location(path, int(req.get("line", 1)), 1)
        self._install_load_inline(path)
        self.dispatch = dispatcher_state()  # after cudice's own imports, before the candidate's code
        self.hooks = hook_state()
        try:
            mod = exec_module(str(req["module"]), str(req["source"]), path, Stage.LOAD)
        except Stop as stop:
            raise _Failure(stop.verdict.value, stop.diagnostics, stop.error) from None
        cls = getattr(mod, str(req["cls"]), None)
        if cls is None:
            raise _Failure(
                Verdict.RUNTIME_ERROR.value,
                [
                    Diagnostic(
                        Severity.ERROR,
                        f"Executing the file did not define {req['cls']}.",
                        "runtime.no_model_new",
                        Stage.LOAD,
                        self.where,
                    )
                ],
            )
        init = channel.decode(req["init"], blobs, "cpu")
        torch.manual_seed(int(req["seed"]))
        if self.device.startswith("cuda"):
            torch.cuda.manual_seed(int(req["seed"]))
        self.model = self._guard(lambda: cls(*init).to(self.device).eval(), Stage.LOAD)
        self.reply({"ok": True})

    def op_inputs(self, req: dict[str, Any], blobs: list[bytearray]) -> None:
        self.inputs = list(channel.decode(req["inputs"], blobs, self.device))
        self.args, self.last = [], None
        self.reply({"ok": True})

    def op_call(self, req: dict[str, Any], blobs: list[bytearray]) -> None:
        import torch
        from cudice.verifier.run import dynamic_checks as dyn

        before = dyn.snapshot_inputs(self.inputs)
        if self.device.startswith("cuda"):
            dyn.poison_allocator(int(req.get("poison_bytes", 1 << 20)), self.device)
        threads = dyn.count_threads()
        with torch.no_grad():
            out = self._guard(lambda: self.model(*self.inputs), Stage.CORRECTNESS)
        after_threads = dyn.count_threads()
        self._sync()
        found = dyn.check_inputs_unchanged(before, self.inputs, self.where)
        found += dyn.check_outputs_plain(out, out, self.where)
        found += dyn.check_no_aliasing(out, self.inputs, (), self.where)
        if req.get("count_threads"):
            found += dyn.check_thread_count(threads, after_threads, self.where)
        self.last = out
        self.reply({"ok": True, "diagnostics": [d.to_dict() for d in found]})

    def op_fetch(self, req: dict[str, Any], blobs: list[bytearray]) -> None:
        try:
            tree, out = channel.encode(self.last)
        except (channel.ChannelError, RuntimeError, TypeError) as exc:
            raise _Failure(
                Verdict.INCORRECT.value,
                [
                    Diagnostic(
                        Severity.ERROR,
                        f"the output cannot be read as plain tensors: {exc}",
                        "dynamic.output_not_plain_tensor",
                        Stage.CORRECTNESS,
                        self.where,
                    )
                ],
            ) from None
        self.reply({"ok": True, "outputs": tree}, out)

    def op_stage(self, req: dict[str, Any], blobs: list[bytearray]) -> None:
        from cudice.verifier.run import seal

        self.sets = [list(x) for x in channel.decode(req["sets"], blobs, self.device)]
        self.seal_plans = [seal.plan(s) for s in self.sets]  # worked out now, outside the clock
        self.kept = {}
        mib = int(req.get("flush_mib", 0))
        if (
            mib
            and self.device.startswith("cuda")
            and (self.flush is None or self.flush.numel() * 4 != mib << 20)
        ):
            import torch

            self.flush = torch.empty(mib * 1024 * 1024 // 4, dtype=torch.int32, device=self.device)
        self._sync()
        self.reply({"ok": True})

    def op_batch(self, req: dict[str, Any], blobs: list[bytearray]) -> None:
        if req.get("profile"):
            self._profiled(lambda: self._run_batch(req), str(req.get("stage", "timing")))
            return
        self.reply({"ok": True, "digests": self._run_batch(req)})

    def op_stream(self, req: dict[str, Any], blobs: list[bytearray]) -> None:
        """`count` timed calls, each a binary message answered by its digests (run/channel.py).

        The judge sends the next call only when the last one's digests are in, so calls never
        overlap; its clock runs from each call's message to its digests. Every output is kept
        (`kept`). A call that fails answers "failed", then the usual JSON failure reply follows."""
        cuda = self.device.startswith("cuda")
        flush = self.flush if cuda and int(req.get("flush_mib", 0)) else None
        spin = float(req.get("spin_s") or 0.0)
        trace = bool(req.get("trace"))
        # no collection pauses inside the calls: collect now, and not again until the stream ends
        gc.collect()
        gc.disable()
        count = int(req["count"])
        import torch

        # zeroed room for every call's digests, made before the calls (one launch fewer in each)
        self.digest_room = torch.zeros(count, 4 * DIGEST_SLOTS, dtype=torch.float64, device=self.device)
        try:
            self._stream_calls(count, flush, spin, trace)
        finally:
            gc.enable()
            self.digest_room = None

    def _stream_calls(self, count: int, flush: Any, spin: float, trace: bool) -> None:
        for call in range(count):
            if spin > 0:  # the next call comes within microseconds: wait awake, not asleep
                channel.poll_readable(self.sock, spin)
            index, key, seal_key = channel.recv_call(self.sock)
            stamps: list[Any] | None = [time.perf_counter()] if trace else None
            try:
                digest, out = self._timed_call(index, key, seal_key, flush, stamps, call)
                values = self._to_host([digest])[0]
            except BaseException:
                channel.send_digests(self.sock, None)
                raise
            self.kept[index] = out
            self.last = out
            if stamps is not None:
                stamps.append(time.perf_counter())
            channel.send_digests(self.sock, values)
            if stamps is not None:
                stamps.append(time.perf_counter())
                self.trace.append(stamps)

    def op_trace(self, req: dict[str, Any], blobs: list[bytearray]) -> None:
        """Medians (us) of where the traced timed calls spent their time, as this process saw it: a
        diagnostic for the benchmarks, never evidence (the candidate's process can say anything)."""
        import statistics

        names = (
            "unseal_host",
            "forward_host",
            "digest_launch",
            "wait_host",
            "reply",
            "unseal_gpu",
            "forward_gpu",
        )
        rows = []
        for s in self.trace:
            t0, t1, t2, t3, e0, e1, e2, t4, t5 = s
            rows.append(
                (
                    t1 - t0,
                    t2 - t1,
                    t3 - t2,
                    t4 - t3,
                    t5 - t4,
                    e0.elapsed_time(e1) / 1e3 if e0 is not None else 0.0,
                    e1.elapsed_time(e2) / 1e3 if e1 is not None else 0.0,
                )
            )
        self.trace = []
        self.reply(
            {
                "ok": True,
                "trace": {n: statistics.median(r[i] for r in rows) * 1e6 for i, n in enumerate(names)},
            }
            if rows
            else {"ok": True, "trace": {}}
        )

    def _timed_call(
        self,
        index: int,
        key: int,
        seal_key: int | None,
        flush: Any,
        stamps: list[Any] | None = None,
        room: int = -1,
    ) -> tuple[Any, Any]:
        """Unseal staged set `index`, evict L2 under the cold policy, forward, and the keyed digests
        of the outputs and then of the inputs (one changed in place no longer matches); no sync.
        `stamps` (tracing only) gets host times and CUDA events between the steps."""
        from cudice.verifier.run import seal, witness
        from cudice.verifier.run.dynamic_checks import flatten_outputs

        if not 0 <= index < len(self.sets):
            raise ValueError(f"timed call on set {index}, but {len(self.sets)} are staged")
        args = self.sets[index]
        import torch

        events = None
        if stamps is not None and self.device.startswith("cuda"):
            events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]  # type: ignore[no-untyped-call]
            events[0].record()
        with torch.no_grad():
            if seal_key is not None and seal_key != channel.NO_SEAL:
                seal.toggle_planned(self.seal_plans[index], int(seal_key))  # usable only now, in the clock
            if flush is not None:
                flush.fill_(1)  # evict L2 (cold policy)
            if stamps is not None:
                stamps.append(time.perf_counter())
                if events is not None:
                    events[1].record()
            out = self._guard(lambda: self.model(*args), Stage.TIMING)
            if stamps is not None:
                if events is not None:
                    events[2].record()
                stamps.append(time.perf_counter())
            into = self.digest_room[room] if room >= 0 and self.digest_room is not None else None
            digest = witness.digest(flatten_outputs(out) + list(args), int(key), self.device, into)
            if stamps is not None:
                stamps.append(time.perf_counter())
                stamps += events if events is not None else [None, None, None]
            return digest, out

    def _run_batch(self, req: dict[str, Any]) -> list[list[float]]:
        cuda = self.device.startswith("cuda")
        flush = self.flush if cuda and int(req.get("flush_mib", 0)) else None
        seals = req.get("seals") or [None] * len(req["sets"])
        digests, last = [], self.last
        for index, key, seal_key in zip(req["sets"], req["keys"], seals, strict=True):
            digest, last = self._timed_call(int(index), int(key), seal_key, flush)
            digests.append(digest)
        self.last = last
        return self._to_host(digests)

    def _to_host(self, digests: list[Any]) -> list[list[float]]:
        """The digests on the host: the one synchronisation of a call or batch."""
        import torch

        try:
            if len(digests) == 1:  # a streamed call: no stacking copy
                return [[float(v) for v in digests[0].cpu().tolist()]]
            values = torch.stack(digests).cpu() if digests else torch.zeros(0, 1)
        except Exception as exc:  # a sticky CUDA error from the kernel
            raise _Failure(
                Verdict.RUNTIME_ERROR.value,
                [
                    Diagnostic(
                        Severity.ERROR,
                        f"CUDA error in a timed call: {exc}".strip(),
                        "runtime.cuda_error",
                        Stage.TIMING,
                        self.where,
                    )
                ],
                str(exc),
            ) from None
        return [[float(v) for v in row] for row in values.tolist()]

    def op_kept(self, req: dict[str, Any], blobs: list[bytearray]) -> None:
        index = int(req["index"])
        if index not in self.kept:
            raise _Failure(
                Verdict.RUNTIME_ERROR.value,
                [
                    Diagnostic(
                        Severity.ERROR,
                        f"the output of timed call {index} was not kept",
                        "runtime.exception",
                        Stage.TIMING,
                        self.where,
                    )
                ],
            )
        self.last = self.kept[index]
        self.op_fetch(req, blobs)

    def op_profile(self, req: dict[str, Any], blobs: list[bytearray]) -> None:
        def one_call() -> None:
            self.last = self._guard(lambda: self.model(*self.inputs), Stage.CORRECTNESS)

        self._profiled(one_call, "correctness")

    def _profiled(self, body: Any, stage: str) -> None:
        """Run `body` under the profiler and reply with the kernels that ran: name, device µs, stream."""
        import torch

        if not self.device.startswith("cuda"):
            body()
            self.reply({"ok": True, "kernels": [], "marker_stream": -1, "supported": False})
            return
        from torch.profiler import ProfilerActivity, profile

        marker = torch.zeros(1, device=self.device)
        try:
            with torch.no_grad(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                marker.fill_(
                    1.0
                )  # a (glue) kernel on the current stream: its stream id is the one forward uses
                body()
                torch.cuda.synchronize()
            events = list(prof.events())
        except _Failure:
            raise
        except Exception as exc:  # no CUPTI here (permissions, driver): the judge decides what that means
            self.reply(
                {
                    "ok": True,
                    "kernels": [],
                    "marker_stream": -1,
                    "supported": False,
                    "error": f"{type(exc).__name__}: {exc}",
                }
            )
            return
        kernels: list[list[object]] = []
        marker_stream = -1
        for evt in events:
            if not str(getattr(evt, "device_type", "")).endswith("CUDA") or not evt.name:
                continue
            if evt.name == "cudice_witness":  # the judge's digest, not the candidate's work
                continue
            us = float(getattr(evt, "device_time", None) or getattr(evt, "cuda_time", 0.0) or 0.0)
            rid = getattr(evt, "device_resource_id", None)
            stream = int(rid) if isinstance(rid, int) else -1  # CUPTI's stream id (0 is a valid one)
            if marker_stream == -1 and "fill" in evt.name.lower() and not kernels:
                marker_stream = stream
                continue
            kernels.append([evt.name, us, stream])
        self.reply(
            {
                "ok": True,
                "kernels": kernels,
                "marker_stream": marker_stream,
                "supported": True,
                "stage": stage,
            }
        )

    def op_guards(self, req: dict[str, Any], blobs: list[bytearray]) -> None:
        from cudice.verifier.run import dynamic_checks as dyn

        found = dyn.check_guarded_intact(self.guards, self.where)
        now = dispatcher_state()
        changed = sorted(op for op, dump in self.dispatch.items() if now.get(op) != dump)
        if changed:
            found.append(
                Diagnostic(
                    Severity.ERROR,
                    f"the candidate re-registered {', '.join(changed)} in the "
                    "dispatcher (torch.library / TORCH_LIBRARY_IMPL): overriding the ops a check uses "
                    "fakes the check.",
                    "dynamic.dispatcher_override",
                    Stage.CORRECTNESS,
                    self.where,
                )
            )
        hooks = hook_state()
        added = sorted(k for k, n in hooks.items() if n > self.hooks.get(k, 0))
        if added:
            found.append(
                Diagnostic(
                    Severity.ERROR,
                    f"the candidate installed process-wide hooks ({', '.join(added)}): "
                    "a global forward hook or a torch function/dispatch mode can rewrite any model's "
                    "output.",
                    "dynamic.global_hook",
                    Stage.CORRECTNESS,
                    self.where,
                )
            )
        self.reply({"ok": True, "diagnostics": [d.to_dict() for d in found]})

    # -- helpers --------------------------------------------------------------------------------------
    def _guard(self, fn: Any, stage: Stage) -> Any:
        from cudice.verifier.run.judging import Stop, call_or_stop

        try:
            return call_or_stop(fn, stage, self.where)
        except Stop as stop:
            raise _Failure(stop.verdict.value, stop.diagnostics, stop.error) from None

    def _sync(self) -> None:
        import torch

        if not self.device.startswith("cuda"):
            return
        try:
            torch.cuda.synchronize()
        except Exception as exc:  # a sticky CUDA error (illegal address...) poisons this process
            raise _Failure(
                Verdict.RUNTIME_ERROR.value,
                [
                    Diagnostic(
                        Severity.ERROR,
                        f"CUDA error after the kernel: {exc}".strip(),
                        "runtime.cuda_error",
                        Stage.CORRECTNESS,
                        self.where,
                    )
                ],
                str(exc),
            ) from None

    def _install_load_inline(self, path: str) -> None:
        """`load_inline` asks the judge to build (the shared cache is read-only here) and loads the result."""
        from cudice.verifier.run.judging import install_load_inline, load_extension

        def build(name: str, cpp_sources: Any, cuda_sources: Any, functions: Any) -> types.ModuleType:
            def texts(v: Any) -> list[str]:
                return [v] if isinstance(v, str) else [str(x) for x in (v or [])]

            funcs = (
                [functions]
                if isinstance(functions, str)
                # one name, as torch accepts it
                else (functions if isinstance(functions, (list, tuple, type(None))) else list(functions))
            )
            request: dict[str, Any] = {
                "op": "build",
                "name": str(name),
                "cpp": texts(cpp_sources),
                "cuda": texts(cuda_sources),
                "functions": funcs,
            }
            while True:
                channel.send(self.sock, request)
                rep, _ = channel.recv(self.sock, 1 << 20)
                if not rep.get("ok"):
                    raise _Failure(
                        Verdict.COMPILE_ERROR.value,
                        [Diagnostic.from_dict(d) for d in rep.get("diagnostics", [])],
                        str(rep.get("error", "")),
                    )
                try:  # opens the library and runs its PyInit
                    mod = load_extension(name, str(rep["library"]))
                except ImportError:
                    if not rep.get("cabi") or request.get("pybind"):
                        raise
                    request["pybind"] = (
                        True  # the binding without pybind11 did not load: pybind11's, as torch builds it
                    )
                    continue
                return mod

        install_load_inline(build)


class _Failure(Exception):
    """Ends a request with a verdict-bearing error reply (the process keeps serving)."""

    def __init__(self, verdict: str, diagnostics: list[Diagnostic], error: str | None = None) -> None:
        super().__init__(verdict)
        self.verdict, self.diagnostics, self.error = verdict, diagnostics, error


def main(argv: list[str]) -> int:
    fd = int(argv[argv.index("--fd") + 1])
    role = argv[argv.index("--role") + 1] if "--role" in argv else "candidate"
    t0 = time.perf_counter()
    sock = socket.socket(fileno=fd)
    try:
        Server(sock, role).serve()
    except BaseException:  # report what killed the loop on stderr (the judge keeps the tail)
        traceback.print_exc()
        return 1
    finally:
        print(f"runner served for {time.perf_counter() - t0:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
