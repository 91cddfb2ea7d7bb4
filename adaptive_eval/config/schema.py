"""Campaign configuration: the schema, overrides and error reporting (the YAML itself is read
by :mod:`adaptive_eval.config.reader`).

One concept, kept whole: the schema is one tree of pydantic models whose field
descriptions are the config's documentation; splitting it would scatter that reference.

Every model rejects unknown keys (``extra="forbid"``). A validation error becomes an
:class:`~adaptive_eval.base.errors.InputError` naming the file, the dotted field path and the value.
Paths in a config are resolved relative to the config file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.redact import (
    is_secret_key,
    redact,
    redacted_fields,
    remember,
    without_secrets,
)
from adaptive_eval.config.reader import MAX_YAML_DEPTH, load_yaml, read_yaml
from adaptive_eval.config.settings import (
    BudgetSettings,
    CampaignSettings,
    CompareSettings,
    DatasetSettings,
    ExecutionSettings,
    GenerationSettings,
    GraderSpec,
    OutputSettings,
    PolicySettings,
    RunLimits,
    RunRecord,
    SamplingSettings,
)
from adaptive_eval.inputs.bounded import MAX_INT_DIGITS, check, not_a_device

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

#: Config fields a resume may change freely: they bound the campaign (when it stops, how many
#: trials a cell may get) without changing any recorded trial. Rounds are planned from the
#: recorded posterior, so a run resumed with larger limits continues exactly where it stopped.
EXTENSIBLE_LIMITS = (
    "budget.trials",
    "budget.tokens",
    "budget.wall_clock_s",
    "policy.max_trials_per_question",
)


#: Bounds that keep a config inside what the run can do. Each is far above any real use: a value
#: past it is a typo (``workers: 1e9``), or would overflow later, after sampling has started
#: (``latency.per_batch_s: 1e308``, rubric weights whose squares overflow).
MAX_WORKERS = 1024
MAX_EMULATED_S = 86_400.0
MAX_TRIALS_PER_QUESTION = 1_000_000
MAX_ABS_WEIGHT = 1e6
MAX_NAME = 200


class _Strict(BaseModel):
    # strict: ``seed: true`` is not the integer 1, ``workers: 2.5`` not 2; allow_inf_nan: no
    # number may be .nan or .inf. (The YAML loader reads 1e-3 as a number, see load_yaml.)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def _plain_name(what: str, value: str) -> str:
    """A name shown in tables and on terminals: not blank, no control characters."""
    if not value.strip():
        raise ValueError(f"{what} must not be empty")
    if not value.isprintable():
        raise ValueError(f"{what} holds control characters: {value!r}")
    if len(value) > MAX_NAME:
        raise ValueError(f"{what} is {len(value)} characters long; at most {MAX_NAME}")
    return value


class LatencyModel(_Strict):
    """Emulated generation time of a simulated worker (to emulate GPU time without a GPU).

    Without ``engine_seqs`` a batch takes ``per_batch_s + per_trial_s * trials + per_token_s *
    tokens`` seconds, one batch at a time. With ``engine_seqs`` the worker emulates a
    continuously batched engine: ``engine_seqs`` sequences decode at once and a trial holds one
    of them for ``per_trial_s + per_token_s * length`` seconds, where ``length`` is its
    completion length (heavy-tailed with ``tokens_median``); with ``feed`` every batch queued at
    the worker shares the engine, first come first served. Only time is emulated: outcomes and
    recorded token counts do not depend on these settings (so they stay out of the run
    identity).
    """

    per_batch_s: float = Field(0.0, ge=0, le=MAX_EMULATED_S, description="Fixed s per batch.")
    per_trial_s: float = Field(0.0, ge=0, le=MAX_EMULATED_S, description="Seconds per trial.")
    per_token_s: float = Field(0.0, ge=0, le=60.0, description="Seconds per completion token.")
    tokens_median: float | None = Field(
        None,
        gt=0,
        le=1e7,
        description="Heavy-tailed lengths: each trial's length (for its time only) is drawn "
        "from a lognormal with this median, seeded by the trial.",
    )
    tokens_p99_ratio: float = Field(
        20.0,
        gt=1,
        le=1e6,
        description="p99 / median of the lognormal lengths (20: reasoning models).",
    )
    max_tokens: int | None = Field(None, ge=1, le=10**8, description="Cap on the drawn lengths.")
    engine_seqs: int | None = Field(
        None,
        ge=1,
        le=10**6,
        description="Sequences the emulated engine decodes at once (max_num_seqs).",
    )
    feed: bool = Field(
        True,
        description="With engine_seqs: batches queued at a worker share its engine (continuous "
        "feed); false: one batch at a time, the engine draining at every batch boundary.",
    )


class ModelEntry(_Strict):
    """One entry of ``models:``: a backend by name plus its parameters.

    ``simulated`` and ``replay`` entries expand to every model in their file (or ``select``).
    """

    backend: str = Field(
        description="Registered backend name: simulated, replay, vllm, openai, external."
    )
    path: str | None = Field(None, description="Scenario/replay npz file or model directory.")
    key: str | None = Field(None, description="Array name in a replay npz (default 'outcomes').")
    name: str | None = Field(None, description="Display name (single-model backends).")
    select: list[str] | None = Field(
        None, min_length=1, description="Subset of the file's models, by name."
    )
    workers: int | None = Field(
        None, ge=1, le=MAX_WORKERS, description="Ray actors for this entry."
    )
    latency: LatencyModel | None = Field(None, description="Simulated per-batch latency.")
    options: dict[str, Any] = Field(
        default_factory=dict, description="Backend-specific options (engine args, ...)."
    )

    @field_validator("name")
    @classmethod
    def _shown_name(cls, name: str | None) -> str | None:
        return None if name is None else _plain_name("name", name)

    @field_validator("select")
    @classmethod
    def _distinct(cls, select: list[str] | None) -> list[str] | None:
        if select is not None:
            for name in select:
                _plain_name("a selected name", name)
            twice = sorted({name for name in select if select.count(name) > 1})
            if twice:
                raise ValueError(f"selects {twice[0]!r} twice")
        return select


class RubricConfig(_Strict):
    weights: list[float] = Field(description="Weight w_k of each category k = 0..C.")

    @field_validator("weights")
    @classmethod
    def _at_least_two(cls, weights: list[float]) -> list[float]:
        if len(weights) < 2:
            raise ValueError(f"needs at least 2 categories, got {weights}")
        bad = [i for i, w in enumerate(weights) if not math.isfinite(w)]
        if bad:
            raise ValueError(f"weight {bad[0]} is {weights[bad[0]]}; weights must be finite")
        big = [i for i, w in enumerate(weights) if abs(w) > MAX_ABS_WEIGHT]
        if big:
            raise ValueError(
                f"weight {big[0]} is {weights[big[0]]:g}; weights are scores, keep them within "
                f"+-{MAX_ABS_WEIGHT:g} (their squares are summed over every trial; the ranking "
                "does not depend on their scale)"
            )
        if max(weights) == min(weights):
            raise ValueError(
                f"every weight is {weights[0]:g}: every model would score the same; give the "
                "categories different weights"
            )
        return weights

    @property
    def span(self) -> float:
        """max - min of the weights: the range every score and difference lies in."""
        return max(self.weights) - min(self.weights)


class PluginSpec(_Strict):
    """A registered plug-in by name with keyword parameters: ``{name: ci_width, width: 0.05}``."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True, allow_inf_nan=False)
    name: str

    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


