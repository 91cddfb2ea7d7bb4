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

import json
import re
import zipfile
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from adaptive_eval.errors import InputError
from adaptive_eval.storage import atomic_output

FORMATS = ("lm-eval", "inspect")
DEFAULT_MAP: dict[float | str, int] = {1.0: 1, 0.0: 0, "C": 1, "I": 0}
LM_EVAL_METRICS = ("exact_match", "acc", "acc_norm", "pass@1", "pass_at_1")
_SAMPLES_NAME = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[\d\-.]+)\.jsonl$")


@dataclass(frozen=True)
class Score:
    """One scored attempt read from a harness log."""

    model: str
    question: str
    trial: int
    value: Any
    source: str


def _norm(value: Any) -> float | str:
    if isinstance(value, bool | int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            return text
    raise InputError(f"score {value!r} is neither a number nor a string")


def parse_map(items: Sequence[str]) -> dict[float | str, int]:
    """``["C=1", "P=1", "0.5=1"]`` -> a value -> category mapping (keys normalised)."""
    out: dict[float | str, int] = {}
    for item in items:
        value, sep, category = item.rpartition("=")
        if not sep or not value:
            raise InputError(f"--map {item!r} is not VALUE=CATEGORY")
        try:
            out[_norm(value.lower() if value.lower() in ("true", "false") else value)] = int(
                category
            )
        except ValueError:
            raise InputError(f"--map {item!r}: category {category!r} is not an integer") from None
    for key in [k for k in out if k in ("true", "false")]:
        out[1.0 if key == "true" else 0.0] = out.pop(key)
    if any(c < 0 for c in out.values()):
        raise InputError("--map categories must be >= 0")
    return out


# -- lm-evaluation-harness -----------------------------------------------------------------------
def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open() as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise InputError(
                    f"line {number}: invalid JSON ({error.msg})", source=str(path)
                ) from None
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
        model = path.resolve().parent.name
        runs[(model, match["task"])].append((match["date"], path))
    scores: list[Score] = []
    for (model, task), files in sorted(runs.items()):
        for trial, (_, path) in enumerate(sorted(files)):
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
                    Score(model, f"{task}/{record['doc_id']}", trial, record[key], str(path))
                )
    return scores


# -- inspect_ai ----------------------------------------------------------------------------------
def _inspect_log(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(eval header, samples) of a ``.json`` or ``.eval`` inspect_ai log."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
                if "header.json" in names:
                    header = json.loads(archive.read("header.json"))
                elif "_journal/start.json" in names:
                    header = json.loads(archive.read("_journal/start.json"))
                else:
                    raise InputError("an .eval zip without header.json", source=str(path))
                samples = [
                    json.loads(archive.read(name))
                    for name in sorted(names)
                    if name.startswith("samples/") and name.endswith(".json")
                ]
            return header, samples
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, zipfile.BadZipFile, KeyError) as error:
        raise InputError(f"not a readable inspect_ai log ({error})", source=str(path)) from None
    if not isinstance(data, dict) or "eval" not in data:
        raise InputError("not an inspect_ai eval log (no 'eval' header)", source=str(path))
    listed = data.get("samples")
    if not listed:
        raise InputError(
            "the log holds no samples (was it written with --no-log-samples?)", source=str(path)
        )
    return data, list(listed)


def read_inspect(paths: Iterable[Path], scorer: str | None = None) -> list[Score]:
    """Scores of inspect_ai logs; epochs are trials (see the module docstring)."""
    scores: list[Score] = []
    for path in paths:
        header, samples = _inspect_log(path)
        info = header.get("eval") or {}
        model, task = info.get("model"), info.get("task")
        if not model or not task:
            raise InputError("eval header lacks model or task", source=str(path))
        for sample in samples:
            found = sample.get("scores") or {}
            name = scorer or (next(iter(found)) if len(found) == 1 else None)
            if name is None or name not in found:
                raise InputError(
                    f"sample {sample.get('id')!r} epoch {sample.get('epoch')}: choose a scorer "
                    f"with --metric (scores present: {sorted(found)})",
                    source=str(path),
                )
            epoch = int(sample.get("epoch", 1))
            scores.append(
                Score(
                    str(model),
                    f"{task}/{sample['id']}",
                    epoch - 1,
                    found[name].get("value"),
                    str(path),
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
        value = _norm(score.value)
        if value not in table:
            raise InputError(
                f"score {score.value!r} of {score.model} on {score.question} has no category; "
                f"map it with --map {score.value}=CATEGORY (mapped: {sorted(map(str, table))})",
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
        if not path.is_file():
            raise InputError("file not found", source=str(path))
    scores = (
        read_lm_eval(paths, metric, filter_name)
        if fmt == "lm-eval"
        else read_inspect(paths, metric)
    )
    return to_tensor(scores, mapping)
