"""Bring finished runs of other harnesses in as an (L, M, N) outcome tensor.

The result is the npz that the ``replay`` backend, ``policy.prior`` and ``adaptive-eval score``
read: ``outcomes`` (L, M, N) integer categories, ``models`` (L,), ``questions`` (M,). A lab can
then re-rank a finished run with Bayes@N, or replay it through the adaptive controller.

Formats read (the shapes the harnesses document; fixtures in ``tests/fixtures``):

- ``lm-eval``: lm-evaluation-harness ``--log_samples`` files,
  ``<output_path>/<model>/samples_<task>_<date>.jsonl``, one JSON object per document with
  ``doc_id`` and one key per metric (``exact_match``, ``acc``, ...). The model is the folder the
  file lies in (the harness names it after the model); each file of one (model, task) is one
  trial of every document in it, in date order (so N runs with different seeds give N trials).
  A task's ``repeats`` are reduced to one score per document by the harness's filter, so they are
  one trial, not N. The harness writes one line per (document, filter) (gsm8k: ``strict-match``
  and ``flexible-extract``): with several filters in the files, ``--filter NAME`` chooses one.
- ``inspect``: inspect_ai eval logs, ``.json`` (``{"eval": {"task", "model", ...}, "samples":
  [...]}``) or ``.eval`` (a zip with ``header.json`` and ``samples/<id>_epoch_<n>.json``). Each
  sample is one (``id``, ``epoch``); epochs are the trials (epoch e is trial e - 1) and the
  model is ``eval.model``.

A score becomes a category through a mapping (``--map VALUE=CATEGORY``); without one, the binary
defaults apply: 1 / true / inspect's ``C`` (correct) -> 1 and 0 / false / ``I`` (incorrect) -> 0.
Any other value (inspect's ``P`` partial or ``N`` no-answer, a graded 0.5, ...) is an error that
names it, so no score is silently given a category.

Every (model, question) cell must be present. A dense tensor holds the same N for every cell, so
cells with more trials than the smallest are truncated to it (the dropped count is reported).
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.files import atomic_output
from adaptive_eval.inputs.bounded import (
    MAX_MEMBER_BYTES,
    MAX_TEXT_BYTES,
    check,
    parse_json,
    size_text,
)

FORMATS = ("lm-eval", "inspect")
DEFAULT_MAP: dict[float | str, int] = {1.0: 1, 0.0: 0, "C": 1, "I": 0}
LM_EVAL_METRICS = ("exact_match", "acc", "acc_norm", "pass@1", "pass_at_1")
_SAMPLES_NAME = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[\d\-.]+)\.jsonl$")


@dataclass(frozen=True)
class Score:
    """One scored attempt read from a harness log; ``where`` is its place in the file (``line
    12``, ``member samples/3_epoch_1.json``)."""

    model: str
    question: str
    trial: int
    value: Any
    source: str
    where: str = ""


def _norm(value: Any) -> float | str:
    """A score value as a number or a stripped string; ValueError for anything else."""
    if isinstance(value, bool | int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            return text
    raise ValueError(f"score {json.dumps(value)} is neither a number nor a string")


#: The most an .eval log's samples may take unpacked: each is parsed whole (12 members of
#: 60 MB, each under the member limit, were read into memory without a word).
MAX_LOG_UNPACKED = 512 << 20
#: The most ``--map`` entries (a rubric has a handful of score values; 40,000 were accepted).
MAX_MAP_ENTRIES = 1000


def _refuse_repeats(paths: Sequence[Path]) -> None:
    """A file given twice (by two names, or two copies of one file) would be counted as two
    trials of the same samples: refused, naming both."""
    seen: dict[tuple[int, str], Path] = {}
    for path in paths:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        key = (path.stat().st_size, digest.hexdigest())
        first = seen.setdefault(key, path)
        if first is not path:
            same = "the same file" if first.resolve() == path.resolve() else "a copy of it"
            raise InputError(
                f"given twice ({same}: {first}); each file is one trial of its model, so its "
                "samples would be counted twice: give it once",
                source=str(path),
            )


def check_name(name: str, what: str, source: str) -> str:
    """A model or task name read from a log: printable, of reasonable length (an ANSI escape
    in a name reached the terminal and the report)."""
    if not name.isprintable() or len(name) > 256:
        shown = repr(name[:60]) + ("..." if len(name) > 60 else "")
        raise InputError(
            f"{what} {shown} holds control characters or is over 256 characters",
            source=source,
        )
    return name


def parse_map(items: Sequence[str]) -> dict[float | str, int]:
    """``["C=1", "P=1", "0.5=1"]`` -> a value -> category mapping (keys normalised)."""
    if len(items) > MAX_MAP_ENTRIES:
        raise InputError(
            f"--map given {len(items):,} times; at most {MAX_MAP_ENTRIES:,} score values"
        )
    out: dict[float | str, int] = {}
    for item in items:
        value, sep, category = item.rpartition("=")
        if not sep or not value:
            raise InputError(f"--map {item!r} is not VALUE=CATEGORY")
        key = _norm(value.lower() if value.lower() in ("true", "false") else value)
        try:
            out[key] = int(category)
        except ValueError:
            raise InputError(f"--map {item!r}: category {category!r} is not an integer") from None
    for key in [k for k in out if k in ("true", "false")]:
        out[1.0 if key == "true" else 0.0] = out.pop(key)
    if any(c < 0 for c in out.values()):
        raise InputError("--map categories must be >= 0")
    return out


# -- lm-evaluation-harness -----------------------------------------------------------------------
def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    check(path, limit=MAX_TEXT_BYTES, what="lm-eval samples file")
    with path.open("rb") as handle:  # decoded line by line, so a bad byte names its line
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise InputError(
                    f"line {number}: not valid UTF-8 (byte 0x{raw[error.start]:02x}); lm-eval "
                    "writes UTF-8: is this a samples file?",
                    source=str(path),
                ) from None
            if not line.strip():
                continue
            # An integer of 5,000 digits or a line nested 200,000 deep is refused in one line;
            # NaN and Infinity are read (Python's json, which lm-eval writes with, writes them)
            # and a score of NaN is then mapped with --map nan=CATEGORY or refused.
            try:
                record = parse_json(line, source=str(path), finite=False)
            except InputError as error:  # a line is JSON's line 1: its column says where
                reason = error.message.replace("at line 1, column", "at column", 1)
                raise InputError(f"line {number}: {reason}", source=str(path)) from None
            if not isinstance(record, dict):
                raise InputError(f"line {number}: not a JSON object", source=str(path))
            yield number, record


def lm_eval_filters(paths: Iterable[Path]) -> list[str]:
    """The filters (``filter`` field) the files' lines were written under, sorted."""
    found = {str(r["filter"]) for path in paths for _, r in _jsonl(path) if "filter" in r}
    return sorted(found)


