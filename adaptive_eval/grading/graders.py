r"""Graders: turn one generated sample into a category, found by name from the config.

A grader is any object with ``num_categories`` (``C + 1``) and
``__call__(sample, question) -> Graded``. Graders are plug-ins of the one registry class
(:class:`adaptive_eval.config.registry.Registry`): registered in :data:`graders` with :func:`grader`
(its ``register``) and built with :func:`build_grader`, which checks the name and the parameters
against the factory's annotated signature (or the grader dataclass's fields):

- ``math``: last ``\boxed{}`` answer checked with math-verify (:func:`math_equal`); categories
  0 wrong / 1 correct, or, with ``schema=<name>`` and ``thresholds``, one of the paper's rubric
  schemata (:mod:`adaptive_eval.grading.schemata`).
- ``exact``: normalised string comparison of the boxed answer (``extract="boxed"``) or of the
  whole completion (``extract="none"``) with the gold answer.
- ``regex``: the one group of ``pattern`` (its last match by default) compared with the gold.

A grader never raises on a sample: when the check times out or crashes, the sample gets the
configured ``invalid_category`` (default 0), ``invalid=True`` and the reason.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

from pydantic import Field

from adaptive_eval.base.errors import InputError
from adaptive_eval.config.registry import Registry
from adaptive_eval.grading.answers import extract_boxed, is_grader_failure, math_equal
from adaptive_eval.grading.schemata import Schema, Thresholds, get_schema
from adaptive_eval.grading.signals import (
    DEFAULT_MAX_TOKENS_REF,
    GeneratedSample,
    Signals,
    base_signals,
    compute_signals,
)
from adaptive_eval.inputs.datasets import Question

#: Supplies verifier probabilities (A correct, B wrong, C off-task) for a sample.
VerifierFn = Callable[[GeneratedSample, Question], tuple[float, float, float]]


@dataclass(frozen=True, slots=True)
class Graded:
    """A graded sample. ``invalid`` means the grader could not grade it (timeout, crash): the
    category is then the grader's ``invalid_category`` and ``reason`` says why. (A schema's own
    category 0, "invalid" in the paper's sense, is an ordinary outcome with ``invalid=False``.)
    """

    category: int
    answer: str | None = None
    signals: Signals | None = None
    reason: str | None = None
    invalid: bool = False


@runtime_checkable
class Grader(Protocol):
    """Maps a sample of a question to a category in ``0 .. num_categories - 1``."""

    num_categories: int

    def __call__(self, sample: GeneratedSample, question: Question) -> Graded: ...


#: Every grader, by name.
graders: Registry[Grader] = Registry("grader", label_errors=True)
#: ``@grader(name)`` registers a grader factory (its keyword parameters are the config keys) or a
#: grader dataclass (its fields are).
grader = graders.register

#: Positive seconds for one math-verify check.
Timeout = Annotated[float, Field(gt=0)]
#: The completion length the length signals are measured against, in tokens.
TokensRef = Annotated[int, Field(gt=0)]
#: The category of a sample the grader could not grade, for a binary grader.
BinaryCategory = Annotated[int, Field(ge=0, le=1)]


def build_grader(name: str, **params: Any) -> Grader:
    """Build the grader registered as ``name`` from config ``params``
    (:meth:`~adaptive_eval.config.registry.Registry.build` of :data:`graders`).

    An unknown name, an unknown or missing parameter, or a bad value is an :class:`InputError`
    naming the grader and the parameter.
    """
    return graders.build(name, params)


# ---- shared helpers ----------------------------------------------------------------------------


def _normalize(text: str) -> str:
    """Strip, collapse whitespace and casefold (for exact/regex comparison)."""
    return " ".join(text.split()).casefold()


def _check_invalid_category(value: int, num_categories: int) -> int:
    if not value < num_categories:
        raise InputError(
            f"invalid_category must be an integer in 0..{num_categories - 1}, got {value!r}",
            field="invalid_category",
        )
    return value


def _check_weights(
    weights: Sequence[float] | None, default: tuple[float, ...]
) -> tuple[float, ...]:
    if weights is None:
        return default
    if len(weights) != len(default):
        raise InputError(
            f"weights need {len(default)} entries (one per category), got {len(weights)}",
            field="weights",
        )
    return tuple(float(w) for w in weights)


def _failed(invalid_category: int, reason: str, answer: str | None = None) -> Graded:
    return Graded(invalid_category, answer, None, reason, True)


def _crash(invalid_category: int, exc: Exception) -> Graded:
    return _failed(invalid_category, f"grader error: {type(exc).__name__}: {exc}")


def _verifier_probs(
    fn: VerifierFn, sample: GeneratedSample, question: Question
) -> tuple[float, float, float]:
    probs = tuple(float(p) for p in fn(sample, question))
    if len(probs) != 3 or not all(0.0 <= p <= 1.0 for p in probs):
        raise ValueError(f"verifier returned {probs!r}; expected three probabilities (A, B, C)")
    return probs[0], probs[1], probs[2]


# ---- math --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MathGrader:
    """math-verify grading, binary or through a rubric schema; see :func:`math_grader`."""

    num_categories: int
    default_weights: tuple[float, ...]
    schema: Schema | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    timeout_s: float = 5.0
    max_tokens_ref: int = DEFAULT_MAX_TOKENS_REF
    invalid_category: int = 0
    unboxed_fallback: bool = True
    verifier: VerifierFn | None = None

    def __call__(self, sample: GeneratedSample, question: Question) -> Graded:
        try:
            signals, answer, failure = compute_signals(
                sample,
                question,
                self.max_tokens_ref,
                self.timeout_s,
                unboxed_fallback=self.unboxed_fallback,
            )
            if self.verifier is not None:
                signals = replace(
                    signals, verifier=_verifier_probs(self.verifier, sample, question)
                )
            if failure is not None:
                return Graded(self.invalid_category, answer, signals, failure, True)
            if self.schema is None:
                category = int(signals.is_correct)
            else:
                category = self.schema(signals, self.thresholds)
            note = None if answer is not None else "no \\boxed{} answer"
            return Graded(category, answer, signals, note, False)
        except Exception as exc:
            return _crash(self.invalid_category, exc)


@grader("math")
def math_grader(
    *,
    schema: str | None = None,
    thresholds: Thresholds | Mapping[str, Any] | None = None,
    weights: Sequence[float] | None = None,
    timeout_s: Timeout = 5.0,
    max_tokens_ref: TokensRef = DEFAULT_MAX_TOKENS_REF,
    invalid_category: Annotated[int, Field(ge=0)] = 0,
    unboxed_fallback: bool = True,
    verifier: VerifierFn | Mapping[str, Any] | None = None,
) -> MathGrader:
    r"""math-verify grader.

    Without ``schema``: 0 wrong, 1 correct (weights ``(0, 1)``). With ``schema`` (a name in
    :data:`~adaptive_eval.grading.schemata.SCHEMATA`), the signals are mapped through it, using
    ``thresholds`` (a :class:`Thresholds` or a mapping of its fields), fixed here for the whole
    run. Verifier schemata need ``verifier``: a callable giving (A, B, C) probabilities, or a
    mapping configuring a verifier model behind an OpenAI-compatible endpoint
    (:mod:`adaptive_eval.grading.verifier`).
    ``unboxed_fallback`` checks completions without a ``\boxed{}`` on their tail.
    """
    if importlib.util.find_spec("math_verify") is None:
        raise InputError(
            "needs math-verify, which is not installed: pip install 'adaptive-eval[grading]'"
        )
    if thresholds is None:
        fixed = Thresholds()
    elif isinstance(thresholds, Thresholds):
        fixed = thresholds
    else:
        fixed = Thresholds.from_mapping(thresholds)
    chosen: Schema | None = None
    default: tuple[float, ...]
    if schema is None:
        n, default = 2, (0.0, 1.0)
    else:
        chosen = get_schema(schema)
        fixed.require(chosen.thresholds, f"schema {chosen.name!r}")
        if chosen.needs_verifier and verifier is None:
            raise InputError(
                f"schema {chosen.name!r} needs verifier probabilities: pass a verifier",
                field="verifier",
            )
        n, default = chosen.num_categories, chosen.default_weights
    if isinstance(verifier, Mapping):
        from adaptive_eval.grading.verifier import build_verifier

        verifier = build_verifier(verifier)
    return MathGrader(
        num_categories=n,
        default_weights=_check_weights(weights, default),
        schema=chosen,
        thresholds=fixed,
        timeout_s=timeout_s,
        max_tokens_ref=max_tokens_ref,
        invalid_category=_check_invalid_category(invalid_category, n),
        unboxed_fallback=unboxed_fallback,
        verifier=verifier,
    )


# ---- exact -------------------------------------------------------------------------------------


@grader("exact", internal=("num_categories", "default_weights"))
@dataclass(frozen=True)
class ExactGrader:
    r"""Normalised string equality (strip, collapse whitespace, casefold): 0 wrong, 1 correct.

    Compares the ``\boxed{}`` answer (``extract="boxed"``) or the whole text (``"none"``)."""

    extract: Literal["boxed", "none"] = "boxed"
    invalid_category: BinaryCategory = 0
    max_tokens_ref: TokensRef = DEFAULT_MAX_TOKENS_REF
    num_categories: int = 2
    default_weights: tuple[float, ...] = (0.0, 1.0)

    def __call__(self, sample: GeneratedSample, question: Question) -> Graded:
        try:
            boxed = extract_boxed(sample.text)
            answer = boxed if self.extract == "boxed" else sample.text.strip()
            correct = answer is not None and _normalize(answer) == _normalize(question.answer)
            signals = base_signals(
                sample,
                has_box=boxed is not None,
                is_correct=correct,
                max_tokens_ref=self.max_tokens_ref,
            )
            note = "no \\boxed{} answer" if answer is None else None
            return Graded(int(correct), answer, signals, note, False)
        except Exception as exc:
            return _crash(self.invalid_category, exc)


# ---- regex -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RegexGrader:
    """The one group of ``pattern`` compared with the gold answer: 0 wrong, 1 correct."""

    pattern: re.Pattern[str]
    match: str = "last"
    compare: str = "exact"
    timeout_s: float = 5.0
    invalid_category: int = 0
    max_tokens_ref: int = DEFAULT_MAX_TOKENS_REF
    num_categories: int = 2
    default_weights: tuple[float, ...] = (0.0, 1.0)

    def __call__(self, sample: GeneratedSample, question: Question) -> Graded:
        try:
            found = None
            for m in self.pattern.finditer(sample.text):
                found = m
                if self.match == "first":
                    break
            answer = None if found is None or found.group(1) is None else found.group(1).strip()
            reason: str | None = None
            if answer is None:
                correct, reason = False, "no match for pattern"
            elif self.compare == "math":
                correct, failure = math_equal(question.answer, answer, self.timeout_s)
                if is_grader_failure(failure):
                    assert failure is not None
                    return _failed(self.invalid_category, failure, answer)
            else:
                correct = _normalize(answer) == _normalize(question.answer)
            signals = base_signals(
                sample,
                has_box=extract_boxed(sample.text) is not None,
                is_correct=correct,
                max_tokens_ref=self.max_tokens_ref,
            )
            return Graded(int(correct), answer, signals, reason, False)
        except Exception as exc:
            return _crash(self.invalid_category, exc)


@grader("regex")
def regex_grader(
    *,
    pattern: str,
    ignore_case: bool = False,
    match: Literal["last", "first"] = "last",
    compare: Literal["exact", "math"] = "exact",
    timeout_s: Timeout = 5.0,
    invalid_category: BinaryCategory = 0,
    max_tokens_ref: TokensRef = DEFAULT_MAX_TOKENS_REF,
) -> RegexGrader:
    """Regex grader: ``pattern`` must have exactly one capturing group (the answer).

    ``match``: use the ``last`` (default) or ``first`` match; ``compare``: ``exact`` (normalised
    strings) or ``math`` (math-verify, with ``timeout_s``).
    """
    try:
        compiled = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise InputError(
            f"invalid regular expression {pattern!r}: {exc}", field="pattern"
        ) from None
    if compiled.groups != 1:
        raise InputError(
            f"pattern {pattern!r} must have exactly one capturing group, has {compiled.groups}",
            field="pattern",
        )
    return RegexGrader(compiled, match, compare, timeout_s, invalid_category, max_tokens_ref)
