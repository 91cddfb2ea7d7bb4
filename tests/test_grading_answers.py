"""Answer extraction and math-verify equivalence, including threads, timeouts and crashes."""

from __future__ import annotations

import os
import threading
import time

import pytest

from adaptive_eval.grading import _pool, answers
from adaptive_eval.grading._pool import CheckerPool, shared_pool
from adaptive_eval.grading.answers import extract_boxed, is_grader_failure, math_equal

# ---- extract_boxed ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"The answer is \boxed{42}.", "42"),
        (r"$\boxed{\frac{1}{2}}$", r"\frac{1}{2}"),
        (r"\fbox{7}", "7"),
        (r"nested \boxed{\frac{\sqrt{2}}{2}} ok", r"\frac{\sqrt{2}}{2}"),
        (r"set \boxed{\{1, 2\}}", r"\{1, 2\}"),
        (r"interval \boxed{[0, 1)}", "[0, 1)"),
        (r"first \boxed{1}, then \boxed{2}, finally \boxed{-3}", "-3"),
        (r"mixed \boxed{1} and \fbox{2}", "2"),
        (r"$\boxed 5$", "5"),
        ("\\boxed 12\nnext line", "12"),
        (r"\boxed {  9 }", "9"),
        (r"Put your answer in \boxed{}. It is \boxed{8}", "8"),
        (r"\boxed{8} and an echoed instruction \boxed{}", "8"),
    ],
)
def test_extract_boxed_finds_last_box(text: str, expected: str) -> None:
    assert extract_boxed(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "no box at all, the answer is 4",
        "",
        r"\boxed{}",
        r"truncated \boxed{\frac{1}{2",
        r"first \boxed{3} then cut off \boxed{\frac{7",
        r"ends right after \boxed",
        r"\boxedx{3} is another command",
        r"escaped closing brace does not close \boxed{\{1, 2\}",
    ],
)
def test_extract_boxed_absent_or_truncated(text: str) -> None:
    assert extract_boxed(text) is None


# ---- math_equal: real answer forms -------------------------------------------------------------


@pytest.mark.parametrize(
    ("gold", "predicted"),
    [
        (r"\frac{1}{2}", "0.5"),
        (r"\frac{1}{2}", "1/2"),
        (r"\frac{1}{2}", r"\dfrac{1}{2}"),
        ("0.5", r"\frac{1}{2}"),
        (r"2\sqrt{2}", r"\sqrt{8}"),
        (r"5\sqrt{2}", r"\sqrt{50}"),
        ("[0,1)", "[0,1)"),
        ("[0, 1)", "[0,1)"),
        (r"(-\infty, 5]", r"(-\infty,5]"),
        (r"\{1,2\}", r"\{2,1\}"),
        ("-3", "-3"),
        (r"-\frac{7}{3}", r"\frac{-7}{3}"),
        ("7", "7.0"),
        ("x^2+1", "1+x^2"),
        ("5", "x = 5"),
        ("42", r"\text{42}"),
    ],
)
def test_math_equal_accepts_equivalent_forms(gold: str, predicted: str) -> None:
    assert math_equal(gold, predicted) == (True, None)


@pytest.mark.parametrize(
    ("gold", "predicted"),
    [
        (r"\frac{1}{2}", "0.6"),
        (r"2\sqrt{2}", r"\sqrt{6}"),
        ("[0,1)", "[0,1]"),
        ("[0,1)", "(0,1)"),
        (r"\{1,2\}", r"\{1,3\}"),
        ("-3", "3"),
        (r"\frac{2}{3}", "0.667"),
        ("42", "no number here"),
    ],
)
def test_math_equal_rejects_different_answers(gold: str, predicted: str) -> None:
    assert math_equal(gold, predicted) == (False, None)


def test_math_equal_free_text_finds_the_final_answer() -> None:
    text = "Adding the two gives 10, halving gives 5, so the final answer is $\\frac{13}{2}$."
    assert math_equal(r"\frac{13}{2}", text, free_text=True) == (True, None)
    assert math_equal("7", text, free_text=True) == (False, None)


def test_unparseable_gold_is_a_grader_failure() -> None:
    ok, reason = math_equal("", "1")
    assert not ok
    assert is_grader_failure(reason)
    assert "gold" in (reason or "")


def test_is_grader_failure() -> None:
    assert is_grader_failure("timeout: x")
    assert is_grader_failure("grader error: y")
    assert not is_grader_failure(None)
    assert not is_grader_failure("no \\boxed{} answer")


# ---- threads, timeouts, crashes ----------------------------------------------------------------


def test_math_equal_from_worker_threads() -> None:
    """math-verify's own signal.alarm timeouts would fail off the main thread; ours must not."""
    cases = [
        (r"\frac{1}{2}", "0.5", True),
        (r"2\sqrt{2}", r"\sqrt{8}", True),
        (r"\{1,2\}", r"\{2,1\}", True),
        ("-3", "3", False),
    ] * 3
    results: list[tuple[int, tuple[bool, str | None]]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(i: int, gold: str, pred: str) -> None:
        try:
            out = math_equal(gold, pred)
            with lock:
                results.append((i, out))
        except BaseException as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i, g, p)) for i, (g, p, _) in enumerate(cases)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert sorted(results) == [(i, (want, None)) for i, (_, _, want) in enumerate(cases)]


def test_math_equal_timeout_is_honoured_and_pool_recovers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert math_equal("1", "1") == (True, None)  # warm pool
    replaced = shared_pool().replaced
    monkeypatch.setattr(answers, "_CHECK", (_pool.__file__, "sleep_then_return"))
    out: list[tuple[bool, str | None]] = []
    start = time.monotonic()
    # the stand-in check sleeps for `gold` seconds
    thread = threading.Thread(target=lambda: out.append(math_equal("60", "1", timeout_s=0.3)))
    thread.start()
    thread.join(30)
    elapsed = time.monotonic() - start
    assert out and out[0][0] is False
    assert (out[0][1] or "").startswith("timeout")
    assert elapsed < 5.0
    assert shared_pool().replaced == replaced + 1
    monkeypatch.undo()
    assert math_equal(r"\frac{1}{2}", "0.5") == (True, None)


def test_pool_reports_crash_and_exception_without_raising() -> None:
    pool = CheckerPool(1, preload=())
    try:
        died = pool.call(os._exit, 3, timeout_s=10)
        assert died.status == "error"
        assert "exit code 3" in died.detail
        raised = pool.call(int, "not a number", timeout_s=10)
        assert raised.status == "error"
        assert "ValueError" in raised.detail
        slow = pool.call(time.sleep, 30, timeout_s=0.2)
        assert slow.status == "timeout"
        ok = pool.call(abs, -3, timeout_s=10)
        assert (ok.status, ok.value) == ("ok", 3)
        assert pool.replaced == 2
        assert pool.size == 1
    finally:
        pool.close()
    assert pool.call(abs, -1, timeout_s=1).status == "error"  # closed pool: error, no raise


def test_math_equal_never_raises_when_the_checker_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answers, "_CHECK", (_pool.__file__, "exit_process"))
    ok, reason = math_equal("1", "1")  # the stand-in exits with code `gold`
    assert not ok
    assert (reason or "").startswith("grader error")
