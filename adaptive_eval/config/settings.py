"""A campaign's settings: its config resolved once, into frozen typed values (issue 27).

:func:`adaptive_eval.campaign.build.build_campaign` resolves the validated config (its ``settle()``,
:mod:`adaptive_eval.config.schema`) into one :class:`CampaignSettings`, held by the campaign's
run spec (``campaign.run.settings``). Every module below the builder reads these (the
controller, the run loop, the run folder, the outputs) and the backends get theirs in the
:class:`~adaptive_eval.backends.base.BackendContext`; none of them reads the
config. Paths are absolute (resolved against the config's folder); defaults are filled in. The
config schema (its field descriptions, bounds and defaults) stays the reference for what each
value means; these types only carry the values, each field under its schema field's name and type:
:func:`adaptive_eval.config.schema.settled` copies a section into its type by those names, and
``tests/test_settings.py`` checks that every schema field is carried or listed as not carried
(:data:`adaptive_eval.config.schema.NOT_SETTLED`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal


@dataclass(frozen=True)
class ExecutionSettings:
    """``execution``: where the workers run and how work is batched and pipelined. None of it
    changes which trials are drawn, except ``rounds_in_flight`` (the pipelining lag, part of the
    run identity)."""

    dispatch: str  # a registered dispatch mode: ray, inline, or a plug-in's
    ray_address: str | None  # None: a local Ray cluster
    num_cpus: int | None  # CPUs of the local Ray cluster (None: this machine's)
    workers: int  # default worker actors per backend entry
    batch_size: int  # trials per batch sent to a worker
    in_flight_per_worker: int  # batches queued at each worker
    rounds_in_flight: int  # rounds planned ahead of the posterior
    max_batch_retries: int  # re-dispatches of a failing batch
    gpu_slots: int | None  # shared worker slots of swappable backends (None: one per entry)


@dataclass(frozen=True)
class OutputSettings:
    """``output``: what the run keeps and shows."""

    keep_completions: bool  # store full completion texts (compressed)
    progress: bool  # show a progress line on a terminal
    fsync: Literal["full", "normal"]  # SQLite synchronous mode of the trial store
    live_forecast: int  # simulations of the live forecast after each round (0: off)


@dataclass(frozen=True)
class BudgetSettings:
    """``budget``: the campaign's limits (None: no limit of that kind)."""

    trials: int | None
    tokens: int | None
    wall_clock_s: float | None

    @property
    def is_set(self) -> bool:
        """Whether any limit is set (then the ``budget`` stopping rule joins the campaign's)."""
        return bool(self.trials or self.tokens or self.wall_clock_s)

    def record(self) -> dict[str, int | float | None]:
        """The budget as recorded in a run's store (the keys and values of the config's
        ``budget`` section, defaults included)."""
        return {"trials": self.trials, "tokens": self.tokens, "wall_clock_s": self.wall_clock_s}


@dataclass(frozen=True)
class PolicySettings:
    """``policy``'s values that views, decisions and the summary read (its plug-ins, the pair
    rules, stopping rules and allocator, are built by the campaign builder itself)."""

    confidence: float
    rope: float | None  # None: equivalence is never declared
    error_control: Literal["pair", "ranking"]
    futility: float
    min_trials_per_question: int
    max_trials_per_question: int
    round_trials: int
    bayes_prior: Literal["empirical", "uniform"]  # prior of the reported Bayes@N score
    prior_trials: bool  # whether ``policy.prior`` adds earlier trials as prior counts


@dataclass(frozen=True)
class RunLimits:
    """The limits a resume may change (:data:`adaptive_eval.config.schema.EXTENSIBLE_LIMITS`)."""

    budget: BudgetSettings
    max_trials_per_question: int

    def record(self) -> dict[str, Any]:
        """The store's ``limits`` metadata: compared on resume to tell an extension apart."""
        return {
            "budget": self.budget.record(),
            "max_trials_per_question": self.max_trials_per_question,
        }


@dataclass(frozen=True)
class RunRecord:
    """What a run folder records of its config beside the trials."""

    limits: RunLimits
    #: RUN/config.yaml: the config with every path absolute and every credential redacted
    #: (``adaptive-eval report DIR`` reads it back).
    config_yaml: str


@dataclass(frozen=True)
class CompareSettings:
    """``compare``: the defaults of ``adaptive-eval compare`` (its flags override them)."""

    margin: float | None  # None: settle better / worse / equivalent with the pair rules
    settle_all: bool


@dataclass(frozen=True)
class SamplingSettings:
    """``sampling``: the sampling parameters of the generating backends."""

    temperature: float
    top_p: float
    max_tokens: int
    logprobs: bool
    prompt_logprobs: bool
    ignore_eos: bool


@dataclass(frozen=True)
class DatasetSettings:
    """``dataset``: the questions of the generating backends, the file's path absolute."""

    path: Path
    id_field: str
    problem_field: str
    answer_field: str
    template: str
    instruction: str
    limit: int | None  # None: every question of the file


@dataclass(frozen=True)
class GraderSpec:
    """``grader``: a registered grader by name with its keyword parameters."""

    name: str
    params: Mapping[str, Any]  # the plug-in's own parameters, as the config gives them


@dataclass(frozen=True)
class GenerationSettings:
    """What a generating backend (vllm, openai) reads besides its own entry."""

    sampling: SamplingSettings
    grader: GraderSpec | None  # None: the generating backends' default grader
    dataset: DatasetSettings | None  # None: no questions (a generating entry refuses that)


@dataclass(frozen=True)
class CampaignSettings:
    """The whole config, resolved once: what every module below the campaign builder reads."""

    name: str
    seed: int
    #: Where the config was read from (``<memory>`` for one built in code); errors name it.
    source: str
    #: max - min of the rubric weights: the range every score and difference lies in.
    rubric_span: float
    policy: PolicySettings
    budget: BudgetSettings
    execution: ExecutionSettings
    output: OutputSettings
    generation: GenerationSettings
    compare: CompareSettings | None  # None: the config has no compare section
    #: The trial library as the config names it, absolute (a folder or a file; see
    #: :func:`adaptive_eval.store.library.library_path`), or None without one.
    library: Path | None
    #: Dotted fields that hold the redaction marker (a config copied from a run folder).
    redacted: tuple[str, ...]
    run_record: RunRecord


__all__ = [
    "BudgetSettings",
    "CampaignSettings",
    "CompareSettings",
    "DatasetSettings",
    "ExecutionSettings",
    "GenerationSettings",
    "GraderSpec",
    "OutputSettings",
    "PolicySettings",
    "RunLimits",
    "RunRecord",
    "SamplingSettings",
]
