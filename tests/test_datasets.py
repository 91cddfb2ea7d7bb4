"""JSONL question sets: the shipped arith20 set, loading errors with file and line, prompts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from adaptive_eval.base.errors import InputError
from adaptive_eval.grading import math_equal
from adaptive_eval.inputs.datasets import (
    ARITH20,
    DEFAULT_INSTRUCTION,
    Dataset,
    Question,
    load_dataset,
    render_prompt,
)


def write(tmp_path: Path, lines: list[str], name: str = "qs.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def row(**fields: object) -> str:
    return json.dumps(fields)


def test_shipped_arith20() -> None:
    ds = load_dataset(ARITH20)
    assert isinstance(ds, Dataset)
    assert len(ds) == 20 and len(set(ds.ids)) == 20
    assert ds.sha256 == hashlib.sha256(ARITH20.read_bytes()).hexdigest()
    answers = {q.answer for q in ds.questions}
    assert any(r"\frac" in a for a in answers)  # fractions
    assert any(r"\sqrt" in a for a in answers)  # a radical
    assert any(a.startswith("-") for a in answers)  # a negative number
    assert any(a.startswith(("[", "(")) for a in answers)  # an interval
    assert any(a.startswith(r"\{") for a in answers)  # a set
    assert all("topic" in q.metadata for q in ds.questions)


def test_arith20_gold_answers_are_checkable() -> None:
    """Every gold answer parses and equals itself under math-verify, and equals a known value."""
    ds = load_dataset(ARITH20)
    for q in ds.questions:
        assert math_equal(q.answer, q.answer) == (True, None), q.id
    known = {
        "arith-03": "-8",
        "arith-05": "0.5",
        "arith-11": "1.25",
        "arith-12": r"\sqrt{50}",
        "arith-14": r"\{3, 2\}",
        "arith-15": r"(-\infty, 5]",
        "arith-16": "[1,3)",
        "arith-20": "6.5",
    }
    by_id = {q.id: q for q in ds.questions}
    for qid, value in known.items():
        assert math_equal(by_id[qid].answer, value) == (True, None), qid


def test_load_fields_metadata_and_numbers(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            row(qid=7, question="2+2?", solution=4, source="x"),
            "",
            row(qid="b", question="Half?", solution=r"\frac{1}{2}"),
        ],
    )
    ds = load_dataset(path, id_field="qid", problem_field="question", answer_field="solution")
    assert ds.questions[0] == Question("7", "2+2?", "4", {"source": "x"})
    assert ds.questions[1].answer == r"\frac{1}{2}"
    assert ds.by_id("b").problem == "Half?"
    assert ds.path == str(path)


@pytest.mark.parametrize(
    ("lines", "line", "needle"),
    [
        ([row(id="a", problem="p", answer="1"), "{not json"], 2, "invalid JSON"),
        ([row(id="a", problem="p", answer="1"), "[1, 2]"], 2, "expected a JSON object"),
        (["", row(problem="p", answer="1")], 2, "missing id field 'id'"),
        ([row(id="a", answer="1")], 1, "missing problem field 'problem'"),
        ([row(id="a", problem="p")], 1, "missing answer field 'answer'"),
        ([row(id="a", problem="p", answer="  ")], 1, "empty answer field 'answer'"),
        ([row(id="a", problem="", answer="1")], 1, "empty problem field 'problem'"),
        ([row(id="a", problem="p", answer=None)], 1, "must be a string or a number"),
        ([row(id="a", problem=3, answer="1")], 1, "must be a string"),
        (
            [row(id="a", problem="p", answer="1"), row(id="a", problem="q", answer="2")],
            2,
            "duplicate id 'a' (first on line 1)",
        ),
    ],
)
def test_load_errors_name_file_line_and_field(
    tmp_path: Path, lines: list[str], line: int, needle: str
) -> None:
    path = write(tmp_path, lines)
    with pytest.raises(InputError) as info:
        load_dataset(path)
    message = str(info.value)
    assert f"{path}:{line}" in message
    assert f"line {line}" in message
    assert needle in message


def test_load_errors_for_missing_empty_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read dataset"):
        load_dataset(tmp_path / "absent.jsonl")
    empty = write(tmp_path, ["", "  "], "empty.jsonl")
    with pytest.raises(InputError, match="no questions") as info:
        load_dataset(empty)
    assert str(empty) in str(info.value)
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(row(id="a", problem="p", answer="1").encode() + b"\n\xff\xfe\n")
    with pytest.raises(InputError, match="line 2: not valid UTF-8"):
        load_dataset(binary)


def test_render_prompt_default_and_custom() -> None:
    q = Question("q1", "What is $1+1$?", "2", {"topic": "arithmetic", "level": 1})
    assert render_prompt(q) == "What is $1+1$?\n\n" + DEFAULT_INSTRUCTION
    assert DEFAULT_INSTRUCTION.endswith(r"within \boxed{}.")
    custom = render_prompt(q, "[{id} {topic}/{level}] {problem} {{literal}} {instruction}", "Go.")
    assert custom == "[q1 arithmetic/1] What is $1+1$? {literal} Go."


def test_render_prompt_rejects_unknown_placeholders() -> None:
    q = Question("q1", "p", "2", {"topic": "t"})
    with pytest.raises(InputError, match=r"unknown placeholder \{answer\}") as info:
        render_prompt(q, "{problem} {answer}")  # the gold answer is never available
    assert info.value.field == "template"
    assert "available: id, instruction, problem, topic" in str(info.value)
    with pytest.raises(InputError, match="must be named"):
        render_prompt(q, "{problem} {}")
    with pytest.raises(InputError, match="malformed"):
        render_prompt(q, "{problem")
