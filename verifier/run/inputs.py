"""Correctness inputs: a secret seed per run, and input distributions applied where values are drawn.

The judge draws a fresh seed from the OS (`secrets`) for every run and every trial, so a
candidate's `__init__` cannot precompute outputs for known inputs, and calls `make_inputs` once
per trial. While the reference's `get_inputs()` runs, torch's random factories are replaced by
seeded ones that draw from private generators and then reshape what they drew by one of
`DISTRIBUTIONS`. Whatever `get_inputs()` then does with those values (`tril`, `A @ A.T + n*I`,
`softmax`, `sort`, `F.normalize`, `F.one_hot`, `clamp`) runs as written, so the inputs keep the
structure the problem defines: a lower-triangular operand stays lower-triangular.

- `as_given`   — the values the factory gives, seeded by the secret seed;
- `wide`       — the drawn values times 32 (times 4 in 16-bit formats): exp-based code that skips
                 the max subtraction overflows, code assuming |x| < 1 breaks;
- `positive`   — uniform in [0.05, 2.05): every value on one side of zero;
- `shifted`    — the drawn values scaled and offset per slice: offset (1 to 9, around 5) and
                 scale (0.2 to 5) follow a trend plus jitter along dim 0 (the batch), dim 1 and dim -2
                 (the rows), constant along the last dim. Per-sample and per-row statistics
                 differ, so statistics taken over the wrong elements (fixed chunks of the
                 flattened tensor, another sample, the wrong axis) no longer average out;
- `structured` — the first slice along dim 0 repeated (in 32- and 64-bit formats each copy moved
                 by its own offset below 0.01: nothing ties along dim 0), plus a ramp of width 6
                 along the last dim ([-1, 5] in 32- and 64-bit formats, so the rows' sums do not cancel;
                 [-3, 3] in 16-bit ones; [0, 6] for non-negative draws): rows alike, columns not;
- `outliers`   — the values as given, except two per tensor (`OUTLIER_COUNT`) at random
                 positions, 3 more in magnitude and then times 32 (times 4 in 16-bit formats); one
                 keeps its sign, the other is made positive (so `exp` overflows on one whatever
                 the draw). A kernel cannot tell these inputs from `as_given` by reading a sample
                 of k values but with odds of about 2k/numel (a share of the values, as once, gave
                 a 32-value probe of a 64x4096 softmax input 3 % odds), so one that takes a shortcut
                 (no max subtraction in a softmax) wherever a sample of its inputs looks tame, and
                 the robust path only where it looks `wide`, meets the values it breaks on.

Contract:
- every distribution keeps the sign of what a factory draws where it is all non-negative
  (`rand`, `exponential_`), so probabilities built from them stay probabilities;
- continuous factories (`torch.randn`, `rand`, `randn_like`, `rand_like`, `normal`;
  `Tensor.normal_`, `uniform_`, `exponential_`, `log_normal_`, `cauchy_`) get the distribution;
  discrete ones (`randint`, `randint_like`, `randperm`, `bernoulli`, `multinomial`, `poisson`;
  `Tensor.random_`, `bernoulli_`, `geometric_`) keep their values as drawn. Each kind draws from
  its own stream, so indices, labels and masks are the same under every distribution of a seed;
- a `generator=` passed by `get_inputs()` is replaced, and `torch.manual_seed` / `torch.seed`
  inside it do nothing: the inputs follow the secret seed alone. Torch's global generators are
  seeded with it too (for draws no factory above makes) and restored afterwards;
- the same (`get_inputs`, seed, dist, device) gives bit-identical tensors in any process;
- tensors made without a random factory (`ones`, `arange`, `tensor`) are left as made;
  `torch.empty` memory is uninitialised, neither seeded nor reshaped;
- tensors are drawn where `get_inputs()` puts them (its own `device=` is honoured), and the
  top-level tensors it returns are moved to `device`;
- a `get_inputs()` that raises raises `InputsError`, which names the reference and says whether
  it fails only under this distribution (a caller may skip that distribution then).

Not covered: randomness outside torch's factories (numpy, `random`), factories reached another
way than through `torch`, `torch.Tensor` or the names of `get_inputs`'s module (`torch.ops.aten`:
those draw from the seeded global generator, unshaped), complex dtypes (seeded, not reshaped),
shapes other than the reference's. The factories are replaced process-wide while `get_inputs()`
runs; a lock serialises `make_inputs`, but another thread drawing meanwhile draws from them.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

DISTRIBUTIONS = ("as_given", "wide", "positive", "shifted", "structured", "outliers")
OUTLIER_COUNT = 2  # `outliers`: how many values per tensor are made large, at random positions

# torch factory names by what happens to their values
_CONTINUOUS: tuple[str, ...] = ("randn", "rand", "randn_like", "rand_like", "normal")
_DISCRETE: tuple[str, ...] = ("randint", "randint_like", "randperm", "bernoulli", "multinomial", "poisson")
_CONTINUOUS_METHODS: tuple[str, ...] = ("normal_", "uniform_", "exponential_", "log_normal_", "cauchy_")
_DISCRETE_METHODS: tuple[str, ...] = ("random_", "bernoulli_", "geometric_")
# submodule of torch -> its seeding functions, which do nothing inside get_inputs()
_SEEDERS: dict[str, tuple[str, ...]] = {
    "": ("manual_seed", "seed"),
    "random": ("manual_seed", "seed"),
    "cuda": ("manual_seed", "manual_seed_all", "seed", "seed_all"),
}

# private streams: continuous values, discrete values, the distributions' own draws
_BASE, _DISCRETE_STREAM, _SHAPING = 0, 1, 2
_GOLDEN = 0x9E3779B97F4A7C15  # odd 64-bit constant: one well-spread seed per stream

_LOCK = threading.Lock()


class InputsError(RuntimeError):
    """The reference's `get_inputs()` raised; `only_under_dist` when it works on `as_given` values."""

    def __init__(self, message: str, dist: str, only_under_dist: bool) -> None:
        super().__init__(message)
        self.dist = dist
        self.only_under_dist = only_under_dist


