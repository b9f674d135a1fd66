"""LoRA rollouts on the fast sampler: `RolloutWeights` of a peft model holds the merged weights
(W + scale · B·A under the plain names), samples the tokens of the merged model, follows the
adapters after every update without merging into the master, and refuses adapters it cannot
hold as a weight delta. Tiny real checkpoint, real sampler (`StaticRunner`, CPU)."""

from __future__ import annotations

import copy
import dataclasses
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from cudice.model.engine import Engine
from cudice.model.loader import LoadedModel, load_checkpoint
from cudice.model.tiny import make_tiny
from cudice.model.train.config import ModelSetup, RLConfig
from cudice.model.train.data import RLTask
from cudice.model.train.prepare import prepare_model
from cudice.model.train.rl import run_stage
from cudice.model.train.rollout import (
    RolloutWeights,
    UnmergeableLoraError,
    engine_rollout_fn,
)

peft = pytest.importorskip("peft", reason="LoRA rollouts need peft: pip install 'cudice[train]'")

TASKS = [RLTask("e2e", 1, "class Model: pass", task_id="a"), RLTask("e2e", 1, "x = 1", task_id="b")]
GREEDY = RLConfig(stage="e2e", samples_per_task=2, max_new_tokens=12, temperature=0.0)
SETUP = ModelSetup(lora_rank=4, lora_alpha=8.0)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("tiny") / "tiny", sdar_layout=True)


def _lora(checkpoint: Path, setup: ModelSetup = SETUP, seed: int = 0) -> tuple[LoadedModel, Any]:
    """The tiny checkpoint (fp32) wrapped by peft, its adapters set to random non-zero values (peft
    starts B at zero, where merged and base weights are the same)."""
    loaded = load_checkpoint(str(checkpoint), device="cpu", dtype="float32")
    model = prepare_model(loaded.model, setup)
    _randomize(model, seed)
    return loaded, model


@torch.no_grad()
def _randomize(model: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if "lora_" in name:
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)


def _merged(model: Any) -> torch.nn.Module:
    """peft's own merge, on a deep copy (the master keeps its adapters)."""
    merged: torch.nn.Module = copy.deepcopy(model).merge_and_unload()
    return merged.requires_grad_(False).eval()


def _assert_copy_is(weights: RolloutWeights, merged: torch.nn.Module) -> None:
    own, want = dict(weights.module.named_parameters()), dict(merged.named_parameters())
    assert own.keys() == want.keys() and not any("lora" in n or "base_layer" in n for n in own)
    for name, p in want.items():
        assert own[name].dtype == weights.dtype
        assert torch.equal(own[name], p.to(weights.dtype)), name


def _tokens(loaded: LoadedModel, model: torch.nn.Module) -> list[list[int]]:
    """Greedy rollouts of `model` on the fast sampler (`StaticRunner`)."""
    engine = Engine(dataclasses.replace(loaded, model=model), fast=True)
    assert type(engine.runner).__name__ == "StaticRunner"
    return [r.response_ids for r in engine_rollout_fn(engine)(TASKS, 2, GREEDY)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("targets", "adapted"),
    [(SETUP.lora_target_modules, 2 * 7), (("embed_tokens", "q_proj", "lm_head"), 1 + 2 + 1)],
    ids=["projections", "embedding-and-head"],
)
def test_the_lora_copy_holds_pefts_merged_weights_and_leaves_the_master_unmerged(
    checkpoint: Path, dtype: torch.dtype, targets: tuple[str, ...], adapted: int
) -> None:
    _, model = _lora(checkpoint, dataclasses.replace(SETUP, lora_target_modules=targets))
    before = {n: p.clone() for n, p in model.named_parameters()}
    weights = RolloutWeights(model, dtype)
    _assert_copy_is(weights, _merged(model))
    assert weights.refreshes == 0
    # the master is untouched: still wrapped, nothing merged into its base weights, adapters train
    layers = [m for m in model.modules() if isinstance(m, peft.tuners.lora.LoraLayer)]
    assert len(layers) == adapted and not any(m.merged for m in layers)
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name
        assert p.requires_grad == ("lora_" in name)