def read_lm_eval(
    paths: Iterable[Path], metric: str | None = None, filter_name: str | None = None
) -> list[Score]:
    """Scores of lm-eval ``samples_<task>_<date>.jsonl`` files (see the module docstring).

    lm-eval writes one line per (document, filter) (gsm8k: ``strict-match`` and
    ``flexible-extract``); a trial is one filter's score, so with several filters in the files
    ``filter_name`` must choose one.
    """
    paths = list(paths)
    filters = lm_eval_filters(paths)
    if filter_name is None and len(filters) > 1:
        raise InputError(
            f"the files hold {len(filters)} filters ({', '.join(filters)}): lm-eval writes one "
            "line per document and filter; choose one with --filter NAME"
        )
    if filter_name is not None and filter_name not in filters:
        raise InputError(
            f"--filter {filter_name!r} is not in the files (filters found: "
            f"{', '.join(filters) or 'none'})"
        )
    runs: dict[tuple[str, str], list[tuple[str, Path]]] = defaultdict(list)
    for path in paths:
        match = _SAMPLES_NAME.match(path.name)
        if match is None:
            raise InputError(
                "not an lm-eval --log_samples file (expected samples_<task>_<date>.jsonl)",
                source=str(path),
            )
        model = check_name(path.resolve().parent.name, "model (folder) name", str(path))
        runs[(model, match["task"])].append((match["date"], path))
    scores: list[Score] = []
    for (model, task), files in sorted(runs.items()):
        for trial, (_, path) in enumerate(sorted(files)):
            before = len(scores)
            for number, record in _jsonl(path):
                if filter_name is not None and record.get("filter") != filter_name:
                    continue
                if "doc_id" not in record:
                    raise InputError(f"line {number}: no doc_id", source=str(path))
                key = metric or next((m for m in LM_EVAL_METRICS if m in record), None)
                if key is None or key not in record:
                    listed = record.get("metrics") or sorted(
                        k for k, v in record.items() if isinstance(v, int | float)
                    )
                    raise InputError(
                        f"line {number}: no metric {key or 'of ' + ', '.join(LM_EVAL_METRICS)}; "
                        f"give --metric (this file has {listed})",
                        source=str(path),
                    )
                scores.append(
                    Score(
                        model,
                        f"{task}/{record['doc_id']}",
                        trial,
                        record[key],
                        str(path),
                        f"line {number}",
                    )
                )
            if len(scores) == before:  # the model's run would be missing without a word
                chosen = f" of filter {filter_name!r}" if filter_name is not None else ""
                raise InputError(
                    f"holds no scored sample{chosen} (an empty file?); every file given is one "
                    f"trial of {model!r} on {task!r}: remove it or give a complete one",
                    source=str(path),
                )
    return scores