def secret_seed() -> int:
    """63 bits from the OS's random source; never derived from a constant or the clock."""
    return secrets.randbits(63)


def make_inputs(
    get_inputs: Callable[[], Any], seed: int, dist: str, device: str, *, draw_on_device: bool = False
) -> list[Any]:
    """Run `get_inputs()` with seeded, `dist`-shaped random factories; tensors moved to `device`.

    Returns the list `get_inputs()` returned (shapes and dtypes as it made them). Raises
    `ValueError` for an unknown `dist` and `InputsError` when `get_inputs()` raises.
    `draw_on_device`: factories without a device draw on `device` itself (`torch.device` as the
    default device): a large input is then drawn in microseconds instead of seconds on the CPU.
    Other values than a CPU draw, equally seeded; where `get_inputs()` fails that way, it runs again
    on the CPU. Only the reference's own distribution ("as_given") draws on the device: another
    may break a precondition of `get_inputs()` (probabilities in [0, 1] for `bernoulli`), which on
    a GPU is a device-side assertion that ends the process's CUDA context, not an exception; on the
    CPU it raises, and the distribution is skipped (`InputsError.only_under_dist`).
    """
    import torch

    if dist not in DISTRIBUTIONS:
        raise ValueError(
            f"unknown input distribution {dist!r}; use one of {', '.join(DISTRIBUTIONS)} (run/inputs.py)"
        )
    try:
        values = None
        if draw_on_device and device != "cpu" and dist == "as_given":
            with contextlib.suppress(Exception):  # e.g. a get_inputs() that needs CPU tensors
                values = _run(get_inputs, seed, dist, device)
        if values is None:
            values = _run(get_inputs, seed, dist)
    except Exception as exc:
        only_here = dist != "as_given" and _runs(get_inputs, seed, "as_given")
        why = (
            f"it runs on the factories' own values, so the '{dist}' values break one of its preconditions "
            "(probabilities in [0, 1]?); clamp them in get_inputs() to have this distribution tested too"
            if only_here
            else "fix the reference's get_inputs()"
        )
        message = (
            f"the reference's get_inputs() ({_where(get_inputs)}) raised {type(exc).__name__}: {exc} "
            f"under the '{dist}' input distribution; {why}"
        )
        raise InputsError(message, dist, only_here).with_traceback(exc.__traceback__) from exc
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in values]


def _runs(get_inputs: Callable[[], Any], seed: int, dist: str) -> bool:
    try:
        _run(get_inputs, seed, dist)
    except Exception:
        return False
    return True


def _run(get_inputs: Callable[[], Any], seed: int, dist: str, default_device: str | None = None) -> list[Any]:
    import torch

    is_initialized = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    cuda = list(range(torch.cuda.device_count())) if is_initialized else []
    with _LOCK, torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed % 2**63)  # draws no factory below makes: seeded, the caller's state restored
        where = _default_device(default_device) if default_device else contextlib.nullcontext()
        with _patched(_Draws(seed, dist), get_inputs), where:
            return list(get_inputs())