def test_greedy_tokens_of_the_lora_copy_equal_the_merged_models_on_the_fast_sampler(
    checkpoint: Path,
) -> None:
    loaded, model = _lora(checkpoint)
    got = _tokens(loaded, RolloutWeights(model, torch.float32).module)
    want = _tokens(loaded, _merged(model))
    assert got == want and all(len(t) > 0 for t in got)
    base = load_checkpoint(str(checkpoint), device="cpu", dtype="float32")
    assert _tokens(base, base.model.requires_grad_(False)) != want  # the adapters change the tokens


def test_refresh_follows_an_optimizer_step_on_the_adapters(checkpoint: Path) -> None:
    loaded, model = _lora(checkpoint)
    weights = RolloutWeights(model)  # bf16, as in training
    engine = Engine(weights.loaded(loaded), fast=True)  # packed views of the copy's weights
    rollout = engine_rollout_fn(engine)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1)
    ids = torch.tensor([engine.encode("class ModelNew(nn.Module):")])
    model.train()
    model(input_ids=ids).logits.logsumexp(-1).mean().backward()
    optimizer.step()
    model.eval()
    stepped = _merged(model)
    q_proj = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(
        dict(weights.module.named_parameters())[q_proj], stepped.get_parameter(q_proj).bfloat16()
    )  # the step moved the merged weights: the copy is behind until refreshed
    stepped_bf16 = copy.deepcopy(stepped)
    for p in stepped_bf16.parameters():  # the copy's dtype; buffers (rotary) keep theirs, as in the copy
        p.data = p.data.to(torch.bfloat16)
    fresh = engine_rollout_fn(Engine(dataclasses.replace(loaded, model=stepped_bf16), fast=True))
    want = [r.response_ids for r in fresh(TASKS, 2, GREEDY)]
    assert [
        r.response_ids for r in rollout(TASKS, 2, GREEDY)
    ] != want  # the stale copy samples the old policy
    weights.refresh(model)
    assert weights.refreshes == 1
    _assert_copy_is(weights, stepped)
    assert [r.response_ids for r in rollout(TASKS, 2, GREEDY)] == want  # the running engine sees it


def test_run_stage_refreshes_a_copy_made_before_the_lora_wrap(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI's order: the copy is made from the plain model, then `run_stage` wraps the master
    with LoRA; every rollout samples the current merged policy, in bf16."""
    loaded = load_checkpoint(str(checkpoint), device="cpu", dtype="float32")
    weights = RolloutWeights(loaded.model)
    sampler = Engine(weights.loaded(loaded), fast=True)
    cfg = RLConfig(
        stage="e2e",
        num_steps=2,
        tasks_per_step=2,
        samples_per_task=2,
        max_new_tokens=8,
        learning_rate=5e-2,
        setup=SETUP,
    )
    merged_at_rollout: list[dict[str, torch.Tensor]] = []
    rollout = engine_rollout_fn(sampler)
    wrapped: list[Any] = []

    def rollout_fn(tasks, n, c):  # type: ignore[no-untyped-def]
        master = wrapped[0]
        if not merged_at_rollout:  # peft starts B at zero: make the adapters matter from step 0
            _randomize(master, 1)
            weights.refresh(master)  # (run_stage refreshed at the start, before this change)
        _assert_copy_is(weights, _merged(master))
        merged_at_rollout.append({n: p.clone() for n, p in weights.module.named_parameters()})
        return rollout(tasks, n, c)

    def capture(model: torch.nn.Module, setup: ModelSetup) -> torch.nn.Module:
        wrapped.append(prepare_model(model, setup))  # the master run_stage trains
        return wrapped[-1]

    monkeypatch.setattr("cudice.model.train.rl.prepare_model", capture)
    history = run_stage(
        loaded.model,
        TASKS,
        cfg,
        rollout_fn=rollout_fn,
        reward_fn=lambda rs, c: [1.0, 0.0] * (len(rs) // 2),
        block_size=loaded.block_size,
        mask_token_id=loaded.ids.mask,
        pad_token_id=loaded.ids.pad,
        cpu=True,
        rollout_weights=weights,
    )
    assert [h.num_updates > 0 for h in history] == [True, True]
    assert len(merged_at_rollout) == 2
    _assert_copy_is(weights, _merged(wrapped[0]))  # after the last update too
    first, second = merged_at_rollout
    assert any(not torch.equal(first[n], second[n]) for n in first)  # the update reached the copy
    assert not any(m.merged for m in wrapped[0].modules() if isinstance(m, peft.tuners.lora.LoraLayer))


def test_lora_dropout_is_accepted_the_copy_is_the_eval_mode_policy(checkpoint: Path) -> None:
    """Rollouts sample the master in eval mode (`run_stage`), where peft's dropout is the identity."""
    _, model = _lora(checkpoint, dataclasses.replace(SETUP, lora_dropout=0.5))
    weights = RolloutWeights(model, torch.float32)
    _assert_copy_is(weights, _merged(model))
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    with torch.no_grad():
        model.eval()
        sampled = model(input_ids=ids).logits
        model.train()  # dropout on: a policy no fixed weights hold, and not the one rollouts sample
        assert not torch.allclose(model(input_ids=ids).logits, sampled, atol=1e-2)
        assert torch.allclose(weights.module(input_ids=ids).logits, sampled, atol=1e-4)


class _Conv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 4, 1)
        self.proj = torch.nn.Linear(4, 4)


