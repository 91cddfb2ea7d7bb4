"""``adaptive-eval completions DIR``: a run's recorded trials with their completions, as text
(control characters escaped: a completion never drives the terminal) or JSON lines."""

from __future__ import annotations

import json
from pathlib import Path

from adaptive_eval.base.errors import InputError, printable, printable_lines
from adaptive_eval.store import TrialStore


def show_completions(
    run_dir: Path,
    model_name: str | None,
    question: str | None,
    trial_index: int | None,
    limit: int | None,
    as_json: bool,
) -> int:
    """Print the trials of ``run_dir`` that match (a model, a question, a trial index), at
    most ``limit``; an unknown model or question, or no match for a trial, is bad input."""
    if not (run_dir / TrialStore.FILENAME).exists():
        raise InputError("no trials.sqlite: not a run directory", source=str(run_dir))
    store = TrialStore(run_dir, readonly=True)
    try:
        models = list(store.get_meta("models") or [])
        questions = list(store.get_meta("questions") or [])
        model = None
        if model_name is not None:
            if model_name not in models:
                raise InputError(
                    f"--model {model_name!r} is not in this run (models: {', '.join(models)})",
                    source=str(run_dir),
                )
            model = models.index(model_name)
        shown = 0
        for trial in store.trials(model):
            if question is not None and questions[trial.question] != question:
                continue
            if trial_index is not None and trial.trial != trial_index:
                continue
            record = {
                "model": models[trial.model],
                "question": questions[trial.question],
                "trial": trial.trial,
                "seed": trial.seed,
                "category": trial.category,
                "answer": trial.answer,
                "reason": trial.reason,
                "tokens": trial.tokens,
                "signals": trial.signals,
                "text": trial.text,
            }
            if as_json:
                print(json.dumps(record))
            else:
                # A model's (and a server's) text: control characters escaped, never sent raw.
                print(
                    printable(
                        f"--- {record['model']} / {record['question']} / trial {trial.trial} "
                        f"(seed {trial.seed}): category {trial.category}, answer "
                        f"{trial.answer!r}{' - ' + trial.reason if trial.reason else ''}"
                    )
                )
                print(printable_lines(trial.text) if trial.text is not None else "(no text stored)")
            shown += 1
            if limit and shown >= limit:
                break
        if question is not None and question not in questions:
            raise InputError(
                f"--question {question!r} is not in this run ({len(questions)} questions, "
                f"e.g. {', '.join(questions[:3])})",
                source=str(run_dir),
            )
        if shown == 0 and trial_index is not None:
            raise InputError(f"no recorded trial {trial_index} matches", source=str(run_dir))
    finally:
        store.close()
    return 0
