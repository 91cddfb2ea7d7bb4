"""The one plug-in registry (issue 27, "typed doors"): every kind is an instance of the same
class, every plug-in's parameters are one strict pydantic model derived from where they are
written, a bad parameter is one error naming the plug-in, the parameter and the value, and each
built instance records the parameters it was built from, defaults included."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from adaptive_eval.base.errors import InputError
from adaptive_eval.config.registry import (
    Registry,
    allocators,
    backends,
    describe,
    pair_rules,
    resolved,
    stopping_rules,
)
from adaptive_eval.grading import graders, schemata

KINDS: tuple[Registry[Any], ...] = (
    backends,
    graders,
    schemata,
    pair_rules,
    stopping_rules,
    allocators,
)

#: Valid values for the parameters some plug-ins require.
REQUIRED: dict[tuple[str, str], dict[str, Any]] = {
    ("pair rule", "rope"): {"epsilon": 0.02},
    ("stopping rule", "max_trials"): {"n": 3},
    ("stopping rule", "ci_width"): {"width": 0.1},
    ("grader", "regex"): {"pattern": r"answer: (\d+)"},
}

PLUGINS = [
    pytest.param(registry, name, id=f"{registry.kind}:{name}")
    for registry in KINDS
    for name in registry.names()
]
POLICIES = [
    pytest.param(registry, name, id=f"{registry.kind}:{name}")
    for registry in (pair_rules, stopping_rules, allocators)
    for name in registry.names()
]


def test_one_registry_class_serves_every_kind() -> None:
    assert all(type(registry) is Registry for registry in KINDS)
    assert len({registry.kind for registry in KINDS}) == len(KINDS)
    assert {"simulated", "replay", "vllm", "openai"} <= set(backends.names())
    assert {"math", "exact", "regex"} <= set(graders.names())
    assert "format_aware" in schemata.names()
    for registry in KINDS:
        with pytest.raises(InputError, match=rf"unknown {registry.kind} 'nope' \(known: ") as info:
            registry.build("nope", source="c.yaml", field="here")
        assert info.value.source == "c.yaml" and info.value.field == "here"
        assert all(name in str(info.value) for name in registry.names())


@pytest.mark.parametrize(("registry", "name"), PLUGINS)
def test_every_plugin_has_a_strict_model_that_refuses_unknown_keys(
    registry: Registry[Any], name: str
) -> None:
    model = registry.params_model(name)
    config = model.model_config
    assert config.get("extra") == "forbid"
    assert config.get("strict") is True and config.get("allow_inf_nan") is False
    assert registry.params_model(name) is model  # derived once
    params = dict(REQUIRED.get((registry.kind, name), {}), bogus_key=1)
    with pytest.raises(InputError) as info:
        registry.build(name, params, source="c.yaml", field="policy.x")
    text = str(info.value)
    assert f"{registry.kind} {name!r} has no parameter 'bogus_key' (allowed: " in text
    assert info.value.field == "policy.x.bogus_key" and info.value.source == "c.yaml"


def _wrong_value(annotation_text: str) -> object:
    """A value of the wrong type for a parameter described as ``annotation_text``."""
    return 3 if annotation_text.startswith(("a string", "one of")) else "not-a-value"


@pytest.mark.parametrize(("registry", "name"), PLUGINS)
def test_a_bad_value_is_refused_naming_plugin_field_and_value(
    registry: Registry[Any], name: str
) -> None:
    model = registry.params_model(name)
    required = REQUIRED.get((registry.kind, name), {})
    for key in registry.parameters(name):
        info = model.model_fields.get(key)
        if info is None:  # a parameter whose model field is renamed (``schema``)
            info = next(f for f in model.model_fields.values() if f.alias == key)
        rule = describe(info.annotation, info.metadata)
        if info.annotation is Any:
            continue
        value = _wrong_value(rule)
        given = {k: v for k, v in required.items() if k != key}
        if registry is backends:  # entry and context are both required instances
            given = {k: "not-a-value" for k in registry.parameters(name)}
        with pytest.raises(InputError) as caught:
            registry.build(name, {**given, key: value}, source="c.yaml", field="f")
        text = str(caught.value)
        assert f"{registry.kind} {name!r}: " in text, text
        assert f"{key} must be {rule}, got {value!r}" in text, text
        assert caught.value.field is not None and caught.value.field.startswith("f.")


@pytest.mark.parametrize(
    ("registry", "name", "params", "message", "field"),
    [
        (
            pair_rules,
            "group_sequential",
            {"horizons": 0},
            "pair rule 'group_sequential': horizons must be an integer in [1, 8], got 0",
            "horizons",
        ),
        (
            pair_rules,
            "group_sequential",
            {"futility": math.nan},
            "pair rule 'group_sequential': futility must be a number in [0, 0.5), got nan",
            "futility",
        ),
        (
            pair_rules,
            "group_sequential",
            {"spending": "linear"},
            "spending must be one of 'obf', 'pocock', 'hsd', got 'linear'",
            "spending",
        ),
        (
            pair_rules,
            "anytime",
            {"inflation": 2.0},  # kept for group_sequential: no parameter of anytime
            "pair rule 'anytime' has no parameter 'inflation'",
            "inflation",
        ),
        (
            pair_rules,
            "naive_z",
            {"looks": True},
            "pair rule 'naive_z': looks must be an integer >= 1, got True",
            "looks",
        ),
        (pair_rules, "rope", {}, "pair rule 'rope' needs parameter 'epsilon'", "epsilon"),
        (
            stopping_rules,
            "budget",
            {"wall_clock_s": math.inf},
            "stopping rule 'budget': wall_clock_s must be a finite number > 0, got inf",
            "wall_clock_s",
        ),
        (
            allocators,
            "track_and_stop",
            {"cost": "dollars"},
            "allocation policy 'track_and_stop': cost must be one of 'trials', 'tokens', "
            "'gpu_s', got 'dollars'",
            "cost",
        ),
        (
            graders,
            "exact",
            {"invalid_category": 2},
            "grader 'exact': invalid_category must be an integer in [0, 1], got 2",
            "invalid_category",
        ),
        (
            graders,
            "regex",
            {"pattern": "(x)", "match": "middle"},
            "grader 'regex': match must be one of 'last', 'first', got 'middle'",
            "match",
        ),
        (schemata, "format_aware", {"tau": 1}, "schema 'format_aware' has no parameter", "tau"),
    ],
)
def test_error_message_shape(
    registry: Registry[Any], name: str, params: dict[str, Any], message: str, field: str
) -> None:
    with pytest.raises(InputError) as caught:
        registry.build(name, params, source="c.yaml", field="policy.x")
    assert message in str(caught.value)
    assert caught.value.field == f"policy.x.{field}"


def test_rules_between_fields_and_in_factories_name_the_plugin() -> None:
    with pytest.raises(InputError, match="pair rule 'group_sequential': cap_share must be below"):
        pair_rules.build("group_sequential", {"horizons": 2, "cap_share": 1.0})
    pair_rules.build("group_sequential", {"horizons": 1, "cap_share": 1.0})
    with pytest.raises(InputError, match="pair rule 'group_sequential': gamma must be a finite"):
        pair_rules.build("group_sequential", {"gamma": 0.0})
    with pytest.raises(InputError, match="stopping rule 'ci_width': give one of width"):
        stopping_rules.build("ci_width", {"width": 0.1, "half_width": 0.05})


def test_strict_but_an_integer_is_a_number_and_a_list_a_sequence() -> None:
    rule = pair_rules.build("group_sequential", {"ratio": 2, "inflation": 1})
    assert rule.ratio == 2.0 and isinstance(rule.ratio, float)
    assert isinstance(rule.inflation, float)
    math_grader = graders.build("math", {"schema": "format_aware", "weights": [0, 0, 1, 2, 3]})
    assert math_grader.default_weights == (0.0, 0.0, 1.0, 2.0, 3.0)
    for bad in (2.5, True, "3"):
        with pytest.raises(InputError, match="horizons must be an integer"):
            pair_rules.build("group_sequential", {"horizons": bad})
    with pytest.raises(InputError, match="step_down must be true or false, got 1"):
        pair_rules.build("group_sequential", {"step_down": 1})


@pytest.mark.parametrize(("registry", "name"), POLICIES)
def test_built_instances_record_their_resolved_parameters(
    registry: Registry[Any], name: str
) -> None:
    required = REQUIRED.get((registry.kind, name), {})
    built = registry.build(name, required)
    record = registry.resolved(built)
    assert resolved(built) == record
    assert (record.kind, record.name) == (registry.kind, name)
    assert list(record.params) == registry.parameters(name)  # every parameter, defaults too
    for key, value in required.items():
        assert record.params[key] == value
    if dataclasses.is_dataclass(built):
        for key, value in record.params.items():
            assert getattr(built, key) == value
        if "name" in {f.name for f in dataclasses.fields(built)}:
            assert built.name == name  # one class may serve two names (naive_z, z_rank)
    other = allocators if registry is not allocators else pair_rules
    with pytest.raises(LookupError):
        other.resolved(built)


def test_resolved_defaults_of_the_default_pair_rule() -> None:
    params = pair_rules.resolved(pair_rules.build("group_sequential", {"horizons": 2})).params
    assert params["horizons"] == 2
    assert params["looks"] == 12 and params["spending"] == "hsd" and params["inflation"] == 1.1
    assert params["epsilon"] is None and params["futility_trials"] == 8
    with pytest.raises(LookupError):
        resolved(object())


def test_unregistered_names_leave_and_a_name_cannot_be_taken_twice() -> None:
    registry: Registry[Any] = Registry("widget")

    @registry.register("box")
    @dataclasses.dataclass(frozen=True)
    class Box:
        size: int = 1
        name: str = "box"

    assert registry.build("box", {"size": 2}) == Box(2, "box")
    with pytest.raises(ValueError, match="widget 'box' is already registered"):
        registry.register("box")(dict)
    registry.unregister("box")
    assert "box" not in registry
