"""The campaign an Inspect eval is decided by: the project's own config, built by its own builder
(:func:`~adaptive_eval.campaign.build.build_campaign`, and
:func:`~adaptive_eval.campaign.checkpoint.compare_campaign` for a candidate), as ``run`` and
``compare`` build one, from the eval's models, samples and epochs as values (an ``external``
entry: no file read). ``adaptive-eval report`` of the logs writes it as a ``replay`` of the
recorded trials (``campaign.yaml``, ``trials.npz``) and runs it."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from adaptive_eval.base.errors import InputError
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.campaign.checkpoint import Judge, compare_campaign
from adaptive_eval.config.schema import (
    MAX_TRIALS_PER_QUESTION,
    CampaignConfig,
    parse_config,
)

GOALS = ("rank", "compare")
#: What an error of the campaign's own config names as its source (dropped from the message).
INTERNAL = "<adaptive_stopping>"
#: Allocators whose plans give a model the same trials on every sample: Inspect runs a
#: sample's epochs in order, so a plan must ask for whole epochs of a model.
EPOCH_ALLOCATORS = ("pairwise", "uniform")
#: What the bridge sets unless the policy given says otherwise: one epoch per needed model and
#: round (the finest look Inspect's epochs allow), pairs served by the pairwise allocator.
BRIDGE_POLICY: dict[str, Any] = {"allocation": "pairwise", "round_trials": 1}
REPLAY = {"backend": "replay", "path": "trials.npz", "key": "outcomes"}


@dataclass(frozen=True)
class Goal:
    """What the campaign decides: ``rank`` the models, or ``compare`` a candidate against the
    others (with ``margin``: a non-inferiority gate), as ``adaptive-eval compare`` does."""

    kind: str = "rank"
    candidate: str | None = None
    margin: float | None = None
    settle_all: bool = False

    def check(self, models: Sequence[str] | None) -> None:
        if self.kind not in GOALS:
            raise InputError(f"goal must be one of {', '.join(GOALS)}, got {self.kind!r}")
        if self.kind == "compare" and self.candidate is None:
            raise InputError("goal 'compare' needs candidate= (the model to gate)")
        if self.kind == "rank" and self.candidate is not None:
            raise InputError("candidate= applies to goal 'compare', not 'rank'")
        if self.margin is not None and (not math.isfinite(self.margin) or self.margin <= 0):
            raise InputError(f"margin must be > 0, got {self.margin}")
        if models is None:
            return
        if len(models) < 2:
            raise InputError(
                f"goal {self.kind!r} needs at least 2 models in eval(model=[...]); "
                f"got {len(models)} ({', '.join(models) or 'none'})"
            )
        if self.candidate is not None and self.candidate not in models:
            raise InputError(
                f"candidate {self.candidate!r} is not among the models ({', '.join(models)})"
            )


@dataclass(frozen=True)
class CampaignSpec:
    """Everything that fixes the campaign: its models (in index order), the samples (in the
    dataset's order), the epochs (the cap), the rubric weights, the ``policy:`` section and the
    goal."""

    name: str
    models: tuple[str, ...]
    questions: tuple[str, ...]
    epochs: int
    weights: tuple[float, ...]
    policy: Mapping[str, Any] = field(default_factory=dict)
    goal: Goal = Goal()

    def config(self, recorded: bool = False) -> dict[str, Any]:
        """The config: of ``external`` models, or (``recorded``) a replay of ``trials.npz``."""
        policy = {**BRIDGE_POLICY, **dict(self.policy)}
        if "max_trials_per_question" in policy:
            raise InputError(
                "policy.max_trials_per_question is the task's epochs under Inspect; set epochs"
            )
        allocation = policy["allocation"]
        name = allocation if isinstance(allocation, str) else dict(allocation).get("name")
        if name not in EPOCH_ALLOCATORS:
            raise InputError(
                f"policy.allocation {name!r} plans trials per sample, which Inspect's epochs "
                f"cannot follow; use one of {', '.join(EPOCH_ALLOCATORS)}"
            )
        policy["max_trials_per_question"] = self.epochs
        options: dict[str, Any] = {"models": list(self.models), "questions": list(self.questions)}
        options["trials"] = self.epochs
        return {
            "name": self.name,
            "seed": 0,
            "models": [dict(REPLAY) if recorded else {"backend": "external", "options": options}],
            "rubric": {"weights": list(self.weights)},
            "policy": policy,
            "baseline": {"fixed_n": self.epochs},  # the task's epochs, every sample
            "execution": {"dispatch": "inline", "workers": 1},
        }

    def write(self, folder: Path, outcomes: np.ndarray) -> Path:
        """Write ``campaign.yaml`` and ``trials.npz`` (``outcomes`` (L, M, epochs))."""
        folder.mkdir(parents=True, exist_ok=True)
        np.savez(
            folder / "trials.npz",
            outcomes=outcomes.astype(np.int8),
            models=np.array(self.models),
            questions=np.array(self.questions),
        )
        path = folder / "campaign.yaml"
        path.write_text(yaml.safe_dump(self.config(recorded=True), sort_keys=False))
        return path

    def build(self, folder: Path | None = None) -> tuple[Campaign, Judge | None]:
        """The campaign as ``run`` (or ``compare``) builds it from a config (``folder``: the
        config also written there as ``campaign.yaml``, for the record)."""
        values = self.config()
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "campaign.yaml").write_text(yaml.safe_dump(values, sort_keys=False))
        with named(self.name):
            built = build(parse_config(values, source=INTERNAL), self.goal)
        return built


def check_policy(name: str, policy: Mapping[str, Any]) -> None:
    """``policy=`` checked against the project's schema where the task is built, before any
    eval starts; the checks that need the eval (its samples, epochs, models) come when the
    campaign opens."""
    spec = CampaignSpec(
        name, ("model-a", "model-b"), ("sample",), MAX_TRIALS_PER_QUESTION, (0.0, 1.0), policy
    )
    with named(name):
        parse_config(spec.config(), source=INTERNAL)


@contextlib.contextmanager
def named(name: str) -> Iterator[None]:
    """An error of the campaign's config as one line naming its field as the CLI does
    (``adaptive_stopping 'x': policy.bogus: unknown key (value 1)``): Inspect shows an error's
    ``message`` only, and the bridge's own config is no source to name."""
    try:
        yield
    except InputError as error:
        source = error.source if error.source != INTERNAL else None
        parts = [part for part in (f"adaptive_stopping {name!r}", source, error.field) if part]
        raise InputError(": ".join([*parts, error.message])) from None


def build(config: CampaignConfig, goal: Goal) -> tuple[Campaign, Judge | None]:
    """``build_campaign`` (and ``compare_campaign``) on the config. A replay's scores are not
    known to the campaign (Inspect's are not before it runs: ``compare``'s check of a vacuous
    margin against known scores has nothing to read, in the report as in the live bridge)."""
    campaign = build_campaign(config)
    unknown = tuple(dataclasses.replace(plan, known_scores=None) for plan in campaign.run.plans)
    campaign = campaign.with_plans(unknown)
    if goal.kind == "rank":
        return campaign, None
    assert goal.candidate is not None  # Goal.check
    return compare_campaign(campaign, goal.candidate, goal.margin, goal.settle_all)
