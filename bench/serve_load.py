"""Serving load: continuous batching (paged KV cache) vs one request at a time, same run, same prompts.

Role: measure what `cudice.model.batching.ContinuousBatcher` gains when many editors ask for
generations at once, in two transports:

- in process (the default, `--transport inprocess`): the engine alone, no server;
- over real sockets (`--transport tcp`): simulated editors against one `cudice-lsp --tcp --multi`
  server process, the team server's whole path (LSP, sessions, the shared model worker's pipe).

In process: for each concurrency level C (default 1, 8, 32) C client threads run a closed loop
(submit, wait for the answer, submit the next) over the same list of
`C x --requests-per-client` prompts, twice:

- `serial`: the existing path, one request at a time behind a lock (what the single-editor
  server's model worker does, and the team server's with `CUDICE_TEAM_BATCHING=0`):
  `BlockDiffusionSampler.generate([prompt])` over `HFRunner` (CPU default) or the static fast
  path (`--baseline static`, the GPU default; no torch.compile);
- `batched`: the same clients submitting to one `ContinuousBatcher` (requests join at block
  boundaries, leave when done). Its decode steps take the fast paged decode (`PagedRunner.decode`:
  Triton paged attention, torch.compile'd layers, one CUDA graph per batch class, all compiled and
  captured by `warm_up` before the first level) on CUDA, as the team server's worker does, and the
  eager ragged forward on CPU (`--fast-decode on|off` overrides); the log says which path ran how
  many steps after every batched level (`decode_path` in the JSON).

Reported per level and mode: aggregate generated tokens/s over the wall time and its ratio to the
serial run of the same level (`xN.NN vs serial`); per-request latency p50/p95 (submit -> answer,
queueing included); peak memory: on CUDA the device's peak allocated bytes over the level, on CPU
the KV bytes the paged pool held at its peak against what a static cache of the same rows would
hold (rows x the longest request); and whether every batched answer equals its serial answer
token for token (greedy; float32 on CPU is exact by contract, bf16 on a GPU may differ on
near-tied logits of random weights).

Over TCP: the bench writes a checkpoint in DICE's layout with this bench's random weights of
`--shape` and the tiny checkpoint's tokenizer (`build_checkpoint`; or `--checkpoint DIR`), starts
`python -m cudice.server --tcp --multi` (the `cudice-lsp` entry point) on a free port with
`CUDICE_TEAM_BATCHING=0` (`serial`: the shared worker runs one job at a time, on the fast path
where `cudice.model.fast` is auto on a GPU), runs every level against it and stops it, then does
the same with a batched server (`CUDICE_TEAM_MAX_BATCH=--max-batch`, a queue of the largest level,
a KV pool that holds --max-batch of the longest request). A warm-up editor first waits for the
model's load and generates once (`ready_s`, `warmup_s`). At each level C editors connect, each
its own session: `initialize` with its own workspace and settings, wait for the shared model,
open its own copy of examples/relu.py (ending with a comment naming it), ask for the code actions
inside `class Model` and run the *Generate CUDA kernel* action's command
(`cudice.generateKernel`) `--requests-per-client` times in a closed loop, answering the server's
"overwrite?" question as a user would; then `shutdown`, `exit`. Editor i asks for
`--max-new-tokens + i` tokens (answers of random weights to similar prompts mostly coincide;
their lengths do not). Reported per level and server: generated tokens/s (the sum of the
command's `num_tokens` over the level's wall time; answered generations/s beside it), latency
p50/p95 over every request (command sent -> result) and the worst editor's own p95, peak RSS of
the server and every process it started (sampled from /proc every 0.25 s), on CUDA the device's
used memory above the bench's start (nvidia-smi; the model worker reports none itself), and the
batched/serial tok/s ratio per level. Isolation is checked, not assumed: every document, progress
token and question an editor receives must be its own, the file its answer was written to is in
its own workspace, and each answer is compared with the answer that editor got from the serial
server: equal (`same_as_serial`), another editor's (`foreign_answers`: a mix-up, the run fails),
or neither (`other_answers`: bf16 near-ties). The written files of random weights coincide often
(8 distinct of 32 at 1,000 tokens), so an answer's token count decides where the text cannot: an
answer with its own editor's count (`own_length`), which no other editor asked for, came from that
editor's request even where its file equals another editor's serial one (counted in
`other_answers`); a count that is another editor's is a mix-up. Exit 1 when an editor saw anything
not its own, a generation failed, or a server did not exit 0. Every process the bench starts dies
with it: each server gets its own process group and an environment marker (`FAMILY_ENV`) its
children inherit, it is stopped with its own shutdown (SIGTERM ends a team server), then the group
and any marked process left are killed; a SIGTERM to the bench unwinds through the same path, and
the server gets SIGTERM when the bench dies (PR_SET_PDEATHSIG).

Model: random weights, nothing downloaded. `--shape tiny` (cudice.model.tiny's dims, the CPU
default), `demo` (the bundled demo model's dims) or `dice-1.7b` (Qwen3-1.7B / DICE-1.7B dims,
bf16 on a GPU). In process, prompts are random ids with lengths drawn from [--prompt-min,
--prompt-len] (seeded; the default minimum is a quarter of the maximum); over TCP the prompt is
the editor's (the KernelBench one-shot prompt around examples/relu.py: about 1,200 tokens of the
tiny tokenizer). Random weights are never confident, so each denoise step reveals about one token
and answers run to their token budget.

The static baseline keeps one cache (and its CUDA graphs) per size class of 256 slots and
recaptures when the size class changes, so on a GPU pick prompt lengths that stay in one class
(the GPU line below: 400..600 + 128 new -> 768 slots; over TCP, 1,206 + 96..127 new -> 1,536
slots), or the serial figures pay recaptures.

Usage:
  python bench/serve_load.py                                   # CPU, tiny shape
  python bench/serve_load.py --shape dice-1.7b --prompt-min 400 --prompt-len 600 \
      --max-new-tokens 128                                     # one GPU
  python bench/serve_load.py --transport tcp --concurrency 1,4,8    # CPU, real sockets
Writes `$OUT/serve_load.json` when OUT is set (or `--json PATH`).

Not covered: editors on other machines (the editors are coroutines of this process on
127.0.0.1, so the network is loopback and the bench's own CPU use competes with the server's on
a small machine); real models (random weights decode about one token per step, and their answers
are not kernels, so no verification runs after a generation); the team server's verification
and quick-check load beside generations; a fast path for the batched prefill (it stays on the
eager ragged forward: pages gathered into a padded copy, SDPA); over TCP, which decode path the
server's worker ran (it decides by itself: the fast decode on CUDA); on CUDA, per-process GPU
memory (the device's figure is taken, so nothing else may use the GPU during a run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from cudice.model.batching import ContinuousBatcher
from cudice.model.config import SamplerConfig
from cudice.model.runner import HFRunner, Runner
from cudice.model.sampler import BlockDiffusionSampler
from cudice.model.tiny import TINY_DIMS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from random_qwen import DICE_1P7B, random_qwen3

_TINY = {
    k: v for k, v in TINY_DIMS.items() if k not in ("max_position_embeddings", "rope_theta", "rms_norm_eps")
}
SHAPES: dict[str, dict[str, Any]] = {
    "tiny": {"vocab_size": 1024, **_TINY},
    # the bundled demo model's dims (docs/model.md, "The demo model")
    "demo": {
        "vocab_size": 2048,
        "hidden_size": 256,
        "intermediate_size": 768,
        "num_hidden_layers": 8,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "tie_word_embeddings": True,
    },
    "dice-1.7b": DICE_1P7B,
}
BLOCK = 4


def log(*args: Any) -> None:
    print(*args, flush=True)


def random_model(shape: str, device: torch.device, dtype: torch.dtype) -> Any:
    """A Qwen3 of `shape` with seeded random weights (unit-ish activations), frozen."""
    torch.manual_seed(0)
    return random_qwen3(SHAPES[shape], device, dtype, std=0.02 if shape == "dice-1.7b" else 0.08)


@dataclass
class Level:
    mode: str
    concurrency: int
    requests: int
    tokens: int
    seconds: float
    tok_s: float
    p50_s: float
    p95_s: float
    peak_bytes: int  # CUDA: device peak allocated; CPU: peak KV bytes held (paged pool / static layout)
    static_kv_bytes: int = 0  # batched on CPU: a static cache of the same peak rows x longest request
    ratio: float = 0.0  # tok/s vs the serial run of the same level
    match: str = ""


def percentile(xs: Sequence[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def drive(
    prompts: Sequence[Sequence[int]], clients: int, ask: Callable[[Sequence[int]], tuple[int, ...]]
) -> tuple[list[tuple[int, ...]], list[float], float]:
    """`clients` threads in a closed loop over `prompts`: -> (answers in prompt order, latencies, wall)."""
    answers: list[tuple[int, ...]] = [() for _ in prompts]
    latency: list[float] = [0.0 for _ in prompts]
    nxt = iter(range(len(prompts)))
    take = threading.Lock()
    errors: list[BaseException] = []

    def client() -> None:
        while True:
            with take:
                i = next(nxt, None)
            if i is None:
                return
            t0 = time.perf_counter()
            try:
                answers[i] = ask(prompts[i])
            except BaseException as exc:  # reported after the join
                errors.append(exc)
                return
            latency[i] = time.perf_counter() - t0

    start = time.perf_counter()
    threads = [threading.Thread(target=client, name=f"client-{c}") for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return answers, latency, time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument(
        "--shape", choices=sorted(SHAPES), default=None, help="default: dice-1.7b on CUDA, else tiny"
    )
    ap.add_argument("--device", default="auto")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=None, help="longest prompt (default 512 GPU, 64 CPU)")
    ap.add_argument("--prompt-min", type=int, default=None, help="shortest prompt (default prompt_len/4)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default 128 GPU, 32 CPU")
    ap.add_argument("--baseline", choices=("hf", "static"), default=None, help="default: static on CUDA")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument(
        "--fast-decode",
        choices=("auto", "on", "off"),
        default="auto",
        help="in process: the batched engine's fast paged decode (auto: on CUDA, with compile and graphs)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--transport",
        choices=("inprocess", "tcp"),
        default="inprocess",
        help="tcp: editors over real sockets against `cudice-lsp --tcp --multi` (module docstring)",
    )
    ap.add_argument(
        "--workdir", default=None, help="tcp: where the checkpoint and workspaces go (default: a temp dir)"
    )
    ap.add_argument("--checkpoint", default=None, help="tcp: use this checkpoint instead of building one")
    ap.add_argument(
        "--fast", choices=("auto", "off"), default="auto", help="tcp: the serial server's cudice.model.fast"
    )
    args = ap.parse_args(argv)
    if args.transport == "tcp":
        return tcp_main(args)
    return inprocess_main(args)


def _device_defaults(args: argparse.Namespace) -> tuple[torch.device, bool, str, torch.dtype, int]:
    """(device, on a GPU, shape, dtype, new tokens per request): the arguments, or both modes'
    defaults for where the run is (DICE-1.7B in bf16 and 128 tokens on a GPU; tiny, fp32, 32)."""
    device = torch.device(
        ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    )
    on_gpu = device.type == "cuda"
    shape = args.shape or ("dice-1.7b" if on_gpu else "tiny")
    dtype = torch.bfloat16 if on_gpu else torch.float32
    return device, on_gpu, shape, dtype, args.max_new_tokens or (128 if on_gpu else 32)


def inprocess_main(args: argparse.Namespace) -> int:
    device, on_gpu, shape, dtype, new_tokens = _device_defaults(args)
    prompt_len = args.prompt_len or (512 if on_gpu else 64)
    prompt_min = args.prompt_min or max(1, prompt_len // 4)
    baseline = args.baseline or ("static" if on_gpu else "hf")
    levels = [int(c) for c in args.concurrency.split(",")]

    model = random_model(shape, device, dtype)
    vocab = model.config.vocab_size
    mask_id, eos_id = vocab - 1, vocab - 2
    runner: Runner
    if baseline == "static":
        from cudice.model.fastpath import StaticRunner

        runner = StaticRunner(model, use_graphs=on_gpu, compile=False)
    else:
        runner = HFRunner(model)
    sampler = BlockDiffusionSampler(runner, mask_id, eos_id, [eos_id], lambda ids: " ".join(map(str, ids)))
    config = SamplerConfig(max_new_tokens=new_tokens, block_length=BLOCK)
    rng = random.Random(args.seed)
    most = max(levels) * args.requests_per_client
    pool = [
        [rng.randrange(0, vocab - 3) for _ in range(rng.randint(prompt_min, prompt_len))] for _ in range(most)
    ]
    longest = max(len(p) for p in pool) + new_tokens + 2 * BLOCK
    page = args.page_size
    pages = args.max_batch * -(-longest // page)  # room for max_batch of the longest: admission never waits
    fast_decode = {"auto": on_gpu, "on": True, "off": False}[args.fast_decode]
    batcher = ContinuousBatcher(
        model,
        sampler,
        BLOCK,
        num_pages=pages,
        page_size=page,
        max_batch=args.max_batch,
        max_queue=4 * most,
        fast_decode=fast_decode,
        compile=fast_decode and on_gpu,  # as the team server's worker: compiled and captured on CUDA
        use_graphs=True,
    )
    batcher.warm_up().start()
    log(
        f"serve_load: shape {shape} on {device} ({dtype}), prompts {prompt_min}..{prompt_len} tokens, "
        f"{new_tokens} new, block {BLOCK}, serial baseline {type(runner).__name__}, "
        f"paged pool {pages} pages x {page} tokens ({pages * batcher.cache.page_bytes / 2**20:.1f} MiB); "
        f"batched decode: {batcher.runner.describe() if fast_decode else 'eager ragged forward'}, "
        f"warm-up {batcher.warmup_seconds:.1f} s ({batcher.warmup_variants} batch-class variants)"
    )

    serial_lock = threading.Lock()

    def ask_serial(p: Sequence[int]) -> tuple[int, ...]:
        with serial_lock:
            return sampler.generate([p], config, BLOCK).rows[0].tokens

    def ask_batched(p: Sequence[int]) -> tuple[int, ...]:
        return batcher.submit(p, config).result(timeout=3600).row.tokens

    ask_serial(pool[0])  # warm-up both paths (first-call allocations, cuBLAS handles)
    ask_batched(pool[0])
    results: list[Level] = []
    for c in levels:
        prompts = pool[: c * args.requests_per_client]
        serial_answers: list[tuple[int, ...]] = []
        for mode, ask in (("serial", ask_serial), ("batched", ask_batched)):
            if on_gpu:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            batcher.peak_pages = batcher.peak_rows = 0
            answers, latency, wall = drive(prompts, c, ask)
            tokens = sum(len(a) for a in answers)
            static_kv = 0
            if on_gpu:
                peak = torch.cuda.max_memory_allocated()
            elif mode == "batched":
                peak = batcher.peak_pages * batcher.cache.page_bytes
                per_token = batcher.cache.page_bytes // page
                static_kv = (
                    batcher.peak_rows * (max(len(p) for p in prompts) + new_tokens + BLOCK) * per_token
                )
            else:  # one request at a time: its own KV, the longest request's
                peak = (max(len(p) for p in prompts) + new_tokens + BLOCK) * (
                    batcher.cache.page_bytes // page
                )
            level = Level(
                mode,
                c,
                len(prompts),
                tokens,
                wall,
                tokens / wall,
                statistics.median(latency),
                percentile(latency, 0.95),
                peak,
                static_kv,
            )
            if mode == "serial":
                serial_answers, base = answers, level.tok_s
            else:
                same = sum(a == b for a, b in zip(answers, serial_answers, strict=True))
                level.match = (
                    "MATCH" if same == len(answers) else f"MISMATCH {len(answers) - same}/{len(answers)}"
                )
            level.ratio = level.tok_s / base
            results.append(level)
            mem = f"peak {peak / 2**20:.2f} MiB" + (
                f" (static layout {static_kv / 2**20:.2f} MiB)" if static_kv else ""
            )
            log(
                f"C={c:3d} {mode:8s} {len(prompts):3d} requests {tokens:6d} tokens {wall:7.2f} s "
                f"{level.tok_s:9.1f} tok/s x{level.ratio:.2f} vs serial  p50 {level.p50_s:.3f} s "
                f"p95 {level.p95_s:.3f} s  {mem}  {level.match}"
            )
            if mode == "batched":
                log(f"C={c:3d} batched decode so far: {batcher.decode_path}")
    batcher.close()
    out = {
        "shape": shape,
        "device": str(device),
        "dtype": str(dtype),
        "prompt_len": prompt_len,
        "prompt_min": prompt_min,
        "max_new_tokens": new_tokens,
        "baseline": type(runner).__name__,
        "decode_path": batcher.decode_path,
        "warmup_s": batcher.warmup_seconds,
        "levels": [asdict(r) for r in results],
    }
    log("RESULT " + json.dumps({f"{r.mode}_c{r.concurrency}_ratio": round(r.ratio, 2) for r in results}))
    path = args.json or (
        os.path.join(os.environ["OUT"], "serve_load.json") if os.environ.get("OUT") else None
    )
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=2)
    return 0


# --- real sockets (--transport tcp) -----------------------------------------------------------

REPO = Path(__file__).resolve().parent.parent
GENERATE = "cudice.generateKernel"
WAIT_S = 900.0  # bound on any one event (a DICE-1.7B load; a request behind 31 others on a CPU)
FAMILY_ENV = "CUDICE_SERVE_LOAD_FAMILY"  # inherited by every process the server starts


def build_checkpoint(shape: str, directory: Path, device: torch.device, dtype: torch.dtype) -> Path:
    """A checkpoint in DICE's layout (SDAR config.json, `model.safetensors`, generation_config.json)
    with this bench's random weights of `shape`, and the tiny checkpoint's BPE tokenizer (512 tokens,
    ChatML specials, `<|MASK|>`; ids beyond it decode to nothing): what the server's loader loads."""
    from cudice.model.tiny import (
        SPECIAL_TOKENS,
        TINY_BLOCK_SIZE,
        build_tokenizer,
        save_checkpoint,
        tiny_config_dict,
    )

    assert TINY_BLOCK_SIZE == BLOCK
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(directory)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    dims = SHAPES[shape]
    config = tiny_config_dict(int(dims["vocab_size"]), ids, sdar_layout=True)
    config.update(dims)
    config.update(
        max_window_layers=dims["num_hidden_layers"],
        max_position_embeddings=32768,
        torch_dtype=str(dtype).removeprefix("torch."),
    )
    model = random_model(shape, device, dtype).cpu()  # drawn on the device (fast), saved from host memory
    save_checkpoint(directory, config, model, ids)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return directory


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # in the server's child, before exec: SIGTERM when the bench dies
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of `pid`, None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else (int(fields[1]), int(fields[19]))


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class ServerProcess:
    """One `cudice-lsp --tcp --multi` process (`python -m cudice.server`, the same entry point) in
    its own process group, with `FAMILY_ENV` set so every process it starts is found again, also one
    that left the group. `stop` is the server's own shutdown (SIGTERM ends a team server, exit 0),
    then SIGKILL for the group and for any process of the family still alive. The server gets
    SIGTERM too when the bench process dies (PR_SET_PDEATHSIG)."""

    def __init__(self, label: str, env_extra: dict[str, str], logfile: Path) -> None:
        self.label = label
        self.family = f"{label}-{os.getpid()}-{uuid.uuid4().hex}"
        self.env = {**os.environ, **env_extra, FAMILY_ENV: self.family}
        self.logfile = logfile
        self.tail: deque[str] = deque(maxlen=60)
        self.listening = threading.Event()
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.known: dict[int, int] = {}  # pid -> start time: the family seen so far
        self.strangers: dict[int, int] = {}  # pid -> start time: processes seen not to be of it
        self._family_marker = f"{FAMILY_ENV}={self.family}".encode()

    def start(self) -> None:
        for _ in range(3):  # a port found free may be taken before the server binds it
            self.port = _free_port()
            argv = [sys.executable, "-m", "cudice.server", "--tcp", "--multi", "--host", "127.0.0.1"]
            argv += ["--port", str(self.port), "--log-level", "info"]
            self.listening.clear()
            self.proc = subprocess.Popen(
                argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
            threading.Thread(target=self._drain, args=(self.proc,), daemon=True).start()
            deadline = time.monotonic() + WAIT_S
            while not self.listening.wait(0.2):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    break
            if self.listening.is_set():
                return
            self.stop()
            if "cannot listen" not in "".join(self.tail):
                break
        raise RuntimeError(f"the {self.label} server did not start:\n" + "".join(self.tail))

    def _drain(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        with open(self.logfile, "ab") as f:
            for raw in proc.stderr:
                f.write(raw)
                line = raw.decode(errors="replace")
                self.tail.append(line)
                if "listening on" in line:
                    self.listening.set()

    def family_pids(self) -> list[int]:
        """The server and every live process it started (its descendants, and any process whose
        environment carries this server's family marker)."""
        assert self.proc is not None
        parents: dict[int, int] = {}
        starts: dict[int, int] = {}
        for name in os.listdir("/proc"):
            if name.isdigit() and (st := _stat(int(name))) is not None:
                parents[int(name)], starts[int(name)] = st
        family = {self.proc.pid} if self.proc.pid in parents else set()
        changed = True
        while changed:  # descendants by parent links
            changed = False
            for pid, ppid in parents.items():
                if ppid in family and pid not in family:
                    family.add(pid)
                    changed = True
        for pid in parents.keys() - family:  # re-parented ones still carry the marker
            if self.known.get(pid) == starts[pid]:
                family.add(pid)
            elif self.strangers.get(pid) != starts[pid]:
                try:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        ours = self._family_marker in f.read()
                except OSError:
                    ours = False
                if ours:
                    family.add(pid)
                else:
                    self.strangers[pid] = starts[pid]
        for pid in family:
            self.known[pid] = starts[pid]
        return sorted(family)

    def rss(self) -> int:
        return sum(_rss(pid) for pid in self.family_pids())

    def stop(self) -> int | None:
        """The server's own shutdown, then SIGKILL for whatever of its family is left; its exit code
        (None when it had to be killed)."""
        proc = self.proc
        if proc is None:
            return None
        code: int | None = None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(60)
            except subprocess.TimeoutExpired:
                log(f"serve_load: the {self.label} server did not stop within 60 s of SIGTERM; killing it")
        else:
            code = proc.returncode
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # its group: the server, workers that stayed in it
        proc.wait()
        left = [pid for pid, start in self.known.items() if (_stat(pid) or (0, -1))[1] == start]
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if left:
            log(f"serve_load: killed {len(left)} process(es) the {self.label} server left behind: {left}")
        return code


class MemoryWatch:
    """Samples the server family's summed RSS (every 0.25 s) and, with `gpu`, the device's used
    memory from nvidia-smi (every second; the driver's figure for the whole device, the figure at
    the watch's start subtracted); `reset` starts a new peak."""

    def __init__(self, server: ServerProcess, gpu: bool) -> None:
        self.server = server
        self.gpu = gpu and shutil.which("nvidia-smi") is not None
        self.gpu_base = self._gpu_used() if self.gpu else 0
        self.peak_rss = self.peak_gpu = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-watch", daemon=True)

    def _gpu_used(self) -> int:
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
            return int(out.split()[0]) * 2**20
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            return 0

    def start(self) -> MemoryWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(0.25):
            self.peak_rss = max(self.peak_rss, self.server.rss())
            if self.gpu and n % 4 == 0:
                self.peak_gpu = max(self.peak_gpu, self._gpu_used() - self.gpu_base)
            n += 1

    def reset(self) -> None:
        self.peak_rss = self.server.rss()
        self.peak_gpu = max(0, self._gpu_used() - self.gpu_base) if self.gpu else 0

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


def _plain(obj: Any) -> Any:
    """pygls hands untyped JSON over as namedtuples: back to dicts and lists."""
    if hasattr(obj, "_asdict"):
        return {k: _plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


class Editor:
    """One simulated editor: its own TCP connection and session, its own workspace holding a copy of
    examples/relu.py that ends with a comment naming the editor (so every editor's prompt differs),
    and its own token budget (`budget`; answers of random weights to similar prompts mostly
    coincide, their lengths do not). It generates with the command of the *Generate CUDA kernel* code action
    the server offers inside `class Model`, as an editor does, answers the overwrite question with
    "Overwrite", and records everything the server sends it that names a document or a progress
    token, to check that none of it is another editor's."""

    def __init__(self, name: str, root: Path, budget: int) -> None:
        self.name = name
        self.root = root
        self.budget = budget  # its sampler.maxNewTokens
        root.mkdir(parents=True)
        self.ref = root / "relu.py"
        self.ref.write_text((REPO / "examples" / "relu.py").read_text() + f"\n# session {name}\n")
        self.out = root / "relu_cuda.py"
        self.statuses: list[dict[str, Any]] = []
        self.created: set[str] = set()  # progress tokens the server created with this editor
        self.foreign: list[str] = []  # anything seen that is not this editor's
        self.command: Any = None
        self.changed = asyncio.Event()

    def _own(self, what: str, uri: Any) -> None:
        if isinstance(uri, str) and not uri.startswith(self.root.as_uri() + "/"):
            self.foreign.append(f"{what} {uri}")

    def _client(self) -> Any:
        from lsprotocol import types as lsp
        from pygls.lsp.client import LanguageClient

        client = LanguageClient("cudice-serve-load", "0")
        converter = client.protocol._converter

        def code_action_hook(obj: Any, _: type) -> Any:  # as editors tell them apart
            kind = lsp.Command if isinstance(obj.get("command"), str) else lsp.CodeAction
            return converter.structure(obj, kind)

        converter.register_structure_hook(lsp.Command | lsp.CodeAction, code_action_hook)

        @client.feature(lsp.WINDOW_WORK_DONE_PROGRESS_CREATE)
        def create(params: lsp.WorkDoneProgressCreateParams) -> None:
            self.created.add(str(params.token))

        @client.feature(lsp.PROGRESS)
        def progress(params: Any) -> None:
            token = str(getattr(params, "token", ""))
            if token not in self.created:
                self.foreign.append(f"progress token {token}")

        @client.feature(lsp.WINDOW_SHOW_MESSAGE_REQUEST)
        def ask(params: lsp.ShowMessageRequestParams) -> lsp.MessageActionItem:
            if self.out.name not in params.message:
                self.foreign.append(f"question {params.message!r}")
            return lsp.MessageActionItem(title="Overwrite")

        @client.feature(lsp.WINDOW_SHOW_DOCUMENT)
        def show(params: lsp.ShowDocumentParams) -> lsp.ShowDocumentResult:
            self._own("showDocument", params.uri)
            return lsp.ShowDocumentResult(success=True)

        @client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def diagnostics(params: lsp.PublishDiagnosticsParams) -> None:
            self._own("diagnostics", params.uri)

        @client.feature(lsp.WINDOW_SHOW_MESSAGE)
        def message(params: lsp.ShowMessageParams) -> None:
            return None

        @client.feature(lsp.WINDOW_LOG_MESSAGE)
        def log_message(params: lsp.LogMessageParams) -> None:
            return None

        @client.feature(lsp.WORKSPACE_CODE_LENS_REFRESH)
        def refresh(params: None) -> None:
            return None

        @client.feature("cudice/status")
        def status(params: Any) -> None:
            got = _plain(params)
            self._own("status", got.get("uri"))
            self.statuses.append(got)
            self.changed.set()

        return client

    async def open(self, port: int, options: dict[str, Any]) -> None:
        """Connect, initialize, wait for the shared model, open the reference, fetch the action."""
        from lsprotocol import types as lsp

        self.client = client = self._client()
        await client.start_tcp("127.0.0.1", port)
        caps = lsp.ClientCapabilities(
            window=lsp.WindowClientCapabilities(
                work_done_progress=True, show_document=lsp.ShowDocumentClientCapabilities(support=True)
            )
        )
        await asyncio.wait_for(
            client.initialize_async(
                lsp.InitializeParams(
                    capabilities=caps,
                    initialization_options={
                        "cudice": {**options, "sampler": {**options["sampler"], "maxNewTokens": self.budget}}
                    },
                    root_uri=self.root.as_uri(),
                    workspace_folders=[lsp.WorkspaceFolder(uri=self.root.as_uri(), name=self.name)],
                )
            ),
            WAIT_S,
        )
        client.initialized(lsp.InitializedParams())
        deadline = time.monotonic() + WAIT_S
        while not any(s.get("model") in ("ready", "error") for s in self.statuses):
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{self.name}: the model was not ready within {WAIT_S:.0f} s")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)
        last = next(s for s in reversed(self.statuses) if s.get("model") in ("ready", "error"))
        if last["model"] == "error":
            raise RuntimeError(f"{self.name}: the model did not load: {last.get('message')}")
        uri = self.ref.as_uri()
        text = self.ref.read_text()
        client.text_document_did_open(
            lsp.DidOpenTextDocumentParams(
                lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
            )
        )
        line = text.splitlines().index("class Model(nn.Module):") + 1  # inside the class
        actions = await asyncio.wait_for(
            client.text_document_code_action_async(
                lsp.CodeActionParams(
                    text_document=lsp.TextDocumentIdentifier(uri=uri),
                    range=lsp.Range(lsp.Position(line, 4), lsp.Position(line, 4)),
                    context=lsp.CodeActionContext(diagnostics=[]),
                )
            ),
            WAIT_S,
        )
        for action in actions or []:
            command = action.command if isinstance(action, lsp.CodeAction) else action
            if isinstance(command, lsp.Command) and command.command == GENERATE:
                self.command = command
                break
        if self.command is None:
            raise RuntimeError(f"{self.name}: no {GENERATE} code action in class Model: {actions!r}")

    async def generate(self) -> tuple[dict[str, Any], str | None]:
        """The action's command, as the editor runs it: -> (its result, the file it wrote, read
        before this editor asks again)."""
        from lsprotocol import types as lsp
        from pygls.uris import to_fs_path

        got = _plain(
            await asyncio.wait_for(
                self.client.workspace_execute_command_async(
                    lsp.ExecuteCommandParams(command=self.command.command, arguments=self.command.arguments)
                ),
                WAIT_S,
            )
        )
        if not isinstance(got, dict):
            raise RuntimeError(f"{self.name}: {GENERATE} answered {got!r}")
        self._own("result", got.get("uri"))
        text = None
        if got.get("ok") and isinstance(got.get("uri"), str) and got["uri"] == self.out.as_uri():
            text = Path(str(to_fs_path(got["uri"]))).read_text()
        return got, text

    async def close(self) -> None:
        """`shutdown`, `exit`, the socket closed: what an editor does when it quits."""
        client = getattr(self, "client", None)
        if client is None:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.shutdown_async(None), 60)
            client.exit(None)
        writer = client.protocol.writer
        with contextlib.suppress(Exception):
            writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.stop(), 30)


@dataclass
class TcpLevel:
    mode: str
    concurrency: int
    requests: int
    ok: int  # generations answered with {"ok": true}
    tokens: int
    seconds: float
    tok_s: float  # generated tokens (the command's `num_tokens`) per wall second, all editors
    gen_s: float  # answered generations per wall second
    p50_s: float  # command sent -> result, over every request of every editor
    p95_s: float
    worst_user_p95_s: float  # the largest of the editors' own p95
    peak_rss_bytes: int  # the server and every process it started, summed, sampled
    peak_gpu_bytes: int = 0  # CUDA: the device's used memory above the bench's start (nvidia-smi)
    ratio: float = 0.0  # tok/s vs the serial server at the same level
    own_answers: bool = False  # nothing another editor's reached any editor (results, files, notices)
    same_as_serial: int = 0  # answers equal to that editor's answer from the serial server
    other_answers: int = 0  # answers equal to neither its own serial answer nor another editor's
    foreign_answers: int = 0  # answers equal to ANOTHER editor's serial answer: a mix-up
    own_length: int = 0  # answers whose num_tokens is this editor's budget (no other editor's)
    failures: list[str] = field(default_factory=list)


def classify_answers(
    answers: dict[str, list[tuple[str, int]]],
    reference: dict[str, str],
    budgets: dict[str, int],
    failures: list[str],
) -> tuple[int, int, int, int]:
    """(same as serial, other, mix-ups, answers of their own editor's length) for each editor's
    (written file, num_tokens) answers, against each editor's serial file `reference` and token
    budget; a mix-up appends its reason to `failures` (module docstring: the count decides where
    the files coincide)."""
    same = other = mixed = own_length = 0
    for name, got in answers.items():
        others = {text for who, text in reference.items() if who != name and text != reference.get(name)}
        for text, count in got:
            own_length += count == budgets[name]
            whose = [who for who, b in budgets.items() if who != name and b == count]
            if whose:  # the token count another editor asked for: that editor's request
                mixed += 1
                failures.append(f"{name} got an answer of {whose[0]}'s length ({count} tokens)")
            elif text == reference.get(name):
                same += 1
            elif count != budgets[name] and text in others:  # stopped early: only the file says
                mixed += 1
                failures.append(f"{name} got another editor's answer")
            else:  # its own request's answer (its own count), diverged in bf16
                other += 1
    return same, other, mixed, own_length


async def _tcp_level(
    server: ServerProcess,
    watch: MemoryWatch,
    mode: str,
    clients: int,
    per_client: int,
    new_tokens: int,
    workdir: Path,
    options: dict[str, Any],
    reference: dict[str, str],
) -> TcpLevel:
    """`clients` editors connect; once all are ready each runs `per_client` generations in a closed
    loop; then all quit. Editor i asks for `new_tokens + i` tokens. `reference`: editor name -> its
    serial answer (filled by the serial run)."""
    editors = [
        Editor(f"user{i}", workdir / f"{mode}-c{clients}-user{i}", new_tokens + i) for i in range(clients)
    ]
    latencies: dict[str, list[float]] = {e.name: [] for e in editors}
    answers: dict[str, list[tuple[str, int]]] = {e.name: [] for e in editors}  # (file, num_tokens)
    tokens = [0]
    failures: list[str] = []

    async def loop(editor: Editor) -> None:
        for _ in range(per_client):
            t0 = time.perf_counter()
            got, text = await editor.generate()
            latencies[editor.name].append(time.perf_counter() - t0)
            if not got.get("ok") or text is None:
                failures.append(f"{editor.name}: {got}")
                continue
            tokens[0] += int(got.get("num_tokens", 0))
            answers[editor.name].append((text, int(got.get("num_tokens", -1))))

    try:
        await asyncio.gather(*(e.open(server.port, options) for e in editors))
        watch.reset()
        start = time.perf_counter()
        await asyncio.gather(*(loop(e) for e in editors))
        wall = time.perf_counter() - start
        peak_rss, peak_gpu = watch.peak_rss, watch.peak_gpu
    finally:
        await asyncio.gather(*(e.close() for e in editors))
    every = [x for e in editors for x in latencies[e.name]]
    ok = sum(len(a) for a in answers.values())
    if mode == "serial":
        for name, got in answers.items():
            if got:
                reference.setdefault(name, got[0][0])
    same, other, mixed, own_length = classify_answers(
        answers, reference, {e.name: e.budget for e in editors}, failures
    )
    foreign = [f"{e.name}: {what}" for e in editors for what in e.foreign]
    failures.extend(foreign[:20])
    return TcpLevel(
        mode,
        clients,
        clients * per_client,
        ok,
        tokens[0],
        wall,
        tokens[0] / wall,
        ok / wall,
        statistics.median(every),
        percentile(every, 0.95),
        max(percentile(xs, 0.95) for xs in latencies.values() if xs),
        peak_rss,
        peak_gpu,
        own_answers=not foreign and mixed == 0,
        same_as_serial=same,
        other_answers=other,
        foreign_answers=mixed,
        own_length=own_length,
        failures=failures,
    )


async def _serve(
    mode: str,
    env: dict[str, str],
    levels: Sequence[int],
    args: argparse.Namespace,
    workdir: Path,
    options: dict[str, Any],
    reference: dict[str, str],
    gpu: bool,
) -> dict[str, Any]:
    """One server, a warm-up editor (the model's load and first generation), then every level."""
    server = ServerProcess(mode, env, workdir / f"server-{mode}.log")
    watch: MemoryWatch | None = None
    results: list[TcpLevel] = []
    out: dict[str, Any] = {"mode": mode}
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)  # unwinds to `stop`
    try:
        t0 = time.perf_counter()
        server.start()
        watch = MemoryWatch(server, gpu).start()
        warm = Editor("warmup", workdir / f"{mode}-warmup", options["sampler"]["maxNewTokens"])
        try:
            await warm.open(server.port, options)
            out["ready_s"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            got, _ = await warm.generate()
            out["warmup_s"] = time.perf_counter() - t1
            if not got.get("ok"):
                raise RuntimeError(f"the {mode} server's first generation failed: {got}")
        finally:
            await warm.close()
        for c in levels:
            level = await _tcp_level(
                server,
                watch,
                mode,
                c,
                args.requests_per_client,
                options["sampler"]["maxNewTokens"],
                workdir,
                options,
                reference,
            )
            results.append(level)
            log(
                f"C={c:3d} {mode:8s} {level.ok:3d}/{level.requests} answered {level.tokens:6d} tokens "
                f"{level.seconds:7.2f} s {level.tok_s:9.1f} tok/s {level.gen_s:6.2f} gen/s  "
                f"p50 {level.p50_s:.3f} s p95 {level.p95_s:.3f} s "
                f"(worst editor {level.worst_user_p95_s:.3f} s)  "
                f"RSS {level.peak_rss_bytes / 2**20:.0f} MiB"
                + (f" GPU {level.peak_gpu_bytes / 2**30:.2f} GiB" if gpu else "")
                + f"  own answers {'yes' if level.own_answers else 'NO'}"
                + f" (own length {level.own_length}/{level.ok})"
                + (f"  {level.failures[:3]}" if level.failures else "")
            )
        out["peak_rss_bytes"] = max((r.peak_rss_bytes for r in results), default=0)
    finally:
        if watch is not None:
            watch.close()
        out["exit_code"] = server.stop()
    out["levels"] = results
    return out


def _terminated(*_: Any) -> None:
    raise SystemExit(143)


def tcp_main(args: argparse.Namespace) -> int:
    """The TCP mode (module docstring): build the checkpoint, run the serial server, then the
    batched one, over the same levels; report; 1 when any editor saw anything not its own, or a
    generation failed."""
    device, gpu, shape, dtype, new_tokens = _device_defaults(args)
    levels = [int(c) for c in args.concurrency.split(",")]
    own_dir = args.workdir is None
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="serve_load_tcp_")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    # a SIGTERM (a step's timeout) unwinds like an exception: the servers' shutdown runs
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        t0 = time.perf_counter()
        if args.checkpoint:
            ckpt = Path(args.checkpoint)
        else:
            ckpt = build_checkpoint(shape, workdir / f"ckpt-{shape}", device, dtype)
        build_s = time.perf_counter() - t0
        from cudice.model.loader import load_tokenizer
        from cudice.model.prompts import chat_prompt, e2e_prompt

        tokenizer = load_tokenizer(ckpt)
        reference_text = (REPO / "examples" / "relu.py").read_text()
        prompt = max(
            len(
                tokenizer(
                    chat_prompt(e2e_prompt(reference_text + f"\n# session user{i}\n")),
                    add_special_tokens=False,
                )["input_ids"]
            )
            for i in (0, max(levels) - 1)
        )
        longest = prompt + new_tokens + max(levels) + 2 * BLOCK  # editor i asks for new_tokens + i
        pages = args.max_batch * -(-longest // args.page_size)  # room for max_batch of the longest
        batch_env = {
            "CUDICE_TEAM_MAX_BATCH": str(args.max_batch),
            "CUDICE_TEAM_MAX_QUEUE": str(max(levels)),  # every level's editors are admitted
            "CUDICE_TEAM_KV_PAGES": str(pages),
            "CUDICE_TEAM_KV_PAGE_SIZE": str(args.page_size),
            "CUDICE_CACHE_DIR": str(workdir / "cache"),
        }
        options = {
            "model": {
                "path": str(ckpt),
                "device": device.type,
                "dtype": str(dtype).removeprefix("torch."),
                "fast": args.fast,
            },
            "sampler": {"maxNewTokens": new_tokens},
            "verify": {"onSave": False},
        }
        log(
            f"serve_load --transport tcp: shape {shape} on {device} ({dtype}), checkpoint {ckpt} "
            f"({build_s:.1f} s), prompt about {prompt} tokens (examples/relu.py + a line naming the editor), "
            f"{new_tokens} new, block {BLOCK}, levels {levels} x {args.requests_per_client} requests; "
            f"batched server: {args.max_batch} rows, {pages} pages x {args.page_size}, its worker's decode "
            f"by the engine's default: {'the fast paged decode' if gpu else 'the eager ragged forward'}"
        )
        reference: dict[str, str] = {}
        runs = {}
        for mode, extra in (("serial", {"CUDICE_TEAM_BATCHING": "0"}), ("batched", {})):
            try:
                runs[mode] = asyncio.run(
                    _serve(mode, {**batch_env, **extra}, levels, args, workdir, options, reference, gpu)
                )
            except asyncio.CancelledError:  # SIGTERM while the loop ran: the server is stopped
                raise SystemExit(143) from None
            finally:
                signal.signal(signal.SIGTERM, _terminated)  # the closed loop reset it to the default
        for serial, batched in zip(runs["serial"]["levels"], runs["batched"]["levels"], strict=True):
            serial.ratio = 1.0
            batched.ratio = batched.tok_s / serial.tok_s if serial.tok_s else 0.0
        distinct = len(set(reference.values()))
        report: dict[str, Any] = {
            "transport": "tcp",
            "shape": shape,
            "device": str(device),
            "dtype": str(dtype),
            "max_new_tokens": new_tokens,
            "prompt_tokens": prompt,
            "requests_per_client": args.requests_per_client,
            "throughput_unit": "generated tokens/s (the command's num_tokens over the level's wall time)",
            "checkpoint_build_s": build_s,
            "distinct_answers": distinct,
            "editors": len(reference),
            "servers": {mode: {k: v for k, v in run.items() if k != "levels"} for mode, run in runs.items()},
            "levels": [asdict(r) for mode in ("serial", "batched") for r in runs[mode]["levels"]],
        }
        for serial, batched in zip(runs["serial"]["levels"], runs["batched"]["levels"], strict=True):
            log(
                f"C={serial.concurrency:3d} batched/serial: x{batched.ratio:.2f} tok/s, p95 "
                f"{serial.p95_s:.2f} -> {batched.p95_s:.2f} s, "
                f"peak RSS {serial.peak_rss_bytes / 2**20:.0f} -> "
                f"{batched.peak_rss_bytes / 2**20:.0f} MiB, answers as serial {batched.same_as_serial}/"
                f"{batched.requests}"
            )
        log(
            f"editors' serial answers: {distinct} distinct of {len(reference)} "
            "(between equal files, the answers' token counts tell a mix-up: each editor asks for its own)"
        )
        log(
            "RESULT "
            + json.dumps(
                {
                    f"tcp_c{r['concurrency']}_ratio": round(r["ratio"], 2)
                    for r in report["levels"]
                    if r["mode"] == "batched"
                }
            )
        )
        path = args.json or (
            os.path.join(os.environ["OUT"], "serve_load.json") if os.environ.get("OUT") else None
        )
        if path:
            with open(path, "w") as f:
                json.dump(report, f, indent=2)
        bad = [
            r for r in report["levels"] if not r["own_answers"] or r["failures"] or r["ok"] != r["requests"]
        ]
        codes = [run.get("exit_code") for run in runs.values()]
        if codes != [0, 0]:
            log(f"serve_load: the servers' exit codes were {codes}, not 0")
        return 1 if bad or codes != [0, 0] else 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