def _default_device(device: str) -> Any:
    """`torch.device(device)`, to enter as the factories' default device, with torch's own factory
    set made sure of first.

    torch's default-device mode recognises factories by a set it builds once, at its first use,
    from torch's attributes (`torch.utils._device._device_constructors`, cached). Built while the
    replacements of `_patched` are installed, it holds those instead of torch's functions: from
    then on no factory in the process gets the default device, every draw on the device raises
    inside `get_inputs()` and falls back to the CPU, silently (seconds per large input). So the set
    is checked, and rebuilt, here, before the replacements go in."""
    import torch

    with contextlib.suppress(Exception):  # a private helper of torch's; without it draws are slower only
        from torch.utils._device import _device_constructors

        if torch.randn not in _device_constructors():
            _device_constructors.cache_clear()
            _device_constructors()
    return torch.device(device)


def _where(get_inputs: Callable[[], Any]) -> str:
    code = getattr(get_inputs, "__code__", None)
    name = f"{getattr(get_inputs, '__module__', '?')}.{getattr(get_inputs, '__qualname__', '?')}"
    return f"{name}, {code.co_filename}:{code.co_firstlineno}" if code is not None else name


class _Draws:
    """Seeded replacements of torch's random factories for one `make_inputs` call."""

    def __init__(self, seed: int, dist: str) -> None:
        import torch

        self.dist = dist
        self.seed = seed
        self.rand = torch.rand  # the original, for the distributions' own draws
        self.gens: dict[tuple[int, str], Any] = {}

    def gen(self, stream: int, device: Any) -> Any:
        import torch

        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        key = (stream, str(device))
        if key not in self.gens:
            g = torch.Generator(device=device)
            g.manual_seed((self.seed + (stream + 1) * _GOLDEN) % 2**64)
            self.gens[key] = g
        return self.gens[key]

    def factory(self, fn: Callable[..., Any], stream: int) -> Callable[..., Any]:
        def drawn(*args: Any, **kwargs: Any) -> Any:
            args = _without_generators(args)
            kwargs["generator"] = self.gen(stream, _device_of(args, kwargs))
            out = fn(*args, **kwargs)
            if stream == _BASE:
                self.shape_(out)
            return out

        return drawn

    def method(self, fn: Callable[..., Any], stream: int) -> Callable[..., Any]:
        def drawn(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            args = _without_generators(args)
            kwargs["generator"] = self.gen(stream, tensor.device)
            out = fn(tensor, *args, **kwargs)
            if stream == _BASE:
                self.shape_(tensor)
            return out

        return drawn

    def shape_(self, x: Any) -> None:
        """Replace freshly drawn values, in place, by their `self.dist` version."""
        import torch

        if self.dist == "as_given" or not isinstance(x, torch.Tensor) or not x.is_floating_point():
            return
        if x.numel() == 0:
            return
        with torch.no_grad():
            x.copy_(self.shaped(x))

    def shaped(self, x: Any) -> Any:
        import torch

        work = x.double() if x.dtype == torch.float64 else x.float()
        if self.dist == "wide":
            return work * (4.0 if x.element_size() <= 2 else 32.0)
        if self.dist == "positive":
            return self.uniform(tuple(x.shape), x.device, work.dtype) * 2.0 + 0.05
        if self.dist == "shifted":
            offset, log2_scale = self.profile(tuple(x.shape), x.device, work.dtype)
            return work * torch.exp2(log2_scale) + offset
        if self.dist == "outliers":
            draws = self.uniform(tuple(x.shape), x.device, work.dtype).view(-1)
            at = draws.topk(min(OUTLIER_COUNT, x.numel()), largest=False).indices
            picked = torch.zeros_like(draws, dtype=torch.bool)
            picked[at] = True
            picked = picked.view(x.shape)
            # 3 draws' worth more before the factor: each one large (exp(96) overflows fp32), and no
            # two alike (an honest argmax that breaks ties its own way would be rejected)
            sign = torch.where(work < 0, -1.0, 1.0)
            sign.view(-1)[at[0]] = 1.0  # one positive whatever was drawn there
            big = sign * (work.abs() + 3.0)
            return torch.where(picked, big * (4.0 if x.element_size() <= 2 else 32.0), work)
        assert self.dist == "structured", self.dist
        if x.dim() == 0:
            return work
        rows = work[:1].expand_as(work) if x.dim() >= 2 else work
        if x.dim() >= 2 and x.element_size() >= 4:
            # each repeated slice moved by its own offset in [0, 0.01): rows alike, but no exact
            # ties along dim 0, where an honest argmax/max/sort that breaks ties its own way (the
            # last index, a parallel reduction) was rejected on every column
            view = [x.shape[0]] + [1] * (x.dim() - 1)
            rows = rows + 0.01 * self.uniform((x.shape[0],), x.device, work.dtype).view(view)
        # non-negative draws (`rand`) stay so; signed ones keep both signs. In 32- and 64-bit formats
        # the ramp does not sum to zero: with every row alike, each row's sum is one scalar for the
        # whole output, and a ramp of [-3, 3] made it a cancellation whose fp32 rounding (honest, in
        # any summation order) was up to 1e-3 of the result, above the precision bound that holds
        # those formats (run/tolerance.py): 5 of 30 honest one-by-one row sums of 1024 columns were
        # rejected that way. 16-bit formats have no such bound, and a mean of 2 would overflow fp16
        # in a matmul over K = 4096 or a row sum over 32k columns: they keep [-3, 3]
        if bool((work >= 0).all()):
            low = 0.0
        else:
            low = -3.0 if x.element_size() <= 2 else -1.0
        return rows + torch.linspace(low, low + 6.0, x.shape[-1], device=x.device, dtype=work.dtype)

    def uniform(self, shape: tuple[int, ...], device: Any, dtype: Any) -> Any:
        return self.rand(shape, generator=self.gen(_SHAPING, device), device=device, dtype=dtype)

    def profile(self, shape: tuple[int, ...], device: Any, dtype: Any) -> tuple[Any, Any]:
        """Per-slice offset and log2 scale, broadcastable to `shape`, constant along the last dim."""
        import torch

        ndim = len(shape)
        varied = sorted({0, 1, ndim - 2} & set(range(ndim - 1))) if ndim >= 2 else list(range(ndim))
        offset = torch.full((1,) * ndim, 5.0, device=device, dtype=dtype)
        log2_scale = torch.zeros((1,) * ndim, device=device, dtype=dtype)
        share = 1.0 / max(len(varied), 1)  # the offsets' spread shared by the varied dims: in [1, 9]
        for d in varied:
            n, view = shape[d], [1] * ndim
            view[d] = n
            ramp = torch.linspace(-1.0, 1.0, n, device=device, dtype=dtype)
            # a trend of random direction and strength, so that contiguous chunks see different
            # means and scales, plus jitter, so that neighbouring slices differ too
            slope = self.uniform((2,), device, dtype) * 2 - 1
            jitter = self.uniform((2, n), device, dtype) * 2 - 1
            trend = slope[0].sign() * (0.5 + 0.5 * slope[0].abs()) * ramp
            offset = offset + (share * (2.5 * trend + 1.5 * jitter[0])).view(view)
            log2_scale = log2_scale + (0.5 * slope[1] * ramp + 0.25 * jitter[1]).view(view)
        return offset, log2_scale


def _without_generators(args: tuple[Any, ...]) -> tuple[Any, ...]:
    import torch

    return tuple(a for a in args if not isinstance(a, torch.Generator))


def _device_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Where a factory call puts its result: `device=`, `out=`, its tensor input or the default."""
    import torch

    if kwargs.get("device") is not None:
        return kwargs["device"]
    for value in (kwargs.get("out"), *args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value.device
    return torch.get_default_device()


@contextlib.contextmanager
def _patched(draws: _Draws, get_inputs: Callable[[], Any]) -> Iterator[None]:
    """Replace the factories on `torch`, `torch.Tensor` and in `get_inputs`'s globals; restore them after."""
    import torch

    def skip_seed(*args: Any, **kwargs: Any) -> None:
        return None

    swaps: list[tuple[Any, str, Any]] = []  # (owner, name, replacement)
    for names, stream in ((_CONTINUOUS, _BASE), (_DISCRETE, _DISCRETE_STREAM)):
        swaps += [(torch, n, draws.factory(getattr(torch, n), stream)) for n in names]
    for names, stream in ((_CONTINUOUS_METHODS, _BASE), (_DISCRETE_METHODS, _DISCRETE_STREAM)):
        swaps += [(torch.Tensor, n, draws.method(getattr(torch.Tensor, n), stream)) for n in names]
    for sub, names in _SEEDERS.items():
        owner = getattr(torch, sub) if sub else torch
        swaps += [(owner, n, skip_seed) for n in names]
    replacement = {id(getattr(owner, n)): new for owner, n, new in swaps}
    module_globals = getattr(get_inputs, "__globals__", {})
    local = [(k, replacement[id(v)]) for k, v in module_globals.items() if id(v) in replacement]

    saved = [(owner, n, owner.__dict__.get(n, _ABSENT)) for owner, n, _ in swaps]
    saved_globals = [(k, module_globals[k]) for k, _ in local]
    try:
        for owner, n, new in swaps:
            setattr(owner, n, new)
        module_globals.update(local)
        yield
    finally:
        for owner, n, old in reversed(saved):
            if old is _ABSENT:
                delattr(owner, n)  # the attribute was inherited (torch.Tensor from its C base)
            else:
                setattr(owner, n, old)
        module_globals.update(saved_globals)


_ABSENT = object()
