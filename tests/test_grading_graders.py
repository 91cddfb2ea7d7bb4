"""Signals from samples, the grader registry, and the math / exact / regex graders."""

from __future__ import annotations

import math
import threading

import pytest

from adaptive_eval.base.errors import InputError
from adaptive_eval.grading import (
    GeneratedSample,
    Graded,
    Grader,
    Signals,
    Thresholds,
    _pool,
    answers,
    build_grader,
    compute_signals,
    grader,
    graders,
)
from adaptive_eval.inputs.datasets import Question

HALF = Question("q-half", "What is 1/2 as a fraction?", r"\frac{1}{2}", {})
SET = Question("q-set", "Roots of x^2-3x+2?", r"\{1, 2\}", {})

LN2 = math.log(2)


def sample(
    text: str,
    tokens: int = 100,
    finish: str | None = "stop",
    bpt: float | None = 0.5,
    prompt_bpt: float | None = 1.5,
    prompt_tokens: int = 20,
) -> GeneratedSample:
    """A sample whose completion / prompt log-probs give the requested bits per token."""
    return GeneratedSample(
        text=text,
        completion_tokens=tokens,
        prompt_tokens=prompt_tokens,
        finish_reason=finish,
        cumulative_logprob=None if bpt is None else -bpt * tokens * LN2,
        prompt_logprob_sum=None if prompt_bpt is None else -prompt_bpt * (prompt_tokens - 1) * LN2,
        latency_s=0.1,
    )


# ---- compute_signals ---------------------------------------------------------------------------


def test_compute_signals_boxed_correct() -> None:
    s, answer, reason = compute_signals(sample(r"so \boxed{0.5}", tokens=3277), HALF)
    assert answer == "0.5" and reason is None
    assert s.has_box and s.is_correct and not s.repeated_pattern
    assert s.token_ratio == pytest.approx(3277 / 32768)
    assert s.completion_bpt == pytest.approx(0.5)
    assert s.prompt_bpt == pytest.approx(1.5)
    assert s.verifier is None


def test_compute_signals_unboxed_and_truncated() -> None:
    s, answer, reason = compute_signals(sample("The final answer is $1/2$.", bpt=None), HALF)
    assert answer is None and reason is None
    assert not s.has_box and s.is_correct  # the paper's "correct & unboxed"
    assert s.completion_bpt is None

    s, answer, _ = compute_signals(
        sample("The final answer is $1/2$.", bpt=None), HALF, unboxed_fallback=False
    )
    assert not s.is_correct

    cut = sample(r"... hence \boxed{\frac{1}{", finish="length", tokens=32768)
    s, answer, reason = compute_signals(cut, HALF, max_tokens_ref=16384)
    assert answer is None and reason is None
    assert not s.has_box and not s.is_correct
    assert s.repeated_pattern  # finish_reason != "stop"
    assert s.token_ratio == 2.0


def test_unknown_finish_reason_is_not_degenerate() -> None:
    s, _, _ = compute_signals(sample(r"\boxed{1/2}", finish=None), HALF)
    assert not s.repeated_pattern


def test_signals_to_dict_roundtrip_is_json_ready() -> None:
    s = Signals(True, False, 0.25, False, 1.0, None, (0.1, 0.2, 0.7))
    d = s.to_dict()
    assert d == {
        "has_box": True,
        "is_correct": False,
        "token_ratio": 0.25,
        "repeated_pattern": False,
        "prompt_bpt": 1.0,
        "completion_bpt": None,
        "verifier": [0.1, 0.2, 0.7],
    }


# ---- registry ----------------------------------------------------------------------------------


