"""SFT numerics on a tiny real Qwen3: master weights, accumulation, checkpointing, LoRA, resume."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from cudice.model.train.config import ModelSetup, SFTConfig
from cudice.model.train.sft import train_sft
from train_helpers import MASK_ID, PAD_ID, tiny_model, toy_samples

COMMON = {"block_size": 4, "mask_token_id": MASK_ID, "pad_token_id": PAD_ID, "cpu": True}


def _config(**changes: object) -> SFTConfig:
    """One epoch of batch 2 at lr 1e-3, no warm-up, with `changes`."""
    return dataclasses.replace(
        SFTConfig(learning_rate=1e-3, num_epochs=1, batch_size=2, warmup_ratio=0.0), **changes
    )


def _changed_fraction(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> float:
    changed = total = 0
    for name, p in model.named_parameters():
        changed += int((p.detach().float() != before[name].float()).sum())
        total += p.numel()
    return changed / total


@pytest.mark.parametrize("precision", ["bf16-autocast", "accelerate-bf16"])
def test_small_updates_land_on_fp32_master_weights_under_bf16(precision: str) -> None:
    """A bf16 checkpoint trains in fp32: at lr 1e-5 most weights move; bf16 weights would mostly not."""
    model = tiny_model().to(torch.bfloat16)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    seen: list[torch.dtype] = []
    hook = model.model.layers[0].mlp.down_proj.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    config = _config(learning_rate=1e-5, setup=ModelSetup(precision=precision))
    train_sft(model, toy_samples(6), config, **COMMON)
    hook.remove()
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # master copy
    assert set(seen) == {torch.bfloat16}  # the matmuls did run in bf16
    assert _changed_fraction(model, before) > 0.5

    # The same three steps applied to bf16 weights lose most of the updates (rounding).
    lossy = tiny_model().to(torch.bfloat16)
    opt = torch.optim.AdamW(lossy.parameters(), lr=1e-5, weight_decay=0.0)
    for p in lossy.parameters():
        p.grad = torch.randn_like(p)
    for _ in range(3):
        opt.step()
    assert _changed_fraction(lossy, before) < 0.5 * _changed_fraction(model, before)


def test_accumulating_two_micro_batches_equals_one_batch_of_two() -> None:
    """Same losses and the same (pre-clip) gradient norm at every step: the loss is divided once.

    (Losses of steps 2 and 3 depend on the weights the earlier steps produced.)
    """
    runs = []
    for batch_size, accum in ((2, 1), (1, 2)):
        model = tiny_model()
        config = _config(batch_size=batch_size, grad_accum_steps=accum, max_grad_norm=1e6)
        runs.append((train_sft(model, toy_samples(6), config, **COMMON), model))
    (h_full, _), (h_acc, _) = runs
    assert len(h_full) == len(h_acc) == 3
    for a, b in zip(h_full, h_acc, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)


def test_clipping_uses_the_norm_of_the_whole_accumulated_gradient(monkeypatch) -> None:
    """With a tight clip, the reported norm is the raw norm, and the optimizer steps on a gradient
    of exactly the clip's norm: the three micro-batches were summed first, then clipped once."""
    stepped: list[float] = []
    real_step = torch.optim.AdamW.step

    def step(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        stepped.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    config = _config(batch_size=1, grad_accum_steps=3, max_grad_norm=1e-3)
    history = train_sft(tiny_model(), toy_samples(3), config, **COMMON)
    assert len(history) == 1 and history[0]["grad_norm"] > 1.0  # far above the clip: it is the raw norm
    assert stepped == [pytest.approx(1e-3, rel=1e-3)]


def test_gradient_checkpointing_trains_exactly_like_the_plain_model() -> None:
    results = []
    for checkpointing in (False, True):
        model = tiny_model()
        config = _config(setup=ModelSetup(gradient_checkpointing=checkpointing))
        results.append((train_sft(model, toy_samples(4), config, **COMMON), model))
    assert results[1][1].model.gradient_checkpointing
    assert [h["loss"] for h in results[0][0]] == pytest.approx([h["loss"] for h in results[1][0]], rel=1e-6)
    for p, q in zip(results[0][1].parameters(), results[1][1].parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)


def test_lora_trains_adapters_only_and_saves_merged_native_weights(tmp_path) -> None:
    from cudice.model.loader import load_checkpoint
    from cudice.model.tiny import make_tiny

    src = make_tiny(tmp_path / "src", sdar_layout=True)
    loaded = load_checkpoint(str(src), device="cpu")
    base_before = {n: p.detach().clone() for n, p in loaded.model.named_parameters()}
    ids = loaded.ids
    samples = toy_samples(4, seed=1)
    config = _config(learning_rate=1e-2, num_epochs=2, setup=ModelSetup(lora_rank=4, lora_alpha=8))
    history = train_sft(
        loaded.model,
        samples,
        config,
        block_size=loaded.block_size,
        mask_token_id=ids.mask,
        pad_token_id=ids.pad,
        cpu=True,
        source_dir=src,
        out_dir=tmp_path / "out",
    )
    assert len(history) == 4
    # base weights untouched by training: only the adapters moved
    after = {
        n.replace(".base_layer.", "."): p for n, p in loaded.model.named_parameters() if "lora_" not in n
    }
    assert after.keys() == base_before.keys()
    assert all(torch.equal(p, base_before[n]) for n, p in after.items())
    saved = load_checkpoint(str(tmp_path / "out"), device="cpu")
    assert saved.model_type == "sdar"
    names = {n for n, _ in saved.model.named_parameters()}
    assert names == set(base_before) and not any("lora" in n for n in names)
    q_name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(dict(saved.model.named_parameters())[q_name], base_before[q_name])
    probe = torch.tensor([samples[0].input_ids])
    peft_model = _peft_of(loaded.model)
    with torch.no_grad():
        assert torch.allclose(saved.model(probe).logits, peft_model(probe).logits, atol=1e-4)


def _peft_of(model: torch.nn.Module) -> torch.nn.Module:
    """The peft wrapper train_sft put around `model` (its modules now hold the LoRA layers)."""
    from peft.tuners.lora import LoraLayer

    assert any(isinstance(m, LoraLayer) for m in model.modules())
    return model


def test_a_resumed_run_reproduces_the_uninterrupted_losses(tmp_path) -> None:
    from cudice.model.tiny import make_tiny
    from cudice.model.train.checkpoint import read_marker

    src = make_tiny(tmp_path / "src", sdar_layout=True)
    common = {**COMMON, "source_dir": src}
    config = SFTConfig(learning_rate=3e-3, num_epochs=2, batch_size=2, warmup_ratio=0.5, save_every_steps=2)
    # 5 samples, batch 2: 3 steps per epoch (the last batch holds one sample), 6 in all
    whole = tiny_model()
    full = train_sft(whole, toy_samples(5), config, out_dir=tmp_path / "full", **common)
    assert len(full) == 6
    first = train_sft(
        tiny_model(),
        toy_samples(5),
        dataclasses.replace(config, max_steps=4),
        out_dir=tmp_path / "cut",
        **common,
    )
    assert read_marker(tmp_path / "cut")["step"] == 4
    resumed_model = tiny_model(seed=7)  # other weights: everything must come from the saved state
    rest = train_sft(resumed_model, toy_samples(5), config, out_dir=tmp_path / "cut", resume=True, **common)
    assert [h["loss"] for h in first + rest] == pytest.approx([h["loss"] for h in full], rel=1e-6)
    assert [h["lr"] for h in first + rest] == pytest.approx([h["lr"] for h in full])
    for p, q in zip(whole.parameters(), resumed_model.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)


class _Crash(Exception):
    pass


@pytest.mark.parametrize("save_every", [2, 3])
def test_a_run_killed_after_a_periodic_save_resumes_from_it(tmp_path, save_every: int) -> None:
    """The state written inside the loop (not the one at the end) carries the run on.

    5 samples, batch 1, 2 micro-batches per step: steps of 2, 2 and 1 micro-batches per epoch.
    save_every=2 resumes inside epoch 1 (after its first step); save_every=3 at the epoch end.
    """
    from cudice.model.tiny import make_tiny

    src = make_tiny(tmp_path / "src", sdar_layout=True)
    common = {**COMMON, "source_dir": src}
    config = SFTConfig(
        learning_rate=3e-3,
        num_epochs=2,
        batch_size=1,
        grad_accum_steps=2,
        warmup_ratio=0.5,
        save_every_steps=save_every,
    )
    full = train_sft(tiny_model(), toy_samples(5), config, out_dir=tmp_path / "full", **common)
    assert len(full) == 6
    logged: list[float] = []

    def crash_at_five(step: int, stats: dict[str, float]) -> None:
        logged.append(stats["loss"])
        if step == 5:  # after the step-4 (or step-3) save, before any later one
            raise _Crash

    with pytest.raises(_Crash):
        train_sft(
            tiny_model(), toy_samples(5), config, out_dir=tmp_path / "cut", on_step=crash_at_five, **common
        )
    saved = (4 // save_every) * save_every
    rest = train_sft(
        tiny_model(seed=7), toy_samples(5), config, out_dir=tmp_path / "cut", resume=True, **common
    )
    assert len(rest) == 6 - saved
    assert logged[:saved] + [h["loss"] for h in rest] == pytest.approx([h["loss"] for h in full], rel=1e-6)


def test_resume_without_saved_state_says_how_to_fix(tmp_path) -> None:
    with pytest.raises(ValueError, match="holds no saved training state"):
        train_sft(
            tiny_model(), toy_samples(2), SFTConfig(num_epochs=1), out_dir=tmp_path, resume=True, **COMMON
        )
