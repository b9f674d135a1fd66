"""SamplerConfig validation, construction from server settings, and the torch-free import."""

from __future__ import annotations

import subprocess
import sys

import pytest
from cudice.model.config import STRATEGY_NAMES, SamplerConfig
from cudice.server.settings import Settings, parse_settings


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("block_length", 0, "1..256"),
        ("denoising_steps", 0, "1..256"),
        ("strategy", "greedy", "low_confidence_static"),
        ("threshold", 1.5, "[0, 1]"),
        ("temperature", -0.1, ">= 0"),
        ("top_k", -1, ">= 0"),
        ("top_p", 0.0, "(0, 1]"),
        ("max_new_tokens", 0, ">= 1"),
        ("stop_strings", "```", "tuple of strings"),
        ("stop_strings", ("",), "non-empty"),
        ("denoising_steps", True, "integer"),
        ("fuse_commit", 1, "True or False"),
    ],
)
def test_bad_values_name_field_value_rule_and_fix(field: str, value: object, fragment: str) -> None:
    with pytest.raises(ValueError) as err:
        SamplerConfig(**{field: value})  # type: ignore[arg-type]
    message = str(err.value)
    assert f"SamplerConfig.{field}={value!r}" in message
    assert fragment in message
    assert ";" in message  # rule; fix


def test_from_settings_copies_every_sampler_field() -> None:
    settings, warnings = parse_settings(
        {
            "cudice": {
                "sampler": {
                    "blockLength": 8,
                    "denoisingSteps": 2,
                    "strategy": "sequential",
                    "threshold": 0.5,
                    "temperature": 0.7,
                    "topK": 20,
                    "topP": 0.9,
                    "maxNewTokens": 100,
                }
            }
        }
    )
    assert warnings == []
    cfg = SamplerConfig.from_settings(settings)
    assert cfg == SamplerConfig(
        block_length=8,
        denoising_steps=2,
        strategy="sequential",
        threshold=0.5,
        temperature=0.7,
        top_k=20,
        top_p=0.9,
        max_new_tokens=100,
    )
    assert SamplerConfig.from_settings(Settings(), max_new_tokens=7).max_new_tokens == 7


def test_the_settings_offer_exactly_the_sampler_strategies_with_its_default() -> None:
    from cudice.server.settings import settings_json_schema

    prop = settings_json_schema()["properties"]["cudice.sampler.strategy"]
    assert tuple(prop["enum"]) == STRATEGY_NAMES and prop["default"] == SamplerConfig().strategy
    with pytest.raises(ValueError, match="must be one of low_confidence_dynamic, low_confidence_static"):
        SamplerConfig(strategy="entropy_bounded")


def test_importing_model_config_does_not_import_torch() -> None:
    code = (
        "import sys, cudice.model, cudice.model.config;"
        "sys.exit(1 if {'torch', 'transformers'} & set(sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