# -- inspect_ai ----------------------------------------------------------------------------------
#: Epochs a sample may have (1-based; epoch e is trial e - 1): a dense tensor holds every one.
MAX_EPOCH = 1_000_000
#: What a corrupt zip, a member that is not UTF-8 JSON or an unsupported compression raises.
_UNREADABLE = (
    OSError,
    ValueError,
    EOFError,
    KeyError,
    NotImplementedError,
    RuntimeError,
    zipfile.BadZipFile,
    zlib.error,
)


def _member(archive: zipfile.ZipFile, name: str, path: Path) -> Any:
    """One JSON member of an ``.eval`` zip, bounded before it is read."""
    size = archive.getinfo(name).file_size
    if size > MAX_MEMBER_BYTES:
        raise InputError(
            f"member {name} is {size_text(size)} unpacked, more than the "
            f"{size_text(MAX_MEMBER_BYTES)} a sample or header may be",
            source=str(path),
        )
    try:
        text = _decoded(archive.read(name))
    except _UNREADABLE as error:
        raise InputError(
            f"member {name} is not readable JSON ({type(error).__name__}: {error})",
            source=str(path),
        ) from None
    try:
        return parse_json(text, source=str(path), finite=False)
    except InputError as error:
        raise InputError(
            f"member {name} is not readable JSON ({error.message})", source=str(path)
        ) from None


def _decoded(data: bytes) -> str:
    """``data`` as text, decoded as :func:`json.loads` decodes bytes (UTF-8, -16 or -32)."""
    return data.decode(json.detect_encoding(data), "surrogatepass")


def _log_json(path: Path) -> Any:
    """A ``.json`` log parsed; an integer of 5,000 digits or nesting 200,000 deep is one line
    naming the file (NaN and Infinity are read: Python's json writes them)."""
    text = _decoded(path.read_bytes())  # bounded by check(); what fails is _UNREADABLE
    try:
        return parse_json(text, source=str(path), finite=False)
    except InputError as error:
        raise InputError(
            f"not a readable inspect_ai log ({error.message})", source=str(path)
        ) from None