PluginRef = Annotated[str | PluginSpec, Field(union_mode="left_to_right")]


def plugin_spec(ref: str | PluginSpec) -> tuple[str, dict[str, Any]]:
    """A plug-in reference's name and keyword parameters (a bare name has none)."""
    return (ref, {}) if isinstance(ref, str) else (ref.name, ref.params())


class PriorConfig(_Strict):
    """Prior evidence R0 (earlier outcomes) used as Dirichlet prior counts, capped in weight."""

    path: str = Field(description="npz with an (L, M, D) or (M, D) integer array of categories.")
    key: str = Field("outcomes", description="Array name in the npz.")
    max_trials: int = Field(
        4, ge=0, le=MAX_TRIALS_PER_QUESTION, description="Cap on D: prior trials kept per question."
    )


class PolicyConfig(_Strict):
    confidence: float = Field(
        0.95,
        gt=0.5,
        lt=1,
        description="Probability that the decisions are right (per pair or for the whole "
        "ranking, see error_control), however many rounds are looked at.",
    )
    rope: float | None = Field(
        0.02,
        ge=0,
        description="Pairs whose difference is surely within +-rope are "
        "equivalent; null disables equivalence.",
    )
    error_control: Literal["pair", "ranking"] = Field(
        "ranking",
        description="What `confidence` guarantees: `ranking` = the whole final ranking (every "
        "decided adjacent pair at once) is right with probability >= confidence; `pair` = "
        "each decided pair is.",
    )
    futility: float = Field(
        0.2,
        ge=0,
        lt=0.5,
        description="Futility threshold: an undecided pair whose predictive probability of "
        "being settled by max_trials_per_question is below it stops drawing trials and is "
        "reported undecided with the trials per question it would need (0: never). "
        "Non-binding: it cannot add an error.",
    )
    min_trials_per_question: int = Field(2, ge=1)
    max_trials_per_question: int = Field(400, ge=1, le=MAX_TRIALS_PER_QUESTION)
    allocation: PluginRef = Field(
        "track_and_stop",
        description="Allocation policy name or spec: track_and_stop (default; lower-bound "
        "proportions across models, Neyman across questions), pairwise, uniform.",
    )
    pair_rules: list[PluginRef] | None = Field(
        None,
        description="Pair rules tried in order; default: group_sequential (alpha spending, "
        "resolves and declares equivalence within rope from one boundary).",
    )
    stopping: list[PluginRef] | None = Field(
        None,
        description="Campaign stopping rules (any fires -> stop); default: pairs_settled. "
        "`{name: ci_width, half_width: 0.01}` is the width goal (every model's score to "
        "+-0.01 at policy.confidence; `simultaneous: true` for all models at once); "
        "`{name: all_of, rules: [pairs_settled, {name: ci_width, ...}]}` asks for both.",
    )
    round_trials: int = Field(
        256, ge=1, le=10**9, description="Minimum trials planned per round (amortises dispatch)."
    )
    prior: PriorConfig | None = None
    bayes_prior: Literal["empirical", "uniform"] = Field(
        "empirical",
        description="Prior of the reported Bayes@N score: `empirical` (a Dirichlet per model "
        "centred on its pooled category frequencies, strength fitted by marginal likelihood "
        "over its questions: stays right when questions and models get different numbers of "
        "trials) or `uniform` (the paper's; exactly its Bayes@N with equal trial counts). "
        "Never enters the decisions.",
    )

    @model_validator(mode="after")
    def _min_le_max(self) -> PolicyConfig:
        if self.min_trials_per_question > self.max_trials_per_question:
            raise ValueError(
                f"min_trials_per_question={self.min_trials_per_question} exceeds "
                f"max_trials_per_question={self.max_trials_per_question}"
            )
        _check_widths(self.stopping or [], "stopping")
        return self


