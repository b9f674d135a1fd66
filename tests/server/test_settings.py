from __future__ import annotations

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
