"""``adaptive-eval export DIR --format eee --out FOLDER``: a run in the Every Eval Ever schema.

Every Eval Ever (``every-eval-ever`` on PyPI, schema version 0.3.0; its converters turn
lm-eval, inspect and HELM logs into the same records) keeps one aggregate record per model and
evaluation (``eval.schema.json``) and one instance record per sample (``instance_level_eval``,
JSON lines). Both land in its datastore layout::

    FOLDER/data/<benchmark>/<developer>/<model>/<uuid>.json           aggregate record
    FOLDER/data/<benchmark>/<developer>/<model>/<uuid>_samples.jsonl  one line per trial

``benchmark`` is the campaign's name, ``developer`` the part of a model name before its ``/``
(``unknown`` without one); the uuid (version 4, as the schema's path pattern wants) is derived
from the campaign id and the model, so exporting again rewrites the same files.

What is written follows every other output: the aggregate score is the run's unbiased score
(``summary.json``'s ``score``, over every recorded trial), with its standard error and the
interval that holds however the campaign stopped (its kind named in ``method``); Bayes@N is in
``details`` only, beside how the trials were sampled (``sampling``: ``adaptive``, what that
means, and the interval's kind), so that no reader takes them for a fixed-N sample. Every
recorded trial is an instance record (``metadata``: trial index, seed, category), as the
inspect converter writes one record per epoch. The question's text and gold answer are filled
in where the run's dataset can still be read, else left empty.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from adaptive_eval.base import summary_schema
from adaptive_eval.base.errors import InputError
from adaptive_eval.base.files import atomic_output, atomic_write
from adaptive_eval.config.registry import BackendTraits, backends
from adaptive_eval.inputs.datasets import Question, load_dataset
from adaptive_eval.store import TrialStore

EEE_SCHEMA_VERSION = "0.3.0"


def _segment(name: str) -> str:
    """A path segment of the datastore layout from a free-form name."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "unnamed"
    return cleaned[:100]