#: The narrowest interval a width goal may ask for: 1e-300 or a subnormal (5e-324) overflowed
#: the trials it needs (OverflowError, rc 1); 1e-6 needs ~1e12 trials per question already.
MIN_HALF_WIDTH = 1e-6


def _check_widths(refs: Sequence[Any], where: str) -> None:
    """Width goals (``ci_width``'s ``half_width`` or ``width``, inside ``all_of`` and
    ``any_of`` too) no narrower than :data:`MIN_HALF_WIDTH`."""
    for index, ref in enumerate(refs):
        if not isinstance(ref, PluginSpec):
            continue
        params = ref.params()
        for key in ("half_width", "width"):
            value = params.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                half = value if key == "half_width" else value / 2
                if half < MIN_HALF_WIDTH:
                    raise ValueError(
                        f"{where}[{index}].{key} = {value!r} is narrower than any campaign "
                        f"can reach (a half-width of at least {MIN_HALF_WIDTH:g})"
                    )
        nested = params.get("rules")
        if isinstance(nested, list):
            _check_widths(
                [PluginSpec.model_validate(r) if isinstance(r, dict) else r for r in nested],
                f"{where}[{index}].rules",
            )


class BudgetConfig(_Strict):
    trials: int | None = Field(None, ge=1, description="Total trials for the campaign.")
    tokens: int | None = Field(None, ge=1, description="Total completion tokens.")
    wall_clock_s: float | None = Field(None, gt=0, description="Wall-clock seconds of sampling.")


class BaselineConfig(_Strict):
    fixed_n: int | None = Field(
        None,
        ge=1,
        le=MAX_TRIALS_PER_QUESTION,
        description="Trials per question of the fixed-N run compared "
        "against (default 80; a replay's N if smaller).",
    )