def test_registry_and_build_errors() -> None:
    assert {"math", "exact", "regex"} <= set(graders.names())
    with pytest.raises(InputError, match=r"unknown grader 'nope'.*known: .*math"):
        build_grader("nope")
    with pytest.raises(InputError, match="grader 'math' has no parameter 'timout_s'") as info:
        build_grader("math", timout_s=3)
    assert info.value.field == "timout_s"
    with pytest.raises(InputError, match="grader 'regex' needs parameter 'pattern'"):
        build_grader("regex")
    with pytest.raises(InputError, match=r"grader 'math'.*unknown schema 'fancy'"):
        build_grader("math", schema="fancy")
    with pytest.raises(InputError, match=r"grader 'math'.*tau_low_wrong") as info:
        build_grader("math", schema="conf_wrong_penalty")
    assert info.value.field == "thresholds.tau_low_wrong"
    with pytest.raises(InputError, match=r"grader 'math'.*unknown threshold 'tau'"):
        build_grader("math", schema="exact_match", thresholds={"tau": 1.0})
    with pytest.raises(InputError, match=r"grader 'math'.*verifier"):
        build_grader("math", schema="verifier_prob")
    with pytest.raises(InputError, match=r"grader 'math'.*invalid_category"):
        build_grader("math", invalid_category=2)
    with pytest.raises(InputError, match=r"grader 'math'.*timeout_s"):
        build_grader("math", timeout_s=0)
    with pytest.raises(InputError, match=r"grader 'math'.*weights need 5"):
        build_grader("math", schema="format_aware", weights=[0, 1])
    with pytest.raises(InputError, match=r"grader 'exact'.*extract"):
        build_grader("exact", extract="last")
    with pytest.raises(InputError, match=r"grader 'regex'.*one capturing group"):
        build_grader("regex", pattern=r"answer: \d+")
    with pytest.raises(InputError, match=r"grader 'regex'.*invalid regular expression"):
        build_grader("regex", pattern=r"(unclosed")


def test_custom_grader_registration() -> None:
    @grader("test-always-one")
    def always_one(*, category: int = 1) -> Grader:
        class One:
            num_categories = 2

            def __call__(self, sample: GeneratedSample, question: Question) -> Graded:
                return Graded(category)

        return One()

    try:
        g = build_grader("test-always-one", category=0)
        assert isinstance(g, Grader)
        assert g(sample("x"), HALF) == Graded(0)
        with pytest.raises(ValueError, match="already registered"):
            grader("test-always-one")(lambda: None)
        with pytest.raises(InputError, match="category must be an integer, got 'x'"):
            build_grader("test-always-one", category="x")
    finally:
        graders.unregister("test-always-one")


# ---- math grader -------------------------------------------------------------------------------


def test_math_grader_binary() -> None:
    g = build_grader("math")
    assert g.num_categories == 2
    right = g(sample(r"Thus $\boxed{\dfrac{1}{2}}$."), HALF)
    assert (right.category, right.answer, right.invalid) == (1, r"\dfrac{1}{2}", False)
    assert right.signals is not None and right.signals.is_correct
    wrong = g(sample(r"\boxed{\{1, 3\}}"), SET)
    assert (wrong.category, wrong.invalid) == (0, False)
    unboxed = g(sample("I am not sure."), HALF)
    assert (unboxed.category, unboxed.answer, unboxed.reason) == (0, None, "no \\boxed{} answer")


def test_math_grader_with_schema_maps_signals() -> None:
    g = build_grader(
        "math",
        schema="format_aware",
        thresholds={"tau_high": 0.4},
        weights=[0, 0, 1, 1, 2],
    )
    assert g.num_categories == 5
    assert g.default_weights == (0.0, 0.0, 1.0, 1.0, 2.0)  # type: ignore[attr-defined]
    assert g(sample(r"\boxed{0.5}"), HALF).category == 4
    assert g(sample("final answer: $0.5$"), HALF).category == 3
    assert g(sample(r"\boxed{3}"), HALF).category == 2
    assert g(sample("no idea"), HALF).category == 1
    assert g(sample(r"\boxed{0.5}", finish="length"), HALF).category == 0

    cw = build_grader("math", schema="conf_wrong_penalty", thresholds=Thresholds(tau_low_wrong=0.6))
    assert cw(sample(r"\boxed{3}", bpt=0.3), HALF).category == 1  # confidently wrong
    assert cw(sample(r"\boxed{3}", bpt=0.9), HALF).category == 2
    assert cw(sample(r"\boxed{1/2}", bpt=0.9), HALF).category == 3
    missing = cw(sample(r"\boxed{3}", bpt=None), HALF)  # backend gave no log-probs
    assert missing.invalid and missing.category == 0
    assert "completion_bpt" in (missing.reason or "")