def _inspect_log(path: Path) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """(eval header, samples each with where it was read) of a ``.json`` or ``.eval`` log."""
    check(path, limit=MAX_TEXT_BYTES, what="inspect_ai log")
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
                if "header.json" in names:
                    header = _member(archive, "header.json", path)
                elif "_journal/start.json" in names:
                    header = _member(archive, "_journal/start.json", path)
                else:
                    raise InputError("an .eval zip without header.json", source=str(path))
                unpacked = sum(
                    archive.getinfo(name).file_size
                    for name in names
                    if name.startswith("samples/") and name.endswith(".json")
                )
                if unpacked > MAX_LOG_UNPACKED:
                    raise InputError(
                        f"its samples take {size_text(unpacked)} unpacked, more than the "
                        f"{size_text(MAX_LOG_UNPACKED)} one log is read into memory for (each "
                        "is parsed whole); split the log",
                        source=str(path),
                    )
                samples = [
                    (f"member {name}", _member(archive, name, path))
                    for name in sorted(names)
                    if name.startswith("samples/") and name.endswith(".json")
                ]
            if not isinstance(header, dict):
                raise InputError("header.json is not a JSON object", source=str(path))
            return header, samples
        data = _log_json(path)
    except _UNREADABLE as error:
        reason = f"{type(error).__name__}: {error}"
        raise InputError(f"not a readable inspect_ai log ({reason})", source=str(path)) from None
    if not isinstance(data, dict) or "eval" not in data:
        raise InputError("not an inspect_ai eval log (no 'eval' header)", source=str(path))
    listed = data.get("samples")
    if not listed:
        raise InputError(
            "the log holds no samples (was it written with --no-log-samples?)", source=str(path)
        )
    if not isinstance(listed, list):
        raise InputError("'samples' is not a list", source=str(path))
    return data, [(f"samples[{index}]", sample) for index, sample in enumerate(listed)]


def _epoch(sample: dict[str, Any], where: str, path: Path) -> int:
    """A sample's epoch: a whole number in 1..MAX_EPOCH (epoch 0 or 10^9 used to give an npz
    of N = 0 trials that ``score`` refused)."""
    epoch = sample.get("epoch", 1)
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 1 <= epoch <= MAX_EPOCH:
        raise InputError(
            f"{where}: sample {sample.get('id')!r} has epoch {json.dumps(epoch)}; inspect_ai "
            f"numbers epochs 1, 2, ... (at most {MAX_EPOCH:,} here)",
            source=str(path),
        )
    return epoch


def read_inspect(paths: Iterable[Path], scorer: str | None = None) -> list[Score]:
    """Scores of inspect_ai logs; epochs are trials (see the module docstring)."""
    scores: list[Score] = []
    for path in paths:
        header, samples = _inspect_log(path)
        info = header.get("eval") or {}
        model, task = info.get("model"), info.get("task")
        if not model or not task:
            raise InputError("eval header lacks model or task", source=str(path))
        check_name(str(model), "model name", str(path))
        check_name(str(task), "task name", str(path))
        for where, sample in samples:
            if not isinstance(sample, dict) or sample.get("id") is None:
                raise InputError(
                    f"{where}: not an inspect_ai sample (no 'id'; keys: "
                    f"{sorted(sample) if isinstance(sample, dict) else type(sample).__name__})",
                    source=str(path),
                )
            found = sample.get("scores") or {}
            if not isinstance(found, dict):
                raise InputError(f"{where}: 'scores' is not a mapping", source=str(path))
            name = scorer or (next(iter(found)) if len(found) == 1 else None)
            if name is None or name not in found:
                choose = "choose a scorer with --metric" if len(found) > 1 else "no score to read"
                raise InputError(
                    f"{where}: sample {sample['id']!r} epoch {sample.get('epoch')}: {choose} "
                    f"(scores present: {sorted(found)})",
                    source=str(path),
                )
            entry = found[name]
            value = entry.get("value") if isinstance(entry, dict) else entry
            scores.append(
                Score(
                    str(model),
                    f"{task}/{sample['id']}",
                    _epoch(sample, where, path) - 1,
                    value,
                    str(path),
                    where,
                )
            )
    return scores