class ExecutionConfig(_Strict):
    dispatch: str = Field(
        "ray",
        min_length=1,
        description="Where workers run, a registered dispatch mode: 'ray' (actors on a Ray "
        "cluster, the default) or 'inline' (in this process, one batch at a time, no Ray: small "
        "campaigns, CI jobs and benchmarks; the same loop, decisions and summary.json); a "
        "plug-in may register others (adaptive_eval.dispatch.dispatch_modes).",
    )
    ray_address: str | None = Field(
        None, description="Ray cluster address; null starts a local one."
    )
    num_cpus: int | None = Field(
        None, ge=1, le=65_536, description="CPUs of the local Ray cluster."
    )
    workers: int = Field(2, ge=1, le=MAX_WORKERS, description="Default actors per backend entry.")
    batch_size: int = Field(64, ge=1, le=10**6, description="Trials per batch sent to a worker.")
    in_flight_per_worker: int = Field(
        2, ge=1, le=1024, description="Batches queued at each worker."
    )
    rounds_in_flight: int = Field(
        2,
        ge=1,
        le=64,
        description="Planned rounds ahead of the posterior (the fixed "
        "pipelining lag that keeps decisions deterministic).",
    )
    max_batch_retries: int = Field(
        3, ge=0, le=1000, description="Re-dispatches of a failing batch."
    )
    prefetch_trials: int = Field(
        0,
        ge=0,
        le=10**8,
        description="Removed in issue 26 (speculative trials ahead of the plans: 6.2% of "
        "them unused and no wall time saved, docs/continuous-feed.md); only 0 is accepted.",
    )
    gpu_slots: int | None = Field(
        None,
        ge=1,
        le=MAX_WORKERS,
        description="Worker slots shared by all models of swappable "
        "backends (vllm): more models than GPUs are "
        "time-shared, loading one model per slot at a time.",
    )

    @model_validator(mode="after")
    def _prefetch_removed(self) -> ExecutionConfig:
        if self.prefetch_trials:
            raise ValueError(
                f"prefetch_trials={self.prefetch_trials}: speculative prefetch was removed "
                "(it left 6.2% of its trials unused and saved no wall time; "
                "docs/continuous-feed.md); leave execution.prefetch_trials out"
            )
        return self


class DatasetConfig(_Strict):
    """Questions for generating backends: a JSONL file, one question per line."""

    path: str = Field(description="JSONL file with an id, the problem text and the gold answer.")
    id_field: str = "id"
    problem_field: str = "problem"
    answer_field: str = "answer"
    template: str = Field(
        "{problem}\n\n{instruction}",
        description="Prompt template; fields: problem, instruction, id, and metadata keys.",
    )
    instruction: str = Field(
        "Please reason step by step, and put your final answer within \\boxed{}.",
        description="The instruction placed in the template (the paper's default).",
    )
    limit: int | None = Field(None, ge=1, description="Use only the first N questions.")


class SamplingConfig(_Strict):
    """Sampling parameters shared by generating backends (the paper's defaults)."""

    temperature: float = Field(0.6, ge=0, le=100)
    top_p: float = Field(0.95, gt=0, le=1)
    max_tokens: int = Field(32768, ge=1, le=10**8)
    logprobs: bool = Field(True, description="Ask for completion token log-probabilities.")
    prompt_logprobs: bool = Field(True, description="Ask for prompt token log-probabilities.")
    ignore_eos: bool = Field(False, description="Generate max_tokens always (benchmarks).")


class OutputConfig(_Strict):
    keep_completions: bool = Field(True, description="Store full completion texts (compressed).")
    progress: bool = Field(True, description="Show a progress bar on a terminal.")
    fsync: Literal["full", "normal"] = Field(
        "full", description="SQLite synchronous mode: full survives power loss, normal a crash."
    )
    live_forecast: int = Field(
        20,
        ge=0,
        le=200,
        description="Simulated continuations of the live forecast of the rest of the run, made "
        "after each round in one background process (0: none). Shown in the progress line, "
        "events.jsonl and summary.json's live_forecast; never delays or changes the run.",
    )


class CompareConfig(_Strict):
    """Settings of ``adaptive-eval compare`` (a candidate against incumbents, a CI gate)."""

    margin: float | None = Field(
        None,
        gt=0,
        description="Non-inferiority margin: the gate passes a candidate shown not worse than "
        "each incumbent by more than this (on the rubric score), fails one shown worse by more; "
        "null: settle better / worse / equivalent with the pair rules. --margin overrides it.",
    )
    settle_all: bool = Field(
        False,
        description="Keep sampling until every comparison is settled (or the cap), even once "
        "the exit code cannot change; default: stop at the first regression (exit 3 whatever "
        "the other comparisons give). --settle-all sets it.",
    )