def _uuid4(*parts: str) -> str:
    digest = hashlib.sha256("\0".join(parts).encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def _strings(values: dict[str, Any]) -> dict[str, str]:
    """``additional_details`` and ``details`` hold strings only."""
    return {
        k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items() if v is not None
    }


def _questions(config: dict[str, Any]) -> dict[str, Question]:
    dataset = config.get("dataset")
    if not isinstance(dataset, dict) or not dataset.get("path"):
        return {}
    try:
        found = load_dataset(
            dataset["path"],
            dataset.get("id_field", "id"),
            dataset.get("problem_field", "problem"),
            dataset.get("answer_field", "answer"),
        )
    except InputError:
        return {}  # moved or changed since the run: instance inputs stay empty
    return {q.id: q for q in found.questions}


def export_eee(run_dir: Path, out: Path) -> list[Path]:
    """Write the run's aggregate and instance records under ``out``; the aggregate files."""
    summary_path = run_dir / "summary.json"
    if not (run_dir / TrialStore.FILENAME).exists():
        raise InputError("no trials.sqlite: not a run directory", source=str(run_dir))
    if not summary_path.exists():
        raise InputError(
            "has no summary.json; run `adaptive-eval report DIR` first", source=str(run_dir)
        )
    try:
        summary = summary_schema.upgrade(json.loads(summary_path.read_text()))
        scores = {str(m["name"]): m for m in summary["models"]}
        info = summary.get("score") or {}
        if not all(isinstance(m["score"], int | float) for m in scores.values()):
            raise ValueError("a model's score is not a number")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(
            f"summary.json is not one this version reads ({error!r}); rebuild it with "
            "`adaptive-eval report DIR`",
            source=str(summary_path),
        ) from None
    config: dict[str, Any] = {}
    if (run_dir / "config.yaml").exists():
        loaded = yaml.safe_load((run_dir / "config.yaml").read_text())
        config = loaded if isinstance(loaded, dict) else {}
    store = TrialStore(run_dir, readonly=True)
    try:
        return _write(store, summary, scores, info, config, out)
    finally:
        store.close()


def _write(
    store: TrialStore,
    summary: dict[str, Any],
    scores: dict[str, dict[str, Any]],
    info: dict[str, Any],
    config: dict[str, Any],
    out: Path,
) -> list[Path]:
    identity = store.get_meta("identity") or {}
    weights = list(((identity.get("config") or {}).get("rubric") or {}).get("weights") or [0, 1])
    best = max(weights)
    names = [str(m) for m in store.get_meta("models") or []]
    questions = [str(q) for q in store.get_meta("questions") or []]
    campaign_id = str(summary.get("campaign_id") or store.get_meta("campaign_id"))
    benchmark = str(summary.get("name") or "campaign")
    texts = _questions(config)
    files = list(identity.get("files") or [])
    packages = store.get_meta("packages") or {}
    now = f"{time.time():.0f}"
    found = config.get("sampling")
    sampling: dict[str, Any] = found if isinstance(found, dict) else {}
    entries = [e for e in config.get("models") or [] if isinstance(e, dict)]
    written = []
    for model, name in enumerate(names):
        row = scores.get(name)
        if row is None:
            raise InputError(f"summary.json has no model {name!r}; rebuild it with report")
        developer, _, short = name.rpartition("/")
        folder = out / "data" / _segment(benchmark) / _segment(developer or "unknown")
        folder = folder / _segment(short)
        folder.mkdir(parents=True, exist_ok=True)
        file_id = _uuid4(campaign_id, name)
        evaluation_id = f"{benchmark}/{name}/{now}"
        samples_rel = (folder / f"{file_id}_samples.jsonl").relative_to(out).as_posix()
        backend = _backend_of(model, entries, files, names)
        rows = _write_samples(
            store,
            model,
            name,
            evaluation_id,
            benchmark,
            questions,
            texts,
            weights,
            best,
            out / samples_rel,
        )
        record = _aggregate(
            summary,
            row,
            info,
            name,
            evaluation_id,
            benchmark,
            now,
            packages,
            backend,
            sampling,
            weights,
            samples_rel,
            rows,
        )
        path = folder / f"{file_id}.json"
        atomic_write(path, json.dumps(record, indent=2) + "\n")
        written.append(path)
    return written


def _backend_of(
    model: int, entries: list[dict[str, Any]], files: list[Any], names: list[str]
) -> dict[str, Any]:
    """The config entry serving model ``model`` (by name; one entry per model otherwise)."""
    name = names[model]
    for index, entry in enumerate(entries):
        if entry.get("name") == name or (len(entries) == len(names) and index == model):
            found = files[index] if index < len(files) and isinstance(files[index], dict) else {}
            return {"backend": entry.get("backend"), "files": found}
    backend = entries[0].get("backend") if len(entries) == 1 else None
    return {"backend": backend, "files": {}}


def _aggregate(
    summary: dict[str, Any],
    row: dict[str, Any],
    info: dict[str, Any],
    name: str,
    evaluation_id: str,
    benchmark: str,
    now: str,
    packages: dict[str, Any],
    backend: dict[str, Any],
    sampling: dict[str, Any],
    weights: list[float],
    samples_rel: str,
    rows: int,
) -> dict[str, Any]:
    kind = backend.get("backend")
    traits: BackendTraits = backends.traits(kind)  # what the backend's registration declares
    model_info: dict[str, Any] = {
        "name": name,
        "id": name,
        "additional_details": {
            "deployment_type": traits.deployment,
            "model_availability": "unknown",
            **_strings({"adaptive_eval_backend": kind, **backend["files"]}),
        },
    }
    engine = str(backend["files"].get("engine") or "")
    if traits.engine and engine:
        first = engine.split(";")[0].split(",")[0].split()
        model_info["inference_engine"] = {
            "name": traits.engine,
            **({"version": first[-1]} if len(first) >= 2 else {}),
        }
    uncertainty: dict[str, Any] = {
        "standard_error": {"value": float(row["score_se"]), "method": "analytic"},
        "num_samples": int(row["trials"]),
    }
    if "score_low" in row and info.get("confidence") is not None:
        uncertainty["confidence_interval"] = {
            "lower": float(row["score_low"]),
            "upper": float(row["score_high"]),
            "confidence_level": float(info["confidence"]),
            "method": f"{info.get('interval')} interval, valid however the campaign stopped"
            + (" (simultaneous over models)" if info.get("simultaneous") else ""),
        }
    generation: dict[str, Any] = {}
    if sampling:
        args: dict[str, Any] = {
            k: sampling[k] for k in ("temperature", "top_p", "top_k") if k in sampling
        }
        if isinstance(sampling.get("max_tokens"), int) and sampling["max_tokens"] >= 1:
            args["max_tokens"] = sampling["max_tokens"]
        generation = {"generation_config": {"generation_args": args}}
    return {
        "schema_version": EEE_SCHEMA_VERSION,
        "evaluation_id": evaluation_id,
        "retrieved_timestamp": now,
        "source_metadata": {
            "source_name": "adaptive-eval",
            "source_type": "evaluation_run",
            "source_organization_name": "unknown",
            "evaluator_relationship": "other",
            "additional_details": _strings({"campaign_id": summary.get("campaign_id")}),
        },
        "eval_library": {
            "name": "adaptive-eval",
            "version": str(packages.get("adaptive-eval", "unknown")),
            "additional_details": _strings(
                {"summary_schema_version": summary.get("schema_version", 1)}
            ),
        },
        "model_info": model_info,
        "evaluation_results": [
            {
                "evaluation_result_id": "score",
                "evaluation_name": benchmark,
                "source_data": {"dataset_name": benchmark, "source_type": "other"},
                "metric_config": {
                    "evaluation_description": str(info.get("statistic") or "unbiased score"),
                    "metric_id": "adaptive_eval.score",
                    "metric_name": "score (mean of per-question means)",
                    "metric_kind": "accuracy" if weights in ([0, 1], [0.0, 1.0]) else "score",
                    "metric_unit": "proportion" if weights in ([0, 1], [0.0, 1.0]) else "points",
                    "lower_is_better": False,
                    "score_type": "continuous",
                    "min_score": float(min(weights)),
                    "max_score": float(max(weights)),
                },
                "score_details": {
                    "score": float(row["score"]),
                    "details": _strings(
                        {
                            "rank": row.get("rank"),
                            "trials": row.get("trials"),
                            "trials_per_question_min": row.get("trials_per_question_min"),
                            "trials_per_question_max": row.get("trials_per_question_max"),
                            "bayes_at_n_mean": row.get("bayes_mu"),
                            "stop_reason": summary.get("stop_reason"),
                            **sampled(summary, info),
                        }
                    ),
                    "uncertainty": uncertainty,
                },
                **generation,
            }
        ],
        "detailed_evaluation_results": {
            "format": "jsonl",
            "file_path": samples_rel,
            "total_rows": rows,
        },
    }


#: How an adaptive-eval run samples its trials (``details.sampling`` of an aggregate record).
ADAPTIVE = "adaptive"


def sampled(summary: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """How the record's trials were sampled, for a reader that would put a fixed-sample
    interval on them (``score`` did, 1.8x narrower than the run's own): ``sampling``
    (``adaptive``), what that means, and the kind of the interval under
    ``uncertainty.confidence_interval``, the one that holds however the campaign stopped."""
    return {
        "sampling": ADAPTIVE,
        "sampling_description": "a sequential campaign chose each question's trials as their "
        "results came in, and stopped on "
        + str(summary.get("stop_reason") or "no stop yet")
        + "; a fixed-sample interval on these trials covers the truth less often than it says: "
        "uncertainty.confidence_interval holds however the campaign stopped",
        "interval": info.get("interval"),
        "interval_confidence": info.get("confidence"),
    }


def _write_samples(
    store: TrialStore,
    model: int,
    name: str,
    evaluation_id: str,
    benchmark: str,
    questions: list[str],
    texts: dict[str, Question],
    weights: list[float],
    best: float,
    path: Path,
) -> int:
    rows = 0
    with atomic_output(path, "w") as handle:
        for trial in store.trials(model):
            qid = questions[trial.question]
            question = texts.get(qid)
            raw = question.problem if question is not None else ""
            reference = [question.answer] if question is not None else []
            score = float(weights[trial.category]) if trial.category < len(weights) else 0.0
            usage = None
            if trial.tokens is not None and trial.prompt_tokens is not None:
                usage = {
                    "input_tokens": int(trial.prompt_tokens),
                    "output_tokens": int(trial.tokens),
                    "total_tokens": int(trial.prompt_tokens + trial.tokens),
                }
            record = {
                "schema_version": EEE_SCHEMA_VERSION,
                "evaluation_id": evaluation_id,
                "model_id": name,
                "evaluation_name": benchmark,
                "evaluation_result_id": "score",
                "sample_id": qid,
                "sample_hash": hashlib.sha256((raw + "".join(reference)).encode()).hexdigest(),
                "interaction_type": "single_turn",
                "input": {"raw": raw, "reference": reference},
                "output": {"raw": [trial.text or ""]},
                "answer_attribution": [
                    {
                        "turn_idx": 0,
                        "source": "output.raw",
                        "extracted_value": trial.answer
                        if trial.answer is not None
                        else str(trial.category),
                        "extraction_method": "adaptive-eval grader",
                        "is_terminal": True,
                    }
                ],
                "evaluation": {"score": score, "is_correct": score == best},
                "token_usage": usage,
                "performance": None
                if trial.latency_s is None
                else {"latency_ms": max(0.0, float(trial.latency_s) * 1000)},
                "metadata": {
                    "trial": str(trial.trial),
                    "seed": str(trial.seed),
                    "category": str(trial.category),
                },
            }
            handle.write(json.dumps(record) + "\n")
            rows += 1
    return rows


__all__ = ["ADAPTIVE", "EEE_SCHEMA_VERSION", "export_eee", "sampled"]
