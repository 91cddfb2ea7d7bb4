r"""Question sets: JSONL loading with precise errors, and prompt rendering.

One JSON object per line; blank lines are skipped. The id, problem and answer fields are named by
the caller (``id``, ``problem``, ``answer`` by default); every other key is kept as metadata and
can be used in the prompt template. Numeric ids and answers are turned into strings.

>>> q = Question("q1", "What is $1+1$?", "2", {"topic": "arithmetic"})
>>> print(render_prompt(q, template="[{topic}] {problem} {instruction}", instruction="Box it."))
[arithmetic] What is $1+1$? Box it.
"""

from __future__ import annotations

import hashlib
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaptive_eval.base.errors import InputError
from adaptive_eval.inputs.bounded import MAX_TEXT_BYTES, parse_json, read_bytes

DEFAULT_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
DEFAULT_TEMPLATE = "{problem}\n\n{instruction}"

#: The shipped 20-question test set (small arithmetic and algebra problems).
ARITH20 = Path(__file__).resolve().parent.parent / "data" / "arith20.jsonl"


@dataclass(frozen=True)
class Question:
    """One question: its id, the problem statement, the gold answer and any other fields."""

    id: str
    problem: str
    answer: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Dataset:
    """Questions in file order, with the SHA-256 of the file's bytes (for run provenance)."""

    questions: tuple[Question, ...]
    sha256: str
    path: str

    def __len__(self) -> int:
        return len(self.questions)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(q.id for q in self.questions)

    def by_id(self, question_id: str) -> Question:
        for q in self.questions:
            if q.id == question_id:
                return q
        raise KeyError(question_id)


def _text_field(
    record: dict[str, Any], name: str, where: str, lineno: int, *, allow_number: bool
) -> str | None:
    if name not in record:
        return None
    value = record[name]
    if isinstance(value, str):
        return value
    if allow_number and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    kinds = "a string or a number" if allow_number else "a string"
    raise InputError(f"line {lineno}: must be {kinds}, got {value!r}", source=where, field=name)


def load_dataset(
    path: str | Path,
    id_field: str = "id",
    problem_field: str = "problem",
    answer_field: str = "answer",
) -> Dataset:
    """Read a JSONL question file; :class:`InputError` names the file, line and field of a fault.

    Faults: unreadable file, invalid JSON (an integer of more than 100 digits, ``NaN``,
    ``Infinity`` or ``1e999`` and nesting too deep to read included), a line that is not an
    object, a missing or empty id, problem or answer (the message says which), a duplicate id,
    an empty file.
    """
    p = Path(path)
    raw = read_bytes(p, limit=MAX_TEXT_BYTES, what="dataset")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError(f"line {line}: not valid UTF-8", source=f"{p}:{line}") from None

    questions: list[Question] = []
    first_line: dict[str, int] = {}
    for lineno, row in enumerate(text.splitlines(), start=1):
        if not row.strip():
            continue
        where = f"{p}:{lineno}"
        try:  # an integer of 5,000 digits, NaN, 1e999 or a line nested 200,000 deep too
            record = parse_json(row, source=where)
        except InputError as exc:  # a line is JSON's line 1: its column is what says where
            reason = exc.message.replace("at line 1, column", "at column", 1)
            raise InputError(f"line {lineno}: {reason}", source=where) from None
        if not isinstance(record, dict):
            raise InputError(
                f"line {lineno}: expected a JSON object, got {type(record).__name__}", source=where
            )
        values: dict[str, str] = {}
        for role, name in (("id", id_field), ("problem", problem_field), ("answer", answer_field)):
            value = _text_field(record, name, where, lineno, allow_number=role != "problem")
            if value is None:
                raise InputError(f"line {lineno}: missing {role} field {name!r}", source=where)
            if not value.strip():
                raise InputError(
                    f"line {lineno}: empty {role} field {name!r}", source=where, field=name
                )
            values[role] = value.strip() if role != "problem" else value
        qid = values["id"]
        if qid in first_line:
            raise InputError(
                f"line {lineno}: duplicate id {qid!r} (first on line {first_line[qid]})",
                source=where,
                field=id_field,
            )
        first_line[qid] = lineno
        metadata = {
            k: v for k, v in record.items() if k not in (id_field, problem_field, answer_field)
        }
        questions.append(Question(qid, values["problem"], values["answer"], metadata))
    if not questions:
        raise InputError("dataset has no questions", source=str(p))
    return Dataset(tuple(questions), hashlib.sha256(raw).hexdigest(), str(p))


def template_fields(template: str) -> list[str]:
    """Placeholder names used by ``template`` (``str.format`` syntax).

    >>> template_fields("{problem}\\n\\n{instruction} {{literal}}")
    ['problem', 'instruction']
    """
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise InputError(f"malformed prompt template: {exc}", field="template") from None
    names = []
    for _, name, _, _ in parsed:
        if name is None:
            continue
        if name == "" or name.isdigit():
            raise InputError(
                "prompt template placeholders must be named, e.g. {problem}", field="template"
            )
        names.append(name)
    return names


def render_prompt(
    question: Question,
    template: str = DEFAULT_TEMPLATE,
    instruction: str = DEFAULT_INSTRUCTION,
) -> str:
    """Fill ``template``: ``{problem}``, ``{instruction}``, ``{id}`` and any metadata key.

    The gold answer is never available to the template. An unknown placeholder is an
    :class:`InputError` naming it.
    """
    values: dict[str, Any] = dict(question.metadata)
    values.update(problem=question.problem, instruction=instruction, id=question.id)
    for name in template_fields(template):
        key = name.split(".", 1)[0].split("[", 1)[0]
        if key not in values:
            raise InputError(
                f"unknown placeholder {{{key}}} in prompt template for question {question.id!r}; "
                f"available: {', '.join(sorted(values))}",
                field="template",
            )
    try:
        return template.format_map(values)
    except (KeyError, IndexError, AttributeError, ValueError, TypeError) as exc:
        raise InputError(
            f"cannot fill prompt template for question {question.id!r}: {exc!r}", field="template"
        ) from None