class CampaignConfig(_Strict):
    name: str
    seed: int = Field(0, ge=0, le=2**63 - 1)
    models: list[ModelEntry] = Field(min_length=1)
    rubric: RubricConfig
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    baseline: BaselineConfig = Field(default_factory=BaselineConfig)
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    dataset: DatasetConfig | None = Field(None, description="Questions for generating backends.")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    grader: PluginRef | None = Field(
        None, description="Grader for generating backends (default math)."
    )
    library: str | None = Field(
        None,
        description="Trial library (SQLite file or folder) shared across runs: cells it holds "
        "are reused before sampling, new trials are added. Default off.",
    )
    compare: CompareConfig | None = Field(
        None, description="Settings of `adaptive-eval compare` (ignored by the other commands)."
    )

    #: Where the config was read from; paths resolve against its folder.
    source: str = Field("<memory>", exclude=True)

    @field_validator("name")
    @classmethod
    def _shown_name(cls, name: str) -> str:
        return _plain_name("the campaign name", name)

    @field_validator("library")
    @classmethod
    def _library_named(cls, library: str | None) -> str | None:
        if library is not None and not library.strip():
            raise ValueError(
                "is empty; give a library file or a folder to hold one, or leave library out"
            )
        return library

    def resolve_path(self, path: str) -> Path:
        """``path`` (``~`` expanded) as absolute, relative to the config's folder; a path that
        cannot be one (``~nosuchuser``, a NUL, a symlink loop) is an :class:`InputError`."""
        try:
            candidate = Path(path).expanduser()
            if candidate.is_absolute():
                return candidate
            base = Path(self.source).parent if self.source != "<memory>" else Path.cwd()
            return (base / candidate).resolve()
        except (RuntimeError, ValueError, OSError) as error:
            reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
            raise InputError(f"path {path!r}: {reason}", source=self.source) from None

    def identity(self, execution_options: Sequence[Collection[str]] = ()) -> dict[str, Any]:
        """The parts that decide which trials are drawn and how they are judged.

        Execution and output settings are left out (changing workers or batch size does not
        change results, so a resume may change them), except the pipelining lag; so are the
        entry options each backend names in ``execution_options`` (one set per entry). So are
        the limits (``budget.*`` and ``policy.max_trials_per_question``, see
        :data:`EXTENSIBLE_LIMITS`): they decide only when the campaign stops, never which trial
        is drawn or how it is judged, so raising them on resume extends the same campaign.
        """
        data = self.model_dump(
            mode="json",
            exclude={"execution", "output", "source", "budget", "library", "compare"},
        )
        data["policy"].pop("max_trials_per_question", None)
        # The pipelining lag decides which posterior each round is planned from.
        data["rounds_in_flight"] = self.execution.rounds_in_flight
        # File contents are hashed separately; where a file lives does not matter.
        for index, entry in enumerate(data["models"]):
            for key in ("workers", "latency", "path"):
                entry.pop(key, None)
            if index < len(execution_options):
                for key in execution_options[index]:
                    entry["options"].pop(key, None)
        if data.get("dataset"):
            data["dataset"].pop("path")
        if data["policy"].get("prior"):
            data["policy"]["prior"].pop("path")
        self._resolve_rule_priors(data)  # betting's earlier run: which one, wherever written
        identity: dict[str, Any] = without_secrets(data)  # a rotated key is the same campaign
        return identity

    def limits(self) -> dict[str, Any]:
        """The values of :data:`EXTENSIBLE_LIMITS` (recorded so a resume can report a change)."""
        return {
            "budget": self.budget.model_dump(mode="json"),
            "max_trials_per_question": self.policy.max_trials_per_question,
        }

    def pair_rule_refs(self) -> list[str | PluginSpec] | None:
        """``policy.pair_rules`` with each rule's ``prior`` (``betting``'s earlier run) made
        absolute, as every path of a config is."""
        refs = self.policy.pair_rules
        if refs is None:
            return None
        found: list[str | PluginSpec] = []
        for ref in refs:
            if not isinstance(ref, str) and isinstance(ref.params().get("prior"), str):
                params = ref.params()
                params["prior"] = str(self.resolve_path(params["prior"]))
                ref = PluginSpec(name=ref.name, **params)
            found.append(ref)
        return found

    def _resolve_rule_priors(self, data: dict[str, Any]) -> None:
        """``data``'s pair rules as :meth:`pair_rule_refs` gives them."""
        refs = self.pair_rule_refs()
        if refs is not None:
            data["policy"]["pair_rules"] = [
                ref if isinstance(ref, str) else ref.model_dump(mode="json") for ref in refs
            ]

    def portable_dump(self) -> dict[str, Any]:
        """The config as a mapping with every file path made absolute and every credential
        redacted (for the run dir copy)."""
        data = self.model_dump(mode="json", exclude={"source"})
        for entry in data["models"]:
            if entry.get("path"):
                entry["path"] = str(self.resolve_path(entry["path"]))
        if data.get("dataset"):
            data["dataset"]["path"] = str(self.resolve_path(data["dataset"]["path"]))
        if data["policy"].get("prior"):
            data["policy"]["prior"]["path"] = str(
                self.resolve_path(data["policy"]["prior"]["path"])
            )
        self._resolve_rule_priors(data)
        if data.get("library"):
            data["library"] = str(self.resolve_path(data["library"]))
        elif "library" in data:
            del data["library"]  # none: left out ("library:" without a value is warned about)
        portable: dict[str, Any] = redact(data)
        return portable

    def named_paths(self) -> list[tuple[str, str]]:
        """Each file or folder the config names, with its field, as written."""
        named = [(f"models[{i}].path", entry.path) for i, entry in enumerate(self.models)]
        named.append(("dataset.path", self.dataset.path if self.dataset else None))
        named.append(("policy.prior.path", self.policy.prior.path if self.policy.prior else None))
        named.append(("library", self.library))
        return [(field, path) for field, path in named if path is not None]

    def settle(self) -> CampaignSettings:
        """The config resolved once into the typed settings a campaign carries (every path
        absolute, every default filled in): what the modules below the campaign builder read
        instead of the config. Every path the config names is checked first, in order: one that
        cannot be a path (``resolve_path``) or that names a device, a pipe or a socket (reading
        one never ends) is refused. Each settings type takes its section's fields by name
        (:func:`settled`): only what is not a plain copy is written here."""
        for field, path in self.named_paths():
            not_a_device(self.resolve_path(path), source=self.source, field=field)
        policy, dataset, grader = self.policy, self.dataset, self.grader
        budget = settled(BudgetSettings, self.budget)
        return settled(
            CampaignSettings,
            self,
            rubric_span=self.rubric.span,
            policy=settled(PolicySettings, policy, prior_trials=policy.prior is not None),
            budget=budget,
            execution=settled(ExecutionSettings, self.execution),
            output=settled(OutputSettings, self.output),
            generation=GenerationSettings(
                sampling=settled(SamplingSettings, self.sampling),
                grader=None if grader is None else GraderSpec(*plugin_spec(grader)),
                dataset=None
                if dataset is None
                else settled(DatasetSettings, dataset, path=self.resolve_path(dataset.path)),
            ),
            compare=None if self.compare is None else settled(CompareSettings, self.compare),
            library=None if self.library is None else self.resolve_path(self.library),
            redacted=tuple(redacted_fields(self.model_dump(mode="json"))),
            run_record=RunRecord(
                limits=RunLimits(budget, policy.max_trials_per_question),
                config_yaml=yaml.safe_dump(self.portable_dump(), sort_keys=False),
            ),
        )


