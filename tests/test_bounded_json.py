"""Issue 48, item 8: JSON read from a user's file, within bounds.

Python's ``json`` converts an integer of any length (Python then refuses past 4,300 digits with a
ValueError that is not a JSONDecodeError, so a reader catching only that ended "unexpected
error"), reads ``NaN`` and ``Infinity`` (not JSON) and ``1e999`` (infinity) silently, and recurses
into nesting. :func:`adaptive_eval.inputs.bounded.parse_json` refuses each in one line naming the
file and the value.
"""

from __future__ import annotations

import json

import pytest

from adaptive_eval.base.errors import InputError
from adaptive_eval.inputs.bounded import MAX_INT_DIGITS, parse_json


def _refusal(data: str | bytes, **options: object) -> InputError:
    with pytest.raises(InputError) as info:
        parse_json(data, source="f.jsonl:3", field="answer", **options)  # type: ignore[arg-type]
    assert info.value.source == "f.jsonl:3" and info.value.field == "answer"
    assert len(str(info.value)) < 300, "the value is shortened, never printed whole"
    return info.value


def test_json_loads_alone_crashes_on_5000_digits() -> None:
    """What the readers did: a ValueError, not the JSONDecodeError they catch."""
    with pytest.raises(ValueError) as info:
        json.loads("9" * 5000)
    assert not isinstance(info.value, json.JSONDecodeError)


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ('{"a": ' + "9" * 5000 + "}", "an integer of 5,000 digits, more than the 100"),
        ("[-" + "1" * 200 + "]", "an integer of 200 digits"),
        ('{"score": NaN}', "NaN is not a number (JSON has no NaN or Infinity)"),
        ('{"score": -Infinity}', "-Infinity is not a number"),
        ('{"score": 1e999}', "1e999 is past the largest number"),
        ('{"score": -' + "9" * 400 + ".5}", "(403 characters) is past the largest number"),
        ("[" * 200_000 + "]" * 200_000, "JSON nested too deep to read"),
        ('{"a": 1,}', "invalid JSON at line 1, column 9"),
        (b'{"a": "caf\xe9"}', "not readable JSON"),
    ],
)
def test_what_json_takes_silently_or_chokes_on_is_one_line(text: str | bytes, expect: str) -> None:
    assert expect in str(_refusal(text))


def test_what_is_within_bounds_reads_as_json_reads_it() -> None:
    text = (
        '{"n": ' + "9" * MAX_INT_DIGITS + ', "x": 1e308, "y": -2.5e-320, "s": "' + "9" * 5000 + '"}'
    )
    assert parse_json(text, source="f.json") == json.loads(text)
    assert parse_json(b"[1, 2]", source="f.json") == [1, 2]


def test_nan_may_be_allowed_where_a_format_writes_it() -> None:
    """Python's json writes NaN by default: a reader of such files may take it (not the
    integers past the bound)."""
    assert parse_json("[NaN]", source="f.json", finite=False)[0] != 0
    assert "5,000 digits" in str(_refusal("[" + "1" * 5000 + "]", finite=False))