def _unmergeable() -> list[Any]:
    from peft import LoraConfig, get_peft_model

    def wrap(**kw: Any) -> Any:
        return get_peft_model(_Conv(), LoraConfig(r=2, **kw))

    def two_active() -> Any:
        model = wrap(target_modules=["proj"])
        model.add_adapter("second", LoraConfig(r=2, target_modules=["proj"]))
        model.base_model.set_adapter(["default", "second"])
        return model

    def merged() -> Any:
        model = wrap(target_modules=["proj"])
        model.base_model.model.proj.merge()
        return model

    def tied_head() -> Any:  # Qwen3-1.7B ties lm_head to embed_tokens
        from transformers import Qwen3Config, Qwen3ForCausalLM

        config = Qwen3Config(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            tie_word_embeddings=True,
        )
        with warnings.catch_warnings():  # peft warns about the tied adapter too
            warnings.simplefilter("ignore")
            return get_peft_model(Qwen3ForCausalLM(config), LoraConfig(r=2, target_modules=["lm_head"]))

    class Lora(torch.nn.Module):  # lora_ parameters that no peft layer owns
        def __init__(self) -> None:
            super().__init__()
            self.lora_A = torch.nn.Parameter(torch.zeros(2, 2))

    return [
        pytest.param(lambda: wrap(target_modules=["conv"]), "nn.Linear and nn.Embedding", id="conv"),
        pytest.param(lambda: wrap(target_modules=["proj"], use_dora=True), "LoRA variant", id="dora"),
        pytest.param(lambda: wrap(target_modules=["proj"], lora_bias=True), "lora_bias", id="lora-bias"),
        pytest.param(
            lambda: wrap(target_modules=["proj"], modules_to_save=["conv"]),
            "ModulesToSaveWrapper",
            id="saved",
        ),
        pytest.param(two_active, "2 adapters are active", id="two-adapters"),
        pytest.param(merged, "already merged", id="merged"),
        pytest.param(tied_head, "tied to model.embed_tokens.weight", id="tied-head"),
        pytest.param(Lora, "not a peft LoRA layer", id="not-peft"),
    ]


@pytest.mark.parametrize(("make", "reason"), _unmergeable())
def test_adapters_that_are_not_a_plain_weight_delta_are_refused(make: Any, reason: str) -> None:
    with pytest.raises(UnmergeableLoraError, match=reason) as info:
        RolloutWeights(make())
    assert "sample from the master" in str(info.value)  # and says what to do instead


def test_refresh_refuses_an_adapter_that_became_unmergeable(checkpoint: Path) -> None:
    _, model = _lora(checkpoint)
    weights = RolloutWeights(model, torch.float32)
    with model.disable_adapter(), pytest.raises(UnmergeableLoraError, match="disabled"):
        weights.refresh(model)
