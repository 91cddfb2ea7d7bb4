"""The math-verify check itself, run inside a checker process (see ``_pool``).

Loaded there by file path: it must stay importable on its own (standard library only at module
level; math-verify is imported inside the function).
"""

from __future__ import annotations

#: Characters of an unboxed completion, from its end, searched for a final answer.
FREE_TEXT_TAIL_CHARS = 4000

_MATH_ENV_MARKERS = ("$", "\\(", "\\[", "\\boxed", "\\fbox", "\\begin")


def as_math(answer: str) -> str:
    """Wrap a bare answer in ``$...$`` so math-verify's LaTeX extraction reads all of it.

    >>> as_math("1/2"), as_math("$x$")
    ('$1/2$', '$x$')
    """
    if any(marker in answer for marker in _MATH_ENV_MARKERS):
        return answer
    return f"${answer}$"


def check_math(gold: str, predicted: str, free_text: bool) -> tuple[bool, str | None]:
    """``verify(parse(gold), parse(predicted))`` with math-verify's signal timeouts off.

    Gold first: math-verify is not symmetric. A bare answer is parsed as LaTeX (``$...$``), then
    as written if that finds nothing; with ``free_text`` the predicted text's tail is searched for
    its final answer. Returns ``(is_correct, failure_reason)``; an unparseable gold answer is a
    failure (``"grader error: ..."``), an unparseable prediction just wrong.
    """
    from math_verify import parse, verify

    gold_parsed = parse(as_math(gold), parsing_timeout=None)  # type: ignore[arg-type]
    if not gold_parsed:
        gold_parsed = parse(gold, parsing_timeout=None)  # type: ignore[arg-type]
    if not gold_parsed:
        return False, f"grader error: gold answer {gold!r} could not be parsed"
    if free_text:
        tail = predicted[-FREE_TEXT_TAIL_CHARS:]
        pred_parsed = parse(tail, parsing_timeout=None)  # type: ignore[arg-type]
    else:
        pred_parsed = parse(as_math(predicted), parsing_timeout=None)  # type: ignore[arg-type]
        if not pred_parsed:
            pred_parsed = parse(predicted, parsing_timeout=None)  # type: ignore[arg-type]
    if not pred_parsed:
        return False, None
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None)), None