#: The schema's fields that reach no settings field of their own name, section by section;
#: every other field of a section is carried to the settings type :meth:`CampaignConfig.settle`
#: makes of it (``tests/test_settings.py`` checks that each is one or the other).
NOT_SETTLED: dict[type[BaseModel], frozenset[str]] = {
    # The campaign builder makes the entries into backend plans, reads the rubric's weights
    # (the settings carry their span) and the baseline's N; dataset, sampling and grader are
    # carried inside ``generation``.
    CampaignConfig: frozenset(("models", "rubric", "baseline", "dataset", "sampling", "grader")),
    # Plug-ins the campaign builder builds; the prior's file becomes its prior counts (the
    # settings carry only whether there is one, ``prior_trials``).
    PolicyConfig: frozenset(("allocation", "pair_rules", "stopping", "prior")),
    # Removed in issue 26: only 0 is accepted.
    ExecutionConfig: frozenset(("prefetch_trials",)),
}

Settled = TypeVar("Settled", bound="DataclassInstance")


def settled(kind: type[Settled], section: BaseModel, **computed: Any) -> Settled:
    """``kind`` (a frozen settings dataclass) holding ``section``'s values: each of its fields
    is the section's field of the same name, or the value in ``computed`` where it is not a
    plain copy (a path resolved, a fact derived). A field of the section that reaches no field
    of ``kind`` and is not in :data:`NOT_SETTLED` is refused here (a programming error), so
    a field added to the schema cannot fall silently out of the settled campaign."""
    names = [field.name for field in dataclasses.fields(kind)]
    schema = type(section)
    dropped = next((NOT_SETTLED[base] for base in schema.__mro__ if base in NOT_SETTLED), ())
    lost = sorted(set(schema.model_fields) - set(names) - set(dropped) - set(computed))
    unknown = sorted(set(computed) - set(names))
    if lost or unknown:
        raise TypeError(
            f"{schema.__name__} -> {kind.__name__}: fields {lost or unknown} "
            f"{'reach no settings field' if lost else 'are not settings fields'}; carry them "
            "(a settings field of the same name) or list them in NOT_SETTLED"
        )
    return kind(
        **{name: computed[name] if name in computed else getattr(section, name) for name in names}
    )


