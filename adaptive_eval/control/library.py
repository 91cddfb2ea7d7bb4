"""A trial library shared across runs: recorded trials are reusable evidence.

``library:`` in a config names an SQLite file (or a folder, which then holds ``library.sqlite``).
A campaign takes what the library already holds for its cells before sampling anything, and adds
what it samples. A trial is reused only where it is the very trial the campaign would draw; its
key is

- the cell: the model's identity (its config entry less execution settings and file locations,
  the content hash of its files: scenario, replay, every byte of a model folder, chat template;
  for vLLM the engine, its version, torch and CUDA, dtype and quantisation; for an
  OpenAI-compatible server what it reports serving, its ``/models`` card and version), the
  model's name (trial seeds derive from it), the dataset's content hash and prompt settings
  (template, instruction, limit), the sampling parameters, the grader, the number of rubric
  categories, the campaign seed, and the question id;
- the trial index, whose seed is stored and checked.

Changing any of these (another checkpoint, temperature, grader, rubric schema, dataset) gives new
cells: nothing stale is reused. The library also keeps each model name's last identity (table
``models``): a model whose identity changed since the library last saw it (its weights replaced in
place, another engine version) is named in one line (:attr:`TrialLibrary.changes`, kept in the
run's ``library_changes`` meta value, printed by ``nightly`` and in the report's provenance).
Rubric *weights* are not part of the key (a category does not depend on them). Completion
texts and signals stay in each run's store; the library keeps the graded outcome (category,
tokens, answer, reason).

:class:`LibraryDispatch` wraps a dispatcher: each batch is answered from the library where it
can be, and only the missing trials go to the backend. Reused trials are recorded in the run like
any other (worker ``library``) and counted in the run's ``library_reused`` meta value, so the report
says how many trials were reused and what fraction of the fixed-N baseline was actually sampled.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from adaptive_eval.base.types import Batch, BatchResult, Trial, WorkItem, trial_seed
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.store import TrialStore
from adaptive_eval.store.library import LibraryFile, library_path

#: Longest value shown whole in a change line (longer ones: their first characters).
SHOWN = 16


def cell_descriptions(campaign: Campaign) -> list[dict[str, Any]]:
    """Per model: what decides its trials (the question id is added per cell)."""
    config = campaign.run.identity["config"]
    files = campaign.run.identity["files"]
    shared = {
        "seed": config["seed"],
        "sampling": config.get("sampling"),
        "grader": config.get("grader"),
        "dataset": config.get("dataset"),
        "categories": campaign.num_categories,
    }
    out = []
    for model, name in enumerate(campaign.names):
        plan, _ = campaign.run.plan_of(model)
        entry = {k: v for k, v in config["models"][plan].items() if k not in ("name", "select")}
        out.append({**shared, "model": name, "entry": entry, "files": files[plan]})
    return out


def model_identity(description: dict[str, Any]) -> dict[str, Any]:
    """The part of a cell description that is the model's own: its entry and its files (less
    the dataset, which is the campaign's)."""
    files = {k: v for k, v in description["files"].items() if k != "dataset"}
    return {"entry": description["entry"], "files": files}


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text[:SHOWN] if len(text) == 64 and text.isalnum() else text


def describe_change(
    name: str, before: dict[str, Any], now: dict[str, Any], known: bool = False
) -> str:
    """One line naming what changed in a model's identity; ``known``: the library holds trials
    of the new identity (a checkpoint restored to one it saw before), which are reused."""
    parts = []
    for section in ("files", "entry"):
        old, new = before.get(section) or {}, now.get(section) or {}
        for key in sorted(set(old) | set(new)):
            if old.get(key) == new.get(key):
                continue
            a, b = old.get(key), new.get(key)
            if isinstance(a, str) and isinstance(b, str) and "; " in a + b:
                # A description (the engine): only the parts that differ.
                pa, pb = a.split("; "), b.split("; ")
                a = "; ".join(x for x in pa if x not in pb)
                b = "; ".join(x for x in pb if x not in pa)
            parts.append(f"{key} {_shown(a)} -> {_shown(b)}")
    reuse = (
        "the library holds trials of this identity from before, which are reused"
        if known
        else "its trials are sampled anew, none reused"
    )
    return f"model {name} changed since the library last saw it ({'; '.join(parts)}): {reuse}"


