"""The one settings schema shared by the server, the VS Code extension and the Neovim plugin.

Keys are dotted (`cudice.model.path`) as VS Code shows them; the server reads them from
`initializationOptions` (nested or flat) and `workspace/configuration` (section `cudice`).
`settings_json_schema()` exports the schema; `editors/` checks its keys against it (a test).

Bad values never crash the server: `parse_settings` keeps the default for each bad key and
returns a warning that names the key, the bad value, the rule and the default used.

Each default is written once. The sampler's and the verifier's come from the run-time configs
they feed (`SamplerConfig`, `VerifyConfig`: what `cudice generate` / `cudice verify` use without
an editor), the strategy names from `cudice.model.config.STRATEGY_NAMES`, the strictness levels
from `cudice.verifier.static.policy.Strictness`; the rest are written in `SCHEMA` below.
`Settings` takes every field's default from `SCHEMA` and validates its values against it.
Not covered: `cudice.sampler.blockLength`, whose editor default (4, DICE's) is deliberately not
`SamplerConfig`'s (None: the checkpoint's block size).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal

from cudice.model.config import STRATEGY_NAMES, SamplerConfig
from cudice.server.log_levels import LOG_LEVELS
from cudice.verifier.config import VerifyConfig
from cudice.verifier.static.policy import Strictness

DEVICES = ("auto", "cuda", "cpu")
DTYPES = ("auto", "bfloat16", "float16", "float32")
# cudice.model.fast -> load_engine(fast=...): None is the fast path where the model sits on a GPU
FAST_MODES: dict[str, bool | None] = {"auto": None, "on": True, "off": False}
STRICTNESS = tuple(s.value for s in Strictness)  # the verifier's static policies (docs/anticheat.md)
# LOG_LEVELS live in log_levels.py: a bare `cudice-lsp --log-level` checks them before this module loads


@dataclass(frozen=True, slots=True)
class Setting:
    """One key of the schema: JSON type, default, bounds or choices, and its description."""

    key: str
    type: Literal["string", "integer", "number", "boolean"]
    default: Any
    description: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None

    def check(self, value: Any) -> str | None:
        """Return why `value` is invalid for this key, or None when it is fine."""
        article = "an" if self.type == "integer" else "a"
        if isinstance(value, bool) and self.type in ("integer", "number"):
            return f"expected {article} {self.type}, got a boolean"
        if not _has_json_type(value, self.type):
            return f"expected {article} {self.type}, got {type(value).__name__}"
        if self.choices and value not in self.choices:
            return f"must be one of {', '.join(self.choices)}"
        if self.minimum is not None and value < self.minimum:
            return f"must be >= {self.minimum}"
        if self.maximum is not None and value > self.maximum:
            return f"must be <= {self.maximum}"
        return None


_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def _has_json_type(value: Any, json_type: str) -> bool:
    return isinstance(value, _PY_TYPES[json_type])


def _defaults(config: type) -> dict[str, Any]:
    """The field defaults of a config dataclass (the sampler's and the verifier's, for SCHEMA)."""
    return {f.name: f.default for f in dataclasses.fields(config) if f.default is not dataclasses.MISSING}


_SAMPLER, _VERIFY = _defaults(SamplerConfig), _defaults(VerifyConfig)

SCHEMA: tuple[Setting, ...] = (
    Setting(
        "cudice.model.path",
        "string",
        "",
        "DICE/SDAR checkpoint directory or a hub id already in the local cache. Empty: cudice's "
        "bundled demo model (small; only the problem families of its corpus, see `cudice model info`).",
    ),
    Setting(
        "cudice.model.device",
        "string",
        "auto",
        "Device for the model: auto picks CUDA when present.",
        choices=DEVICES,
    ),
    Setting(
        "cudice.model.dtype",
        "string",
        "auto",
        "Model dtype: auto is bfloat16 on CUDA, float32 on CPU.",
        choices=DTYPES,
    ),
    Setting(
        "cudice.model.fast",
        "string",
        "auto",
        "Decoding fast path (static KV cache, compiled layers, CUDA graphs; the same tokens as the "
        "eager path): auto uses it where the model sits on a GPU, off forces the eager path.",
        choices=tuple(FAST_MODES),
    ),
    Setting(
        "cudice.model.loadOnStart",
        "boolean",
        True,
        "Load the model when the server starts. Off: it loads on the first generate or infill "
        "(the Neovim plugin's default, so that editing Python files never costs a model load).",
    ),
    Setting(
        "cudice.sampler.blockLength",
        "integer",
        4,
        "Block-diffusion block length (DICE uses 4).",
        minimum=1,
        maximum=64,
    ),
    Setting(
        "cudice.sampler.denoisingSteps",
        "integer",
        _SAMPLER["denoising_steps"],
        "Denoising steps per block.",
        minimum=1,
        maximum=64,
    ),
    Setting(
        "cudice.sampler.strategy",
        "string",
        _SAMPLER["strategy"],
        "Which masked tokens to reveal at each denoising step.",
        choices=STRATEGY_NAMES,
    ),
    Setting(
        "cudice.sampler.threshold",
        "number",
        _SAMPLER["threshold"],
        "Confidence above which the dynamic strategy reveals a token.",
        minimum=0.0,
        maximum=1.0,
    ),
    Setting(
        "cudice.sampler.temperature",
        "number",
        _SAMPLER["temperature"],
        "Sampling temperature; 0 is greedy.",
        minimum=0.0,
        maximum=2.0,
    ),
    Setting("cudice.sampler.topK", "integer", _SAMPLER["top_k"], "Top-k filter; 0 disables it.", minimum=0),
    Setting(
        "cudice.sampler.topP",
        "number",
        _SAMPLER["top_p"],
        "Nucleus (top-p) filter; 1 disables it.",
        minimum=0.0,
        maximum=1.0,
    ),
    Setting(
        "cudice.sampler.maxNewTokens",
        "integer",
        _SAMPLER["max_new_tokens"],
        "Most tokens one generation may produce.",
        minimum=1,
        maximum=32768,
    ),
    Setting("cudice.verify.onSave", "boolean", True, "Verify a KernelBench candidate each time it is saved."),
    Setting(
        "cudice.verify.compileOnly",
        "boolean",
        _VERIFY["compile_only"],
        "Only run static checks and compile, never the kernel (automatic on machines without a GPU).",
    ),
    Setting(
        "cudice.verify.trials",
        "integer",
        _VERIFY["num_trials"],
        "Correctness trials with fresh seeded inputs.",
        minimum=1,
        maximum=100,
    ),
    Setting(
        "cudice.verify.atol",
        "number",
        _VERIFY["atol"],
        "Absolute tolerance of the correctness check.",
        minimum=0.0,
    ),
    Setting(
        "cudice.verify.rtol",
        "number",
        _VERIFY["rtol"],
        "Relative tolerance of the correctness check.",
        minimum=0.0,
    ),
    Setting(
        "cudice.verify.timeoutSeconds",
        "number",
        _VERIFY["timeout_s"],
        "Wall-clock limit of a verification's run (load, correctness, timing); the whole "
        "verification, compile included, is stopped past twice this plus 30 s (a run that ran out "
        "of GPU memory is repeated once, holding the GPU alone).",
        minimum=1.0,
    ),
    Setting(
        "cudice.verify.quickCheckTimeoutSeconds",
        "number",
        60.0,
        "Longest wait for the quick check's (clangd) diagnostics once clangd is warm; the first check "
        "after start may take 10 minutes (torch-header preamble), a worker still using CPU is never "
        "killed, and the full build's diagnostics follow either way.",
        minimum=1.0,
    ),
    Setting(
        "cudice.verify.requiredSpeedup",
        "number",
        _VERIFY["required_speedup"],
        "Speedup over PyTorch a kernel must clear to be shown as fast.",
        minimum=0.0,
    ),
    Setting(
        "cudice.verify.strictness",
        "string",
        _VERIFY["static_policy"],
        "Static anti-cheat policy, as `cudice verify --strictness` (docs/anticheat.md).",
        choices=STRICTNESS,
    ),
    Setting(
        "cudice.logLevel",
        "string",
        "info",
        "Server log level (the log goes to the LSP output).",
        choices=LOG_LEVELS,
    ),
)

_BY_KEY = {s.key: s for s in SCHEMA}


def _attr(key: str) -> str:
    """`cudice.sampler.topK` -> `sampler_top_k`."""
    parts = key.split(".")[1:]
    snake = []
    for part in parts:
        snake.append("".join("_" + c.lower() if c.isupper() else c for c in part))
    return "_".join(snake)


_BY_ATTR = {_attr(s.key): s for s in SCHEMA}


def _default(attr: str) -> Any:
    return _BY_ATTR[attr].default


@dataclass(frozen=True, slots=True)
class Settings:
    """Validated settings. Field names are the keys in snake case without the `cudice.` prefix;
    every default is the schema's, and a value the schema rejects raises `ValueError`
    (`parse_settings` is the lenient way in: it keeps the default and warns)."""

    model_path: str = _default("model_path")
    model_device: str = _default("model_device")
    model_dtype: str = _default("model_dtype")
    model_fast: str = _default("model_fast")
    model_load_on_start: bool = _default("model_load_on_start")
    sampler_block_length: int = _default("sampler_block_length")
    sampler_denoising_steps: int = _default("sampler_denoising_steps")
    sampler_strategy: str = _default("sampler_strategy")
    sampler_threshold: float = _default("sampler_threshold")
    sampler_temperature: float = _default("sampler_temperature")
    sampler_top_k: int = _default("sampler_top_k")
    sampler_top_p: float = _default("sampler_top_p")
    sampler_max_new_tokens: int = _default("sampler_max_new_tokens")
    verify_on_save: bool = _default("verify_on_save")
    verify_compile_only: bool = _default("verify_compile_only")
    verify_trials: int = _default("verify_trials")
    verify_atol: float = _default("verify_atol")
    verify_rtol: float = _default("verify_rtol")
    verify_timeout_seconds: float = _default("verify_timeout_seconds")
    verify_quick_check_timeout_seconds: float = _default("verify_quick_check_timeout_seconds")
    verify_required_speedup: float = _default("verify_required_speedup")
    verify_strictness: str = _default("verify_strictness")
    log_level: str = _default("log_level")

    def __post_init__(self) -> None:
        for attr, setting in _BY_ATTR.items():
            value = getattr(self, attr)
            problem = setting.check(value)
            if problem:
                raise ValueError(
                    f"Settings.{attr}={value!r} is invalid: {setting.key} {problem}; "
                    f"pass a valid value or leave it out for the default {setting.default!r}"
                )


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """`{"cudice": {"model": {"path": x}}}` and `{"model": {"path": x}}` -> `{"cudice.model.path": x}`."""
    out: dict[str, Any] = {}
    if not isinstance(obj, dict):
        return out
    for k, v in obj.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(_flatten(v, key))
        elif v == [] and _is_section(key):  # a Lua client's empty table arrives as a JSON array
            continue
        else:
            out[key] = v
    return out


def _is_section(key: str) -> bool:
    """Whether `key` ("cudice", "model", "cudice.verify") names a group of settings, not one setting."""
    full = key if key == "cudice" or key.startswith("cudice.") else f"cudice.{key}"
    return any(k.startswith(full + ".") for k in _BY_KEY)


def parse_settings(raw: Any, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Validate client-sent settings; return the settings and one warning per rejected key.

    `raw` may be nested or flat, with or without the `cudice` prefix. Unknown keys are
    reported (they are usually typos) and ignored. Keys absent from `raw` keep `base`'s value.
    """
    base = base or Settings()
    values: dict[str, Any] = {}
    warnings: list[str] = []
    if raw is None or raw == []:  # [] is how a Lua client encodes an empty table
        return base, warnings
    if not isinstance(raw, dict):
        return base, [f"cudice settings must be an object, got {type(raw).__name__}; using defaults"]
    for key, value in _flatten(raw).items():
        full = key if key.startswith("cudice.") else f"cudice.{key}"
        setting = _BY_KEY.get(full)
        if setting is None:
            warnings.append(f"unknown setting {full!r} ignored (known keys: see `cudice lsp --print-schema`)")
            continue
        if value is None:
            continue
        problem = setting.check(value)
        if problem:
            warnings.append(
                f"setting {full}={value!r} {problem}; using {getattr(base, _attr(full))!r} instead"
            )
            continue
        values[_attr(full)] = float(value) if setting.type == "number" else value
    return dataclasses.replace(base, **values), warnings


def settings_json_schema() -> dict[str, Any]:
    """JSON Schema of the settings, in the shape of VS Code's `contributes.configuration`."""
    props: dict[str, Any] = {}
    for s in SCHEMA:
        prop: dict[str, Any] = {"type": s.type, "default": s.default, "description": s.description}
        if s.choices:
            prop["enum"] = list(s.choices)
        if s.minimum is not None:
            prop["minimum"] = s.minimum
        if s.maximum is not None:
            prop["maximum"] = s.maximum
        props[s.key] = prop
    return {"title": "cudice", "type": "object", "properties": props}


def schema_text() -> str:
    return json.dumps(settings_json_schema(), indent=2) + "\n"


_fields = {f.name for f in dataclasses.fields(Settings)}
assert set(_BY_ATTR) == _fields, (
    f"SCHEMA's keys and Settings' fields differ: {sorted(set(_BY_ATTR) ^ _fields)}; "
    "add the field or the key (`cudice.a.bKey` is the field `a_b_key`)"
)