# -- the tensor ----------------------------------------------------------------------------------
@dataclass
class Imported:
    """The outcome tensor and what was done to build it."""

    outcomes: np.ndarray  # (L, M, N)
    models: list[str]
    questions: list[str]
    dropped_trials: int
    trials_per_cell: tuple[int, int]  # (min, max) before truncation
    notes: list[str] = field(default_factory=list)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(path, "wb") as handle:
            np.savez_compressed(
                handle,
                outcomes=self.outcomes.astype(np.int16),
                models=np.array(self.models),
                questions=np.array(self.questions),
            )


def to_tensor(scores: Sequence[Score], mapping: Mapping[float | str, int] | None) -> Imported:
    """Map scores to categories and build the dense (L, M, N) tensor."""
    if not scores:
        raise InputError("no scored samples found in the given files")
    table = dict(DEFAULT_MAP) if mapping is None else dict(mapping)
    models = sorted({s.model for s in scores})
    questions = sorted({s.question for s in scores}, key=_natural)
    cells: dict[tuple[int, int], dict[int, int]] = defaultdict(dict)
    model_index = {m: i for i, m in enumerate(models)}
    question_index = {q: i for i, q in enumerate(questions)}
    for score in scores:
        where = f"{score.where}: " if score.where else ""
        try:
            value = _norm(score.value)
        except ValueError as error:  # a null score, a list, ...
            raise InputError(
                f"{where}{error} ({score.model} on {score.question})", source=score.source
            ) from None
        if value not in table:
            raise InputError(
                f"{where}score {score.value!r} of {score.model} on {score.question} has no "
                f"category; map it with --map {score.value}=CATEGORY (mapped: "
                f"{sorted(map(str, table))})",
                source=score.source,
            )
        cell = cells[(model_index[score.model], question_index[score.question])]
        if score.trial in cell:
            raise InputError(
                f"{score.model} on {score.question}: trial {score.trial} appears twice",
                source=score.source,
            )
        cell[score.trial] = table[value]
    missing = [
        f"{m} on {q}"
        for m, mi in model_index.items()
        for q, qi in question_index.items()
        if (mi, qi) not in cells
    ]
    if missing:
        raise InputError(
            f"{len(missing)} (model, question) cell(s) have no trial, e.g. {missing[0]}; every "
            "model must answer every question"
        )
    # Trials must be 0..n-1 in each cell: a gap would shift later trials' indices (and seeds).
    counts = {}
    for key, cell in cells.items():
        run = 0
        while run in cell:
            run += 1
        counts[key] = run
    low, high = min(counts.values()), max(len(c) for c in cells.values())
    if low == 0:  # a cell without its first trial: the tensor would hold no trial at all
        (mi, qi), cell = next((k, c) for k, c in cells.items() if counts[k] == 0)
        raise InputError(
            f"{models[mi]} on {questions[qi]} has no first trial (trial 0: lm-eval's first run, "
            f"inspect's epoch 1), only trial(s) {sorted(cell)[:5]}; every cell needs trials "
            "0, 1, ... without a gap"
        )
    outcomes = np.zeros((len(models), len(questions), low), dtype=np.int64)
    for (mi, qi), cell in cells.items():
        outcomes[mi, qi] = [cell[t] for t in range(low)]
    dropped = sum(len(c) for c in cells.values()) - outcomes.size
    notes = []
    if dropped:
        notes.append(f"truncated to N = {low} trials per cell; {dropped} trial(s) dropped")
    return Imported(outcomes, models, questions, dropped, (low, high), notes)


def _natural(text: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def import_files(
    fmt: str,
    paths: Sequence[Path],
    mapping: Mapping[float | str, int] | None,
    metric: str | None,
    filter_name: str | None = None,
) -> Imported:
    if fmt not in FORMATS:
        raise InputError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if filter_name is not None and fmt != "lm-eval":
        raise InputError(f"--filter applies to --format lm-eval, not {fmt}")
    for path in paths:
        check(path, limit=MAX_TEXT_BYTES, what=f"{fmt} log")
    _refuse_repeats(paths)
    scores = (
        read_lm_eval(paths, metric, filter_name)
        if fmt == "lm-eval"
        else read_inspect(paths, metric)
    )
    return to_tensor(scores, mapping)
