from __future__ import annotations

import re

import pytest
from cudice.server.settings import SCHEMA, Settings, parse_settings, settings_json_schema


def test_defaults_match_schema() -> None:
    settings, warnings = parse_settings({})
    assert settings == Settings()
    assert warnings == []
    for s in SCHEMA:
        assert s.check(s.default) is None, s.key


def test_nested_and_flat_forms_agree() -> None:
    nested, _ = parse_settings({"cudice": {"sampler": {"topK": 5}, "verify": {"onSave": False}}})
    flat, _ = parse_settings({"cudice.sampler.topK": 5, "verify.onSave": False})
    assert nested == flat
    assert nested.sampler_top_k == 5 and nested.verify_on_save is False


def test_bad_values_fall_back_with_a_named_warning() -> None:
    base = Settings(sampler_threshold=0.8)
    settings, warnings = parse_settings(
        {"sampler": {"threshold": 7, "strategy": "nope", "blockLength": True}, "bogus": 1}, base
    )
    assert settings == base
    assert len(warnings) == 4
    joined = "\n".join(warnings)
    assert "cudice.sampler.threshold=7" in joined and "using 0.8" in joined
    assert "must be one of" in joined
    assert "unknown setting 'cudice.bogus'" in joined


def test_non_object_is_rejected_without_crashing() -> None:
    settings, warnings = parse_settings(["not", "a", "dict"])
    assert settings == Settings()
    assert warnings and "must be an object" in warnings[0]


def test_an_empty_lua_table_is_an_empty_object_not_an_unknown_setting() -> None:
    # Neovim encodes `{}` as `[]`: `init_options = { cudice = {} }` arrives as {"cudice": []}
    for raw in ([], {"cudice": []}, {"cudice": {"model": []}}, {"verify": []}):
        assert parse_settings(raw) == (Settings(), []), raw
    _, warnings = parse_settings({"cudice": {"model": {"path": []}}})  # a setting, not a group
    assert len(warnings) == 1 and "cudice.model.path" in warnings[0]


def test_integer_for_number_is_accepted_as_float() -> None:
    settings, warnings = parse_settings({"verify": {"atol": 1}})
    assert warnings == []
    assert settings.verify_atol == 1.0 and isinstance(settings.verify_atol, float)


def test_json_schema_lists_every_key() -> None:
    props = settings_json_schema()["properties"]
    assert set(props) == {s.key for s in SCHEMA}
    assert props["cudice.sampler.strategy"]["enum"][0] == "low_confidence_dynamic"


def test_dataclass_defaults_equal_the_schema_defaults() -> None:
    """The editors show SCHEMA's defaults; the server runs on Settings()'s. They must not drift."""
    from cudice.server.settings import _attr

    defaults = Settings()
    assert {s.key: getattr(defaults, _attr(s.key)) for s in SCHEMA} == {s.key: s.default for s in SCHEMA}


def test_every_schema_key_is_a_settings_field_with_its_default_and_type_and_back() -> None:
    import dataclasses
    import typing

    from cudice.server import settings as module

    json_type = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}
    hints = typing.get_type_hints(Settings, vars(module))
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    by_field = {module._attr(s.key): s for s in SCHEMA}
    assert set(by_field) == set(fields) and len(by_field) == len(SCHEMA)
    for name, field in fields.items():
        setting = by_field[name]
        assert field.default == setting.default and type(field.default) is type(setting.default), name
        assert json_type[hints[name].__name__] == setting.type, name


def test_sampler_and_verifier_defaults_are_the_run_time_configs_defaults() -> None:
    """An editor user and `cudice generate` / `cudice verify` without one decode and judge alike."""
    from cudice.model.config import SamplerConfig
    from cudice.verifier.config import VerifyConfig

    s, sampler, verify = Settings(), SamplerConfig(), VerifyConfig()
    assert (
        s.sampler_denoising_steps,
        s.sampler_strategy,
        s.sampler_threshold,
        s.sampler_temperature,
        s.sampler_top_k,
        s.sampler_top_p,
        s.sampler_max_new_tokens,
    ) == (
        sampler.denoising_steps,
        sampler.strategy,
        sampler.threshold,
        sampler.temperature,
        sampler.top_k,
        sampler.top_p,
        sampler.max_new_tokens,
    )
    assert (
        s.verify_trials,
        s.verify_atol,
        s.verify_rtol,
        s.verify_timeout_seconds,
        s.verify_required_speedup,
        s.verify_strictness,
        s.verify_compile_only,
    ) == (
        verify.num_trials,
        verify.atol,
        verify.rtol,
        verify.timeout_s,
        verify.required_speedup,
        verify.static_policy,
        verify.compile_only,
    )


def test_settings_built_in_code_are_validated_against_the_schema() -> None:
    with pytest.raises(
        ValueError,
        match=re.escape(
            "Settings.sampler_top_p=1.5 is invalid: cudice.sampler.topP "
            "must be <= 1.0; pass a valid value or leave it out"
        ),
    ):
        Settings(sampler_top_p=1.5)
    with pytest.raises(
        ValueError, match=r"cudice\.verify\.strictness must be one of strict, default, lenient"
    ):
        Settings(verify_strictness="paranoid")
    with pytest.raises(ValueError, match="expected an integer, got str"):
        Settings(verify_trials="5")  # type: ignore[arg-type]
