"""Per-attempt base signals (Appendix D of the paper) computed from one generated sample."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from adaptive_eval.grading.answers import extract_boxed, is_grader_failure, math_equal

if TYPE_CHECKING:
    from adaptive_eval.inputs.datasets import Question

#: The paper normalises completion length by the generation limit it used, 32,768 tokens.
DEFAULT_MAX_TOKENS_REF = 32768


@dataclass(frozen=True, slots=True)
class GeneratedSample:
    """One completion as a backend returns it, before grading.

    ``cumulative_logprob`` is the sum of the completion tokens' log-probabilities and
    ``prompt_logprob_sum`` that of the prompt tokens (natural log, nats); ``None`` when the backend
    does not report them. ``finish_reason`` is the engine's (``"stop"``, ``"length"``, ...).
    """

    text: str
    completion_tokens: int
    prompt_tokens: int = 0
    finish_reason: str | None = None
    cumulative_logprob: float | None = None
    prompt_logprob_sum: float | None = None
    latency_s: float | None = None

    @property
    def prompt_bpt(self) -> float | None:
        """Prompt bits per token over the scored prompt tokens: the first token of a prompt
        has no log-probability (nothing precedes it), so the sum covers ``prompt_tokens - 1``.

        >>> GeneratedSample("", 1, prompt_tokens=3, prompt_logprob_sum=-2 * math.log(2)).prompt_bpt
        1.0
        """
        return bits_per_token(self.prompt_logprob_sum, self.prompt_tokens - 1)


@dataclass(frozen=True, slots=True)
class Signals:
    """Base signals of one attempt, as defined in Appendix D of the paper.

    - ``has_box``: a final boxed answer is present.
    - ``is_correct``: the answer is correct.
    - ``token_ratio``: completion tokens / the reference limit (32,768 in the paper).
    - ``repeated_pattern``: ``finish_reason`` is not ``"stop"`` (degenerate output).
    - ``prompt_bpt``, ``completion_bpt``: negative mean log-probability in bits per token
      (lower = more likely / more confident); ``None`` without log-probs.
    - ``verifier``: verifier probabilities (A correct, B wrong, C off-task), or ``None``.
    """

    has_box: bool
    is_correct: bool
    token_ratio: float
    repeated_pattern: bool
    prompt_bpt: float | None
    completion_bpt: float | None
    verifier: tuple[float, float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (for :attr:`adaptive_eval.base.types.Trial.signals`)."""
        out = asdict(self)
        if self.verifier is not None:
            out["verifier"] = list(self.verifier)
        return out


def bits_per_token(logprob_sum: float | None, tokens: int | None) -> float | None:
    """``-logprob_sum / (tokens * ln 2)``: negative mean log-prob in bits; ``None`` if unknown.

    >>> round(bits_per_token(-math.log(2) * 10, 5), 12)
    2.0
    >>> bits_per_token(None, 5), bits_per_token(-1.0, 0)
    (None, None)
    """
    if logprob_sum is None or tokens is None or tokens <= 0 or not math.isfinite(logprob_sum):
        return None
    return -logprob_sum / (tokens * math.log(2))


def is_degenerate(finish_reason: str | None) -> bool:
    """The paper's ``repeated_pattern``: ``finish_reason != "stop"``.

    An unknown finish reason (``None``: the backend does not report one) is not counted as
    degenerate, so that backends without it do not mark every attempt invalid.
    """
    return finish_reason is not None and finish_reason != "stop"


def base_signals(
    sample: GeneratedSample,
    *,
    has_box: bool,
    is_correct: bool,
    max_tokens_ref: int = DEFAULT_MAX_TOKENS_REF,
    verifier: tuple[float, float, float] | None = None,
) -> Signals:
    """Signals of ``sample`` given the grader's ``has_box`` / ``is_correct`` verdicts."""
    if max_tokens_ref <= 0:
        raise ValueError(f"max_tokens_ref must be positive, got {max_tokens_ref}")
    return Signals(
        has_box=has_box,
        is_correct=is_correct,
        token_ratio=max(0, sample.completion_tokens) / max_tokens_ref,
        repeated_pattern=is_degenerate(sample.finish_reason),
        prompt_bpt=sample.prompt_bpt,
        completion_bpt=bits_per_token(sample.cumulative_logprob, sample.completion_tokens),
        verifier=verifier,
    )


def compute_signals(
    sample: GeneratedSample,
    question: Question,
    max_tokens_ref: int = DEFAULT_MAX_TOKENS_REF,
    timeout_s: float = 5.0,
    *,
    unboxed_fallback: bool = True,
) -> tuple[Signals, str | None, str | None]:
    r"""``(signals, answer, failure_reason)`` of one sample against ``question.answer``.

    ``answer`` is the last ``\boxed{}`` content (``None`` if absent or cut off). Without a box,
    and with ``unboxed_fallback``, correctness is still checked on the completion's tail (the
    paper's Format Aware schema has a *correct and unboxed* category). ``failure_reason`` is set
    only when the check itself failed (timeout, crash, unparseable gold); then ``is_correct`` is
    False and the caller should treat the attempt as ungradable.
    """
    answer = extract_boxed(sample.text)
    if answer is not None:
        correct, reason = math_equal(question.answer, answer, timeout_s)
    elif unboxed_fallback and sample.text.strip():
        correct, reason = math_equal(question.answer, sample.text, timeout_s, free_text=True)
    else:
        correct, reason = False, None
    signals = base_signals(
        sample, has_box=answer is not None, is_correct=correct, max_tokens_ref=max_tokens_ref
    )
    return signals, answer, reason if is_grader_failure(reason) else None