def _hash(description: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()


def library_trials(campaign: Campaign, most: int) -> list[tuple[int, int, int, int, int, float]]:
    """What the config's library holds for the campaign's cells, read only: per cell its first
    trials (index 0, 1, ... while the stored seed is the trial's own), at most ``most`` each, as
    ``(model, question, trial, category, tokens or -1, gpu_s or 0)``. Nothing is written (a
    forecast must not record identities: the run's change notes would then miss a change)."""
    path = campaign.run.settings.library
    if path is None or not library_path(path).exists():
        return []
    file = LibraryFile(library_path(path))
    seed = campaign.run.settings.seed
    out = []
    try:
        for model, description in enumerate(cell_descriptions(campaign)):
            name = campaign.names[model]
            for question, qid in enumerate(campaign.question_ids):
                rows = file.trials(_hash({**description, "question": qid}), 0, most - 1)
                for trial in range(most):
                    row = rows.get(trial)
                    if row is None or row.seed != trial_seed(seed, name, qid, trial):
                        break
                    tokens = -1 if row.tokens is None else row.tokens
                    out.append((model, question, trial, row.category, tokens, row.gpu_s or 0.0))
    finally:
        file.close()
    return out


class TrialLibrary:
    """The SQLite file of reusable trials for one campaign's cells."""

    def __init__(self, path: Path, campaign: Campaign, origin: str) -> None:
        self.path = library_path(path)
        self.file = LibraryFile(self.path)
        self.origin = origin
        self.seed = campaign.run.settings.seed
        self.names = campaign.names
        self.questions = campaign.question_ids
        models = cell_descriptions(campaign)
        self.changes = self._note_identities(campaign.names, models)
        self.cells = [
            [_hash({**model, "question": q}) for q in campaign.question_ids] for model in models
        ]
        self.file.add_cells(
            (self.cells[m][q], json.dumps({**model, "question": qid}, sort_keys=True))
            for m, model in enumerate(models)
            for q, qid in enumerate(campaign.question_ids)
        )

    def _note_identities(self, names: Sequence[str], models: Sequence[dict[str, Any]]) -> list[str]:
        """Record each model's identity; a line for each whose identity the library last saw
        differently."""
        identities = [model_identity(model) for model in models]
        previous = self.file.swap_identities(
            [
                (name, json.dumps(identity, sort_keys=True))
                for name, identity in zip(names, identities, strict=True)
            ]
        )
        changes = []
        for model, (name, identity, text) in enumerate(
            zip(names, identities, previous, strict=True)
        ):
            if text is None:
                continue
            try:
                before = json.loads(text)
            except ValueError:
                before = {}
            if before != identity:
                before = before if isinstance(before, dict) else {}
                # The new identity's trials may be in the library already (it was this before).
                known = any(
                    self.file.trials(_hash({**models[model], "question": q}), 0, 0)
                    for q in self.questions
                )
                changes.append(describe_change(name, before, identity, known))
        return changes

    def close(self) -> None:
        self.file.close()

    def lookup(self, batch: Batch) -> tuple[tuple[Trial, ...], tuple[WorkItem, ...]]:
        """(trials the library holds for the batch, work items still to sample)."""
        found: list[Trial] = []
        missing: list[WorkItem] = []
        name = self.names[batch.model]
        for item in batch.items:
            rows = self.file.trials(
                self.cells[batch.model][item.question], item.first_trial, item.trials[-1]
            )
            qid = self.questions[item.question]
            run_start = None
            for trial in [*item.trials, None]:
                row = rows.get(trial) if trial is not None else None
                usable = row is not None and row.seed == trial_seed(self.seed, name, qid, trial)
                if usable and row is not None and trial is not None:
                    found.append(
                        Trial(
                            batch.model,
                            item.question,
                            trial,
                            row.seed,
                            row.category,
                            tokens=row.tokens,
                            prompt_tokens=row.prompt_tokens,
                            gpu_s=row.gpu_s,
                            answer=row.answer,
                            reason=row.reason,
                        )
                    )
                if not usable and trial is not None and run_start is None:
                    run_start = trial
                elif (usable or trial is None) and run_start is not None:
                    end = trial if trial is not None else item.trials[-1] + 1
                    missing.append(WorkItem(batch.model, item.question, run_start, end - run_start))
                    run_start = None
        return tuple(found), tuple(missing)

    def add(self, trials: Sequence[Trial]) -> None:
        self.file.add_trials(((self.cells[t.model][t.question], t) for t in trials), self.origin)

    def count(self) -> int:
        return self.file.count()


class LibraryDispatch:
    """A dispatcher that answers from the library first and samples only what is missing."""

    def __init__(self, inner: Any, library: TrialLibrary, store: TrialStore) -> None:
        self.inner = inner
        self.library = library
        self.store = store
        self.ready: list[BatchResult] = []
        self.partial: dict[int, tuple[Trial, ...]] = {}
        self.reused = int(store.get_meta("library_reused") or 0)
        self.sampled_batches = 0

    def submit(self, batches: list[Batch]) -> None:
        forward = []
        for batch in batches:
            found, missing = self.library.lookup(batch)
            if not missing:
                self.ready.append(BatchResult(batch.batch_id, batch.round, "library", found, 0.0))
                continue
            if found:
                self.partial[batch.batch_id] = found
                batch = Batch(batch.batch_id, batch.round, batch.model, missing)
            forward.append(batch)
        if forward:
            self.sampled_batches += len(forward)
            self.inner.submit(forward)

    def poll(self, timeout: float) -> list[BatchResult]:
        out, self.ready = self.ready, []
        served = sum(len(r.trials) for r in out)
        for result in self.inner.poll(0.0 if out else timeout):
            if result.error is None:
                self.library.add(result.trials)
                extra = self.partial.pop(result.batch_id, ())
                if extra:
                    served += len(extra)
                    result = dataclasses.replace(
                        result, trials=result.trials + extra, worker=f"{result.worker}+library"
                    )
            out.append(result)
        if served:
            self.reused += served
            self.store.set_meta(library_reused=self.reused)
        return out

    def pending(self) -> int:
        return int(self.inner.pending()) + len(self.ready)

    def shutdown(self) -> None:
        self.library.close()
        if hasattr(self.inner, "shutdown"):
            self.inner.shutdown()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def attach(campaign: Campaign, store: TrialStore, inner: Any, origin: str) -> Any:
    """Wrap ``inner`` with the config's library; ``inner`` itself when there is none."""
    path = campaign.run.settings.library
    if path is None:
        return inner
    library = TrialLibrary(path, campaign, origin)
    if library.changes:  # a resume keeps the first leg's lines
        store.set_meta(library_changes=library.changes)
    return LibraryDispatch(inner, library, store)
