r"""Final-answer extraction and mathematical equivalence.

:func:`extract_boxed` pulls the last ``\boxed{...}`` (or ``\fbox{...}``) out of a completion;
:func:`math_equal` decides whether a predicted answer equals the gold one with math-verify, in a
checker process with a hard timeout (see :mod:`adaptive_eval.grading._pool` for why), and never
raises.
"""

from __future__ import annotations

import re

from adaptive_eval.grading import _mathcheck
from adaptive_eval.grading._mathcheck import FREE_TEXT_TAIL_CHARS, check_math
from adaptive_eval.grading._pool import shared_pool

#: ``reason`` prefixes that mean grading failed (as opposed to a wrong answer).
FAILURE_PREFIXES: tuple[str, ...] = ("timeout", "grader error")

__all__ = [
    "FAILURE_PREFIXES",
    "FREE_TEXT_TAIL_CHARS",
    "check_math",
    "extract_boxed",
    "is_grader_failure",
    "math_equal",
]

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


def is_grader_failure(reason: str | None) -> bool:
    """True when ``reason`` (from :func:`math_equal`) says the check itself failed.

    >>> is_grader_failure("timeout: no result after 5.00 s"), is_grader_failure(None)
    (True, False)
    """
    return reason is not None and reason.startswith(FAILURE_PREFIXES)


def _box_argument(text: str, pos: int) -> tuple[str | None, bool]:
    """Argument of a box command whose name ends at ``pos``: ``(content, complete)``."""
    n = len(text)
    j = pos
    while j < n and text[j] in " \t":
        j += 1
    if j >= n:
        return None, False
    if text[j] == "{":
        depth = 0
        i = j
        while i < n:
            c = text[i]
            if c == "\\":  # an escaped character, e.g. \{ or \}, never counts as a brace
                i += 2
                continue
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    return text[j + 1 : i].strip(), True
            i += 1
        return None, False
    # The brace-less form of the MATH dataset, "\boxed 5": up to the next "$" or line end.
    rest = re.split(r"[$\n]", text[j:], maxsplit=1)[0]
    return rest.strip().rstrip(".").strip(), True


def extract_boxed(text: str) -> str | None:
    r"""Content of the last ``\boxed{...}`` or ``\fbox{...}`` in ``text``, braces balanced.

    Returns ``None`` when there is no box or when the last box is cut off (an unclosed brace, as in
    a truncated completion). Empty boxes (``\boxed{}``, e.g. an echoed instruction) are skipped.
    Escaped braces (``\{``, ``\}``) do not count. The MATH form ``\boxed 5`` is read up to the next
    ``$`` or end of line.

    >>> extract_boxed(r"so $\boxed{\frac{1}{2}}$ and finally \boxed{\{1, 2\}}.")
    '\\{1, 2\\}'
    >>> extract_boxed(r"\fbox{x^{2}}"), extract_boxed(r"$\boxed 5$"), extract_boxed("none")
    ('x^{2}', '5', None)
    >>> extract_boxed(r"\boxed{3} then \boxed{\frac{1}{") is None
    True
    """
    for match in reversed(list(_BOX_RE.finditer(text))):
        content, complete = _box_argument(text, match.end())
        if not complete:
            return None
        if content:
            return content
    return None


#: The check run in the checker process, as (file, function); tests swap in a failing one.
_CHECK: tuple[str, str] = (_mathcheck.__file__, "check_math")


def math_equal(
    gold: str, predicted: str, timeout_s: float = 5.0, *, free_text: bool = False
) -> tuple[bool, str | None]:
    r"""``(is_correct, failure_reason)``: is ``predicted`` mathematically equal to ``gold``?

    ``predicted`` is an extracted answer (``"\frac{1}{2}"``, ``"0.5"``, ``"[0, 1)"``); with
    ``free_text=True`` it is a whole completion and math-verify looks for the final answer in its
    last :data:`FREE_TEXT_TAIL_CHARS` characters. The check runs in a checker process and is
    abandoned after ``timeout_s`` seconds. Never raises: a timeout gives
    ``(False, "timeout: ...")``, a crash or an unparseable gold ``(False, "grader error: ...")``;
    ``failure_reason`` is ``None`` whenever the comparison itself ran (right or wrong).
    """
    path, name = _CHECK
    try:
        if free_text:
            predicted = predicted[-FREE_TEXT_TAIL_CHARS:]
        result = shared_pool().call_file(
            path, name, gold, predicted, free_text, timeout_s=timeout_s
        )
    except Exception as exc:  # a bad argument; CheckerPool calls catch everything else
        return False, f"grader error: {type(exc).__name__}: {exc}"
    if result.status == "timeout":
        return False, f"timeout: math-verify gave no result within {timeout_s:g} s"
    if result.status == "error":
        return False, f"grader error: {result.detail}"
    value = result.value
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], bool)
        and (value[1] is None or isinstance(value[1], str))
    ):
        return value[0], value[1]
    return False, f"grader error: checker returned {value!r}"