def test_math_grader_with_a_verifier() -> None:
    calls: list[str] = []

    def verifier(s: GeneratedSample, q: Question) -> tuple[float, float, float]:
        calls.append(q.id)
        return (0.9, 0.05, 0.05) if "0.5" in s.text else (0.1, 0.1, 0.8)

    g = build_grader("math", schema="verifier_prob", verifier=verifier)
    ok = g(sample(r"\boxed{0.5}"), HALF)
    assert ok.category == 4 and ok.signals is not None and ok.signals.verifier == (0.9, 0.05, 0.05)
    assert g(sample(r"\boxed{7}"), HALF).category == 0  # C >= 0.5: off-task, invalid
    assert calls == ["q-half", "q-half"]

    bad = build_grader("math", schema="verifier_only", verifier=lambda s, q: (2.0, 0.0, 0.0))
    out = bad(sample(r"\boxed{0.5}"), HALF)
    assert out.invalid and "verifier returned" in (out.reason or "")


def test_math_grader_timeout_gives_invalid_category(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answers, "_CHECK", (_pool.__file__, "sleep_then_return"))
    q = Question("slow", "p", "60", {})  # the stand-in check sleeps for `gold` seconds
    g = build_grader("math", timeout_s=0.2, invalid_category=1)
    out: list[Graded] = []
    thread = threading.Thread(target=lambda: out.append(g(sample(r"\boxed{60}"), q)))
    thread.start()
    thread.join(30)
    assert out[0].invalid
    assert out[0].category == 1
    assert (out[0].reason or "").startswith("timeout")


def test_math_grader_never_raises_on_bad_samples() -> None:
    g = build_grader("math")
    broken = GeneratedSample(text=None, completion_tokens=1)  # type: ignore[arg-type]
    out = g(broken, HALF)
    assert out.invalid and out.category == 0 and (out.reason or "").startswith("grader error")


# ---- exact and regex graders -------------------------------------------------------------------


def test_exact_grader() -> None:
    q = Question("q", "Capital of France?", "Paris", {})
    boxed = build_grader("exact")
    assert boxed(sample(r"It is \boxed{ paris }"), q).category == 1
    assert boxed(sample(r"It is \boxed{Lyon}"), q).category == 0
    no_box = boxed(sample("Paris"), q)
    assert no_box.category == 0 and no_box.reason == "no \\boxed{} answer"
    whole = build_grader("exact", extract="none")
    assert whole(sample("  PARIS \n"), q).category == 1
    assert whole(sample("It is Paris"), q).category == 0


def test_regex_grader() -> None:
    q = Question("q", "2+3?", "5", {})
    g = build_grader("regex", pattern=r"[Aa]nswer:\s*(\S+)")
    assert g(sample("Answer: 4. Wait. Answer: 5"), q).category == 1  # last match by default
    first = build_grader("regex", pattern=r"Answer:\s*(\S+)", match="first")
    assert first(sample("Answer: 4. Wait. Answer: 5"), q).category == 0
    none = g(sample("five"), q)
    assert none.category == 0 and none.reason == "no match for pattern" and not none.invalid
    ci = build_grader("regex", pattern=r"answer is (\w+)", ignore_case=True)
    assert ci(sample("The ANSWER IS 5"), q).category == 1
    mathy = build_grader("regex", pattern=r"ANSWER: (.+)$", compare="math")
    assert mathy(sample("ANSWER: 10/2"), q).category == 1
    assert mathy(sample("ANSWER: 4.9"), q).category == 0
