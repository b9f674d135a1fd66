"""Block-diffusion decoding (SDAR / DICE inference, docs/model.md), batched.

Blocks are aligned to absolute position 0 of each prompt. The whole prompt blocks are prefilled
into the KV cache; the prompt's tail shares the first generated block. For each block: forward
the block against the cache, sample every masked slot, reveal some by strategy, crop the step's
K/V away; when no mask is left, one more forward with the final tokens commits the block's K/V.
Revealed tokens are never re-masked (SDAR). Stop after a block holding a stop token or string.
`SamplerConfig.fuse_commit` folds each commit into the next block's first denoise forward (same
tokens, one forward less per block; with a confident model one forward per block).

Batching: row r is left-padded by a multiple of the block length so that every row's current
block sits in the same columns; padding keys are masked out and positions count from each row's
first real token, so a row decodes exactly as it would alone. Finished rows leave the batch.

Not covered: continuous batching (new prompts joining mid-run) and paged caches (both in
`cudice.model.batching`, which reuses this module's block bookkeeping and stop rules), speculative
tricks, and the fast static-cache/CUDA-graph path (docs/model.md, "Speed").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from cudice.model.config import SamplerConfig
from cudice.model.runner import Runner, block_causal_mask, block_query_mask
from cudice.model.sampling import sample_tokens
from cudice.model.strategies import STRATEGIES, quota_schedule


@dataclass(frozen=True, slots=True)
class RowResult:
    """One prompt's generation. `tokens` excludes the stop token and anything after it."""

    tokens: tuple[int, ...]
    step_map: tuple[int, ...]  # per token: index of this row's denoising step that revealed it (0-based)
    text: str
    finish_reason: str  # "eos" | "stop_string" | "length" | "cancelled"
    # Every token of every decoded block, untrimmed (the stop token and what the block holds after
    # it), with its step index: the exact states the sampler saw, which RL replays
    # (`cudice.model.train.objective.replay_rows`).
    block_tokens: tuple[int, ...] = ()
    block_step_map: tuple[int, ...] = ()
    # Per entry of `block_tokens`: the natural log of the probability the sampler drew it with (the
    # confidence of its reveal step: softmax of that forward's logits, after temperature and the
    # top-k/top-p filters). At temperature 1 without filters, or at temperature 0, it is the
    # policy's log-probability of the token in the exact state the replay rebuilds, so RL can use
    # it as PPO's `logp_old` (`cudice.model.train.ppo`). Empty where the caller did not record it.
    block_logprobs: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class BatchResult:
    rows: tuple[RowResult, ...]
    num_forwards: int  # model forwards (prefill + denoise + commit), whole batch
    seconds: float
    prefill_seconds: float = 0.0  # of `seconds`: the prompt prefill (device synchronised on CUDA)

    @property
    def num_tokens(self) -> int:
        return sum(len(r.tokens) for r in self.rows)


@dataclass
class RowState:
    """Mutable per-row state while decoding."""

    index: int  # position in the caller's list
    pad: int  # left padding (a multiple of the block length)
    tail: list[int]  # prompt tokens that share the first generated block
    tokens: list[int] = field(default_factory=list)
    step_map: list[int] = field(default_factory=list)
    block_tokens: list[int] = field(default_factory=list)
    block_step_map: list[int] = field(default_factory=list)
    block_logprobs: list[float] = field(default_factory=list)
    steps_done: int = 0
    finish: str | None = None
    text: str = ""


BlockCallback = Callable[[Sequence[Sequence[int]], int], None]  # (committed tokens per row, num_forwards)