def _location(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in {"str", "PluginSpec", "function-after[_at_least_two()]"}:
            continue
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


#: Characters of a refused value shown in an error line.
MAX_VALUE_SHOWN = 120


def shown_value(value: Any) -> str:
    """``value`` for an error line: as JSON, a mapping as ``{...}``, a long one cut to
    :data:`MAX_VALUE_SHOWN` characters, an integer past Python's printable digits by its size
    (a 5,000-digit one given from Python raised ValueError while its error was worded)."""
    if isinstance(value, dict):
        return "{...}"
    try:
        shown = json.dumps(value, default=str)
    except ValueError:
        return f"an integer of about {int(value).bit_length() * 0.30103:,.0f} digits"
    if len(shown) > MAX_VALUE_SHOWN:  # a value is named, not printed whole
        shown = f"{shown[:MAX_VALUE_SHOWN]}... ({len(shown):,} characters)"
    return shown


def _raise_validation(error: ValidationError, source: str) -> None:
    """One line naming every invalid field with its value (not only the first)."""
    found = []
    for item in error.errors():
        field = _location(tuple(item["loc"])) or "<root>"
        shown = shown_value(item.get("input"))
        if item["type"] == "extra_forbidden":
            found.append((field, f"unknown key (value {shown})"))
        else:
            found.append((field, f"{item['msg'].removeprefix('Value error, ')} (got {shown})"))
    if len(found) == 1:
        ((field, message),) = found
        raise InputError(message, source=source, field=field) from None
    listed = "; ".join(f"{field}: {message}" for field, message in found)
    raise InputError(f"{len(found)} errors: {listed}", source=source) from None


def parse_config(data: Any, source: str = "<memory>") -> CampaignConfig:
    if not isinstance(data, dict):
        raise InputError(
            f"a campaign config must be a mapping, got {type(data).__name__}", source=source
        )
    _refuse_nul(data, source)  # and integers too long to print (values given from Python)
    try:
        return CampaignConfig.model_validate({**data, "source": source})
    except ValidationError as error:
        _raise_validation(error, source)
        raise  # unreachable; keeps type checkers content


_OVERRIDE_KEY = re.compile(r"([^.\[\]]+)((?:\[\d+\])*)")


def _override_path(dotted: str) -> list[str | int]:
    """``models[1].options.port`` -> ``["models", 1, "options", "port"]`` (``models.1`` too)."""
    path: list[str | int] = []
    for part in dotted.split("."):
        match = _OVERRIDE_KEY.fullmatch(part)
        if match is None:
            raise ValueError(part)
        name = match.group(1)
        path.append(int(name) if name.isdigit() and path else name)
        path += [int(i) for i in re.findall(r"\[(\d+)\]", match.group(2))]
    return path


def _clip(text: str, keep: int = 60) -> str:
    """``repr`` of a long command-line value, shortened for an error line."""
    return repr(text) if len(text) <= keep else repr(text[:keep]) + f" ... ({len(text):,} chars)"


_OVERRIDE_SHOWN = re.compile(r"[A-Za-z0-9_.\[\]-]*")


def _shown_override(override: str) -> str:
    """An override as an error line shows it: its key only, never its value (which may be a
    credential: ``--set models[0].options.headers.x-api-key=...``).

    >>> _shown_override("models[0].options.headers.x-key=sk-123")
    "'models[0].options.headers.x-key=...'"
    >>> _shown_override("headers.x-key: sk-123")
    "'headers.x-key...'"
    """
    key, equals, _ = override.partition("=")
    if equals:
        return _clip(f"{key}=...")
    shown = _OVERRIDE_SHOWN.match(override)
    return _clip(f"{shown.group(0) if shown else ''}...")


def _apply_override(data: dict[str, Any], override: str, source: str) -> None:
    """Set one ``KEY.PATH=VALUE`` (YAML value); list items by index: ``models[0].workers=2``.
    Error lines name the override by its key alone (:func:`_shown_override`)."""
    shown = _shown_override(override)
    if "=" not in override:
        raise InputError(f"override {shown} is not KEY=VALUE", source=source)
    dotted, raw = override.split("=", 1)
    if dotted.count(".") + dotted.count("[") >= MAX_YAML_DEPTH:
        raise InputError(
            f"override {shown}: its key has more than {MAX_YAML_DEPTH} parts (a "
            "config nests a few levels)",
            source=source,
        )
    try:
        path = _override_path(dotted)
    except ValueError as error:
        raise InputError(f"override {shown}: bad key part {error}", source=source) from None
    node: Any = data
    for depth, key in enumerate(path[:-1]):
        where = _location(tuple(path[: depth + 1]))
        if isinstance(key, int):
            if not isinstance(node, list) or not -len(node) <= key < len(node):
                size = len(node) if isinstance(node, list) else "no"
                raise InputError(
                    f"override {shown}: {where} is not an item of a list ({size} items)",
                    source=source,
                )
            node = node[key]
        else:
            if not isinstance(node, dict):
                raise InputError(f"override {shown}: {where} is not a mapping", source=source)
            node = node.setdefault(key, {})
    last = path[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or not -len(node) <= last < len(node):
            raise InputError(f"override {shown}: no list item {last}", source=source)
    elif not isinstance(node, dict):
        raise InputError(
            f"override {shown}: {_location(tuple(path[:-1]))} is not a mapping",
            source=source,
        )
    try:
        node[last] = load_yaml(raw, f"{source}: override {shown}")
    except InputError as error:
        if not any(
            isinstance(part, str) and (part.lower() == "headers" or is_secret_key(part))
            for part in path
        ):
            raise
        # The parser's detail may quote the value, a credential here: its position only.
        raise InputError(
            f"override {shown}: its value is {error.message.split(':')[0]} (quote it: KEY='VALUE')",
            source=source,
        ) from None


def load_config(path: str | Path, overrides: list[str] | None = None) -> CampaignConfig:
    """Read a YAML campaign, apply ``KEY.PATH=VALUE`` overrides, validate."""
    source = str(path)
    data = read_yaml(path, source)
    if overrides and not isinstance(data, dict):
        raise InputError(
            f"a campaign config must be a mapping, got {type(data).__name__}", source=source
        )
    for override in overrides or []:
        _apply_override(data, override, source)
    remember(data)
    return parse_config(data, source=str(Path(path).resolve()))


def _refuse_nul(data: Any, source: str, at: tuple[str | int, ...] = ()) -> None:
    """A NUL character in any value (a path, a name) is refused naming its field (the OS
    refuses such a path later, as "unexpected error: ValueError: embedded null byte")."""
    if isinstance(data, str):
        if "\0" in data:
            raise InputError(
                f"{data[:60]!r} holds a NUL character", source=source, field=_location(at)
            )
    elif isinstance(data, int) and not isinstance(data, bool):
        if data.bit_length() > MAX_INT_DIGITS * 3.33:  # past MAX_INT_DIGITS decimal digits
            raise InputError(
                f"an integer of about {data.bit_length() * 0.30103:,.0f} digits; no setting "
                f"takes more than {MAX_INT_DIGITS}",
                source=source,
                field=_location(at),
            )
    elif isinstance(data, dict):
        for key, value in data.items():
            _refuse_nul(value, source, (*at, str(key)))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            _refuse_nul(value, source, (*at, index))


def file_sha256(path: Path) -> str:
    """The content hash of an input file (read in chunks; a device or pipe is refused first,
    as it would never end)."""
    check(path, limit=1 << 50, what="file")
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
