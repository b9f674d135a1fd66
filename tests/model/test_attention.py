"""The Triton block attention (`cudice.model.attention`) equals SDPA under the same mask.

On this CPU box the kernels run in Triton's interpreter, which must be switched on before triton is
imported: those checks run in a child Python with TRITON_INTERPRET=1. On a GPU (`gpu` marker) the
compiled kernels are checked in bf16 and float32, and the fast path's tokens with them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from cudice.model import attention
from cudice.model.config import SamplerConfig
from cudice.model.fastpath import StaticRunner
from cudice.model.runner import HFRunner, additive

needs_triton = pytest.mark.skipif(not attention.available(), reason="triton is not installed (dev extra)")

# Masks as the sampler builds them: left padding per row, the cached prefix, then the forward's own
# tokens seen block-wise (pairs here: a fused commit's two blocks, or a denoise block).
CASES = [  # batch, tokens per row, heads, KV heads, head dim, slots, splits
    (3, 4, 4, 2, 16, 96, 1),
    (3, 4, 4, 2, 16, 96, 3),
    (2, 1, 8, 2, 24, 130, 2),  # an AR step; a head dim that is not a power of two
    (2, 8, 4, 4, 32, 64, 1),  # no GQA
    (1, 16, 8, 2, 16, 200, 5),  # the most tokens per row; more splits than some rows have tiles
]


def _inputs(b: int, n: int, h: int, hkv: int, d: int, m: int, dtype: torch.dtype, device: str):
    gen = torch.Generator().manual_seed(b * 1000 + n * 100 + m)
    q, k, v = (torch.randn(s, generator=gen) for s in ((b, n, h, d), (b, hkv, m, d), (b, hkv, m, d)))
    allowed = torch.zeros(b, 1, n, m, dtype=torch.bool)
    spans = []
    for r in range(b):
        lo, hi = (5 * r) % (m // 2), m - 7 - r % (m // 4)
        allowed[r, 0, :, lo : hi - n] = True
        for i in range(n):
            allowed[r, 0, i, hi - n : min(hi, hi - n + (i // 2 + 1) * 2)] = True
        spans.append((lo, hi))
    to = {"dtype": dtype, "device": device}
    return q.to(**to), k.to(**to), v.to(**to), additive(allowed, dtype).to(device), spans


CHILD = textwrap.dedent(
    """
    import json, sys, torch
    sys.path.insert(0, {here!r})
    from test_attention import CASES, _inputs
    from cudice.model import attention
    out = []
    for case in CASES:
        b, n, h, hkv, d, m, splits = case
        q, k, v, mask, spans = _inputs(b, n, h, hkv, d, m, torch.float32, "cpu")
        lo, hi = attention.bounds(mask)
        got = attention.attend(q, k, v, mask, lo, hi, d ** -0.5, splits=splits)
        ref = attention.reference(q, k, v, mask, d ** -0.5)
        # the fused cache write: this forward's K/V at slots [at, at + n), taken from new tensors
        at = torch.tensor([spans[0][1] - n])
        kn, vn = torch.randn(b, n, hkv, d), torch.randn(b, n, hkv, d)
        k2, v2 = k.clone(), v.clone()
        got2 = attention.attend(q, k2, v2, mask, lo, hi, d ** -0.5, splits=splits, new=(kn, vn, at))
        k3, v3 = k.clone(), v.clone()
        ref2 = attention.reference(q, k3, v3, mask, d ** -0.5, new=(kn, vn, at))
        out.append({{"case": case, "err": (got - ref).abs().max().item(), "scale": ref.abs().max().item(),
                    "err_fused": (got2 - ref2).abs().max().item(),
                    "cache_written": bool(torch.equal(k2, k3) and torch.equal(v2, v3)),
                    "cache_changed": not torch.equal(k2, k),
                    "bounds": [lo.tolist(), hi.tolist()], "spans": spans}})
    print(json.dumps(out))
    """
)


@needs_triton
def test_kernel_equals_sdpa_in_the_interpreter() -> None:
    code = CHILD.format(here=os.path.dirname(__file__))
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == len(CASES)
    for r in results:
        assert r["err"] <= 1e-5 * max(1.0, r["scale"]), r
        assert r["err_fused"] <= 1e-5 * max(1.0, r["scale"]), r
        assert r["cache_written"] and r["cache_changed"], r  # exactly the new slots, nothing else
        lo, hi = r["bounds"]
        assert [list(s) for s in zip(lo, hi, strict=True)] == r["spans"], r  # reads only the allowed slots


def test_bounds_are_the_allowed_span_of_each_row() -> None:
    allowed = torch.zeros(4, 1, 2, 20, dtype=torch.bool)
    allowed[0, 0, 0, 3:9] = True
    allowed[0, 0, 1, 3:11] = True  # the row's span covers every query's
    allowed[1, 0, :, 0] = True
    allowed[2, 0, :, [4, 19]] = True  # a gap inside the span is read and masked
    lo, hi = attention.bounds(additive(allowed, torch.bfloat16))
    assert lo.tolist() == [3, 0, 4, 0] and hi.tolist() == [11, 1, 20, 20]  # row 3 allows nothing: all
    assert lo.dtype == hi.dtype == torch.int32


def test_bad_shapes_and_cpu_without_the_interpreter_are_clear_errors(monkeypatch) -> None:
    q, k, v, mask, _ = _inputs(1, 4, 6, 4, 16, 64, torch.float32, "cpu")  # 6 heads over 4 KV heads
    lo, hi = attention.bounds(mask)
    with pytest.raises(ValueError, match="divisible"):
        attention.attend(q, k, v, mask, lo, hi, 0.25)
    q, k, v, mask, _ = _inputs(1, 4, 4, 2, 16, 64, torch.float32, "cpu")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="interpreter"):
        attention.attend(q, k, v, mask, lo, hi, 0.25)


def test_a_failing_attention_kernel_falls_back_to_sdpa_with_the_same_tokens(tiny_engine, capsys) -> None:
    # On CPU without the interpreter the kernel refuses to run: the runner must say so once and go on
    lm = tiny_engine.loaded
    ids = lm.ids
    runner = StaticRunner(lm.model, use_graphs=False, attention="triton")
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.3, max_new_tokens=12)
    from cudice.model.sampler import BlockDiffusionSampler

    prompts = [[5, 9, 11, 3], [7, 2]]
    fast = BlockDiffusionSampler(runner, ids.mask, ids.pad, ids.stop, lm.tokenizer.decode).generate(
        prompts, cfg, 4
    )
    slow = BlockDiffusionSampler(
        HFRunner(lm.model), ids.mask, ids.pad, ids.stop, lm.tokenizer.decode
    ).generate(prompts, cfg, 4)
    assert [r.tokens for r in fast.rows] == [r.tokens for r in slow.rows]
    assert runner.attention == "sdpa" and "interpreter" in (runner.attention_error or "")
    assert "Triton attention failed" in capsys.readouterr().err
    with pytest.raises(ValueError, match="attention="):
        StaticRunner(lm.model, attention="flash")


@needs_triton
def test_runner_with_the_kernel_gives_the_hf_tokens(tiny_sdar_dir) -> None:
    # the whole fast path with the kernel (interpreted) over mixed prompt lengths, plain and fused commit
    code = textwrap.dedent(
        f"""
        import json
        from cudice.model.engine import load_engine
        from cudice.model.config import SamplerConfig
        from cudice.model.fastpath import StaticRunner
        from cudice.model.runner import HFRunner
        from cudice.model.sampler import BlockDiffusionSampler
        lm = load_engine({str(tiny_sdar_dir)!r}, device="cpu", freeze=True).loaded
        ids = lm.ids
        def gen(runner, fuse):
            s = BlockDiffusionSampler(runner, ids.mask, ids.pad, ids.stop, lm.tokenizer.decode)
            cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.3, max_new_tokens=16,
                                fuse_commit=fuse)
            return [r.tokens for r in s.generate([[5, 9, 11, 3, 8, 1, 2], [7, 2], [4] * 13], cfg, 4).rows]
        runner = StaticRunner(lm.model, use_graphs=False, attention="triton")
        out = {{}}
        for fuse in (True, False):  # the kernel writes the cache itself, or two writes per layer do
            runner.fuse_cache_write = fuse
            for f in (False, True):
                out[f"{{fuse}}-{{f}}"] = [gen(runner, f), gen(HFRunner(lm.model), f)]
        print(json.dumps({{"out": out, "attention": runner.attention, "error": runner.attention_error}}))
        """
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["attention"] == "triton", result["error"]
    assert len(result["out"]) == 4  # cache written by the kernel or apart x plain or fused commit
    for fast, slow in result["out"].values():
        assert fast == slow and len(fast[0]) > 0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_kernel_equals_sdpa_on_gpu(dtype: torch.dtype) -> None:
    for b, n, h, hkv, d, m, splits in [*CASES, (128, 4, 32, 8, 128, 768, 1), (1, 8, 16, 8, 128, 768, 0)]:
        q, k, v, mask, _ = _inputs(b, n, h, hkv, d, m, dtype, "cuda")
        lo, hi = attention.bounds(mask)
        got = attention.attend(q, k, v, mask, lo, hi, d**-0.5, splits=splits or None).float()
        ref = attention.reference(q.float(), k.float(), v.float(), mask.float(), d**-0.5)
        tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
        assert (got - ref).abs().max().item() <= tol * max(1.0, ref.abs().max().item()), (b, n, h, d, m)
        if dtype == torch.float32 and d >= 128:
            continue  # the fused write's float32 tiles at head dim 128 exceed shared memory (docstring)
        at = torch.tensor([m - 7 - n], device="cuda")  # row 0's last n allowed slots
        kn, vn = (torch.randn(b, n, hkv, d, dtype=dtype, device="cuda") for _ in range(2))
        k2, v2, k3, v3 = k.clone(), v.clone(), k.float(), v.float()
        got = attention.attend(q, k2, v2, mask, lo, hi, d**-0.5, splits=splits or None, new=(kn, vn, at))
        ref = attention.reference(q.float(), k3, v3, mask.float(), d**-0.5, new=(kn.float(), vn.float(), at))
        assert (got.float() - ref).abs().max().item() <= tol * max(1.0, ref.abs().max().item()), (b, n, m)
        assert torch.equal(k2.float(), k3) and torch.equal(v2.float(), v3)  # the kernel's cache write


@pytest.mark.gpu
def test_graphs_with_the_kernel_equal_sdpa_tokens_on_gpu(tiny_sdar_dir) -> None:
    from cudice.model.loader import load_checkpoint
    from cudice.model.sampler import BlockDiffusionSampler

    lm = load_checkpoint(str(tiny_sdar_dir), device="cuda", dtype="float32")
    ids = lm.ids
    prompts = [[5, 9, 11, 3, 8, 1, 2], [7, 2], [4] * 13, [6] * 30]
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.3, max_new_tokens=40)
    tokens = {}
    for name in ("triton", "sdpa"):
        runner = StaticRunner(lm.model, use_graphs=True, attention=name)
        for fuse in (False, True):
            s = BlockDiffusionSampler(runner, ids.mask, ids.pad, ids.stop, lm.tokenizer.decode)
            tokens[name, fuse] = [
                r.tokens for r in s.generate(prompts, cfg.replace(fuse_commit=fuse), 4).rows
            ]
        assert runner.attention == name, runner.attention_error
    assert tokens["triton", False] == tokens["sdpa", False] == tokens["triton", True] == tokens["sdpa", True]