class BlockDiffusionSampler:
    """Decode prompts (token ids) with a `Runner`. `stop_ids` end a row; `decode` turns ids into text."""

    def __init__(
        self,
        runner: Runner,
        mask_id: int,
        pad_id: int,
        stop_ids: Sequence[int],
        decode: Callable[[Sequence[int]], str],
    ) -> None:
        self.runner = runner
        self.mask_id = mask_id
        self.pad_id = pad_id
        self.stop_ids = frozenset(stop_ids)
        self.decode = decode

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        config: SamplerConfig,
        block_length: int,
        on_block: BlockCallback | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> BatchResult:
        """Decode every prompt; see the module docstring. Returns rows in the order of `prompts`."""
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token (got an empty prompt)")
        start = time.perf_counter()
        bl, device, dtype = block_length, self.runner.device, self.runner.dtype
        strategy = STRATEGIES[config.strategy]
        generator = None
        if config.temperature > 0 and config.seed is not None:
            generator = torch.Generator(device=device).manual_seed(config.seed)
        num_forwards = 0

        def forward(
            ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, logits: bool, last: int = 0
        ) -> torch.Tensor:
            nonlocal num_forwards
            num_forwards += 1
            return self.runner.forward(ids, mask, pos, cache, logits=logits, last=last)

        # 1. layout: whole prompt blocks go to the prefill, left-padded to a common multiple of bl
        whole = [len(p) // bl * bl for p in prompts]
        prefix_len = max(whole)  # C, a multiple of bl
        rows = [
            RowState(index=i, pad=prefix_len - w, tail=list(p[w:]))
            for i, (p, w) in enumerate(zip(prompts, whole, strict=True))
        ]
        pad = torch.tensor([r.pad for r in rows], device=device)  # (B,)
        longest = max(len(r.tail) for r in rows) + config.max_new_tokens
        cache = self.runner.new_cache(len(rows), prefix_len + (-(-longest // bl) + 1) * bl)

        # 2. prefill: (B, C) tokens, block-causal mask, K/V kept
        col = torch.arange(prefix_len, device=device)
        valid = col[None, :] >= pad[:, None]  # (B, C) bool
        if prefix_len > 0:
            ids = torch.full((len(rows), prefix_len), self.pad_id, dtype=torch.long, device=device)
            for r, p, w in zip(rows, prompts, whole, strict=True):
                ids[r.index, r.pad :] = torch.tensor(list(p[:w]), dtype=torch.long, device=device)
            pos = (col[None, :] - pad[:, None]).clamp(min=0)  # (B, C)
            forward(ids, block_causal_mask(valid, bl, dtype), pos, logits=False)
        if device.type == "cuda":
            torch.cuda.synchronize()  # sync point: only to time the prefill apart from the decode
        prefill_seconds = time.perf_counter() - start

        # 3. one block at a time until every row has finished
        active = list(rows)
        block_start = prefix_len  # column of the current block
        pending: tuple[torch.Tensor, torch.Tensor] | None = None  # fuse_commit: (tokens, pos) to commit
        while active:
            if should_stop is not None and should_stop():
                for r in active:
                    r.finish = "cancelled"
                break
            b = len(active)
            x = self._open_block(active, bl)  # (b, bl): tail, then masks
            is_masked = x == self.mask_id  # (b, bl); prompt tail is fixed
            quotas = quota_schedule(is_masked.sum(dim=1), config.denoising_steps)  # (b, S)
            revealed_at = torch.full((b, bl), -1, dtype=torch.long, device=device)
            revealed_p = torch.ones(b, bl, dtype=torch.float32, device=device)  # a prompt tail's stays 1
            valid = torch.cat([valid, torch.ones(b, bl, dtype=torch.bool, device=device)], dim=1)  # (b, K)
            mask = block_query_mask(valid, bl, dtype)  # (b, 1, bl, K)
            pad = torch.tensor([r.pad for r in active], device=device)  # (b,)
            pos = (block_start + torch.arange(bl, device=device))[None, :] - pad[:, None]  # (b, bl)

            # 3a. denoise: at most `denoising_steps` forwards; each step's K/V is cropped away
            step = 0
            row_steps = torch.zeros(b, dtype=torch.long, device=device)  # steps each row spent denoising
            steps_before = torch.tensor([r.steps_done for r in active], device=device)  # (b,)
            cancelled = False
            while bool(is_masked.any()):  # sync point (GPU -> CPU)
                if should_stop is not None and should_stop():
                    cancelled = True
                    break
                if pending is not None:
                    # fused commit: the previous block's final tokens ride along with this block's first
                    # step; the previous block cannot see this one (blocks are causal), so its K/V equal
                    # a separate commit's, and the crop below keeps exactly them
                    fused = block_query_mask(valid, 2 * bl, dtype)  # (b, 1, 2bl, K)
                    fused[:, :, :bl, -bl:] = torch.finfo(dtype).min
                    logits = forward(
                        torch.cat([pending[0], x], 1), fused, torch.cat([pending[1], pos], 1), True, last=bl
                    )  # (b, bl, V): the new block's logits only
                    pending = None
                else:
                    logits = forward(x, mask, pos, logits=True)  # (b, bl, V)
                self.runner.crop(cache, block_start)
                tokens, confidence = sample_tokens(
                    logits, config.temperature, config.top_k, config.top_p, generator
                )  # (b, bl), (b, bl)
                quota = quotas[:, min(step, quotas.shape[1] - 1)].clamp(min=1)  # (b,)
                reveal = strategy(confidence, is_masked, quota, config.threshold)  # (b, bl) bool
                x = torch.where(reveal, tokens, x)
                # a row's step index counts only the steps in which it still had masks, so a row's
                # step map is the same alone and in a batch
                revealed_at = torch.where(reveal, (steps_before + row_steps)[:, None], revealed_at)
                revealed_p = torch.where(reveal, confidence, revealed_p)
                row_steps += is_masked.any(dim=1).long()
                is_masked &= ~reveal
                step += 1
            if cancelled:
                for r in active:
                    r.finish = "cancelled"
                break

            # 3b. commit: one forward with the final tokens; its K/V stays in the cache (with
            #     fuse_commit it is deferred into the next block's first forward, or never needed)
            if config.fuse_commit:
                pending = (x, pos)
            else:
                forward(x, mask, pos, logits=False)
            block_start += bl

            # 3c. bookkeeping on the CPU: append, per-row step counts, stop checks; finished rows leave
            self.close_block(active, x, revealed_at, row_steps, config, revealed_p)
            if on_block is not None:
                on_block([r.tokens for r in rows], num_forwards)
            keep = [i for i, r in enumerate(active) if r.finish is None]
            if len(keep) < len(active):
                if keep:
                    self.runner.select_rows(cache, torch.tensor(keep, device=device))
                valid = valid[keep]
                active = [active[i] for i in keep]
                if pending is not None:
                    pending = (pending[0][keep], pending[1][keep])

        for r in rows:
            if not r.text:
                r.text = self.decode(r.tokens)
        return BatchResult(
            rows=tuple(
                RowResult(
                    tuple(r.tokens),
                    tuple(r.step_map),
                    r.text,
                    r.finish or "length",
                    tuple(r.block_tokens),
                    tuple(r.block_step_map),
                    tuple(r.block_logprobs),
                )
                for r in rows
            ),
            num_forwards=num_forwards,
            seconds=time.perf_counter() - start,
            prefill_seconds=prefill_seconds,
        )

    def _open_block(self, active: Sequence[RowState], bl: int) -> torch.Tensor:
        """The new block's tokens (b, bl): each row's prompt tail (first block only), then masks."""
        x = torch.full((len(active), bl), self.mask_id, dtype=torch.long)
        for i, r in enumerate(active):
            if r.tail:
                x[i, : len(r.tail)] = torch.tensor(r.tail, dtype=torch.long)
        return x.to(self.runner.device)

    def close_block(
        self,
        active: Sequence[RowState],
        x: torch.Tensor,
        revealed_at: torch.Tensor,
        row_steps: torch.Tensor,
        config: SamplerConfig,
        revealed_p: torch.Tensor | None = None,
    ) -> None:
        """Append the block's generated tokens and step indices to each row; apply stop rules.
        `revealed_p` (b, bl), when given: the probability each token was drawn with, appended to
        `block_logprobs` as its log. (Also the continuous batching engine's bookkeeping,
        `cudice.model.batching`: the rows whose blocks close in one iteration, one call per sampler
        config; it records no probabilities.)"""
        x_cpu, at_cpu, steps_cpu = x.tolist(), revealed_at.tolist(), row_steps.tolist()  # sync point
        logp_cpu = None if revealed_p is None else revealed_p.double().log().tolist()
        bl = x.shape[1]
        for i, r in enumerate(active):
            first_new = len(r.tail)
            r.tokens.extend(x_cpu[i][first_new:])
            r.step_map.extend(at_cpu[i][first_new:])
            r.block_tokens.extend(x_cpu[i][first_new:])
            r.block_step_map.extend(at_cpu[i][first_new:])
            if logp_cpu is not None:
                r.block_logprobs.extend(logp_cpu[i][first_new:])
            r.steps_done += int(steps_cpu[i])
            r.tail = []
            self._check_stop(r, config, bl - first_new)

    def _check_stop(self, r: RowState, config: SamplerConfig, num_new: int) -> None:
        """Trim row `r` at the first stop token / stop string / token limit, and mark it finished."""
        new_from = len(r.tokens) - num_new
        for k in range(new_from, len(r.tokens)):
            if r.tokens[k] in self.stop_ids:
                del r.tokens[k:], r.step_map[k:]
                r.finish = "eos"
                break
        if config.stop_strings and r.finish is None:
            cut = self._stop_string_cut(r.tokens, new_from, config.stop_strings)
            if cut is not None:
                keep, text = cut
                del r.tokens[keep:], r.step_map[keep:]
                r.finish, r.text = "stop_string", text
        if len(r.tokens) >= config.max_new_tokens and r.finish is None:
            del r.tokens[config.max_new_tokens :], r.step_map[config.max_new_tokens :]
            r.finish = "length"

    def _stop_string_cut(
        self, tokens: list[int], new_from: int, stop_strings: Sequence[str]
    ) -> tuple[int, str] | None:
        """If a stop string appears in the text: (tokens to keep, text cut before the stop string)."""
        # Only the new tokens plus a look-back window can complete a stop string (a token is >= 1 byte).
        window = max(len(s.encode()) for s in stop_strings) + 8
        lo = max(0, new_from - window)
        if not any(s in self.decode(tokens[lo:]) for s in stop_strings):
            return None
        for k in range(max(new_from, 1), len(tokens) + 1):  # shortest prefix that holds a stop string
            if any(s in self.decode(tokens[lo:k]) for s in stop_strings):
                text = self.decode(tokens[:k])
                at = min(i for i in (text.find(s) for s in stop_strings) if i >= 0)
                return k, text[:at]
        return None
