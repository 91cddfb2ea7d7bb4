"""summary.json's contract as pydantic models: what a run writes, validated before it is written,
and the JSON Schema published in ``docs/summary.schema.json``.

Versions (``schema_version``, the document's first field). A field renamed, removed or given
another meaning raises it; a field added does not (``tests/test_summary_schema.py`` holds the
field list of each version and fails when one disappears without a new version):

* 1 (no ``schema_version``): before 2026-11-24 the models carried the paper's Bayes@N as ``mu``,
  ``sigma``, ``ci_low``, ``ci_high`` (with the unbiased ``estimate``, ``estimate_se``,
  ``estimate_ci_low``, ``estimate_ci_high`` beside them from 2026-11-23); from 2026-11-24 the
  unbiased ``score*`` led and Bayes@N was ``bayes_*``, still without a version.
* 2: ``schema_version`` leads; provenance keeps the run's own package versions
  (``report_build`` is the report's) and labels each model's hashes.
* 3: in a compare run with a margin, a pair of the ranking that holds the candidate carries the
  gate's verdict (``pass`` / ``fail`` / ``undecided``, stated candidate first) in
  ``pairs[].decision``.

:func:`upgrade` reads every earlier version into the current shape (what nightly and the
exports read from folders written before); :func:`read_summary` validates it.

    python -m adaptive_eval.base.summary_schema > docs/summary.schema.json   # after a change
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 3

Decision = Literal["a>b", "b>a", "equivalent", "undecided", "pass", "fail"]


class _Closed(BaseModel):
    """A block whose fields are all listed: an unknown key is an error, so a field added to the
    writer is added here (and to the published schema) too."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _Recorded(BaseModel):
    """A block copied from what a run recorded (its store's metadata): earlier versions of the
    project recorded other keys, which a re-read run keeps."""

    model_config = ConfigDict(extra="allow", frozen=True)


class ModelRow(_Closed):
    """One model, in the order of ``score``."""

    name: str
    rank: int = Field(
        description="Dense over the final pair decisions: only a resolved pair starts a new rank."
    )
    rank_no_ties: int
    score: float = Field(
        description="The unbiased estimate the decisions use: the mean of per-question means."
    )
    score_se: float
    score_low: float = Field(description="The score interval (see the `score` block).")
    score_high: float
    width_goal_met: bool | None = Field(
        None, description="Present with a width goal: this model's interval is narrow enough."
    )
    trials: int
    trials_per_question_min: int
    trials_per_question_max: int
    avg: float = Field(description="avg@n: the weighted mean over every trial.")
    bayes_mu: float = Field(description="The paper's Bayes@N posterior mean.")
    bayes_sigma: float
    bayes_low: float = Field(
        description="Bayes@N central credible interval (not a confidence "
        "interval after adaptive stopping)."
    )
    bayes_high: float


class PairRow(_Closed):
    """One adjacent pair of the final order (a ranked above b)."""

    a: str
    b: str
    z: float
    decision: Decision
    rule: str | None
    boundary: float | None
    alpha_spent: float | None
    decided_at_round: int | None
    futile: bool
    reason: str | None
    trials_needed_per_question: float | None
    boundary_at_cap: float | None = Field(
        None, description="An undecided pair: the boundary it would have to cross at the cap."
    )


class ScoreBlock(_Closed):
    statistic: str
    interval: str
    confidence: float
    simultaneous: bool
    half_width: float | None
    boundary_at_horizon: float | None
    guarantee: str
    width_goal_met: bool | None


class BayesBlock(_Closed):
    prior: str
    description: str
    credible_interval: str | None = None


class Baseline(_Closed):
    fixed_n: int | None
    trials: int | None
    tokens: float | None
    gpu_s: float | None
    note: str | None = None


class ComputeSaved(_Closed):
    trials_fraction: float | None
    tokens_fraction: float | None
    gpu_fraction: float | None


class PluginRecord(_Closed):
    """A registered plug-in the campaign decides with, and every parameter it was built with
    (defaults included)."""

    kind: str
    name: str
    params: dict[str, Any]


class DecisionRules(_Closed):
    rules: list[str] = Field(default_factory=list)
    plugins: list[PluginRecord] = Field(default_factory=list)
    error_control: str | None = None
    confidence: float | None = None
    pair_alpha: float | None = None
    rope: float | None = None
    error_controlled: bool | None = None
    statistic: str | None = None
    prior_in_test: str | None = None
    warning: str | None = None


class Dispatch(_Recorded):
    """What dispatch counted over every leg of the run."""

    # Counted by adaptive_eval.dispatch.stats and kept in the store as this block; strict, so
    # that a counter recorded as text is a damaged record, never a count.
    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    workers: int | None = None
    batches: int | None = None
    failed_batches: int | None = None
    worker_restarts: int | None = None
    worker_utilisation: float | None = None
    model_loads: int | None = None
    load_s: float | None = None
    request_retries: int | None = None
    request_retry_reasons: dict[str, int] = Field(default_factory=dict)


class CompareVerdict(_Closed):
    """The candidate against one incumbent, from the candidate's side."""

    incumbent: str
    decision: Literal["better", "worse", "equivalent", "undecided", "pass", "fail"]
    z: float
    boundary: float | None
    decided_at_round: int | None
    trials_at_decision: int | None
    trials: int
    boundary_at_cap: float | None = None
    reason: str | None = None


class Comparison(_Closed):
    """compare's verdicts, candidate against each incumbent, and its exit code."""

    candidate: str
    margin: float | None
    verdicts: list[CompareVerdict]
    exit_code: int
    meaning: str
    stopped: str | None


class ForecastMeasure(_Closed):
    """One measure of a forecast (trials, tokens, ...) against what the run did."""

    p10: float
    p50: float
    p90: float
    actual: float
    inside: bool = Field(description="whether the actual value fell in the 10-90% range")


class ForecastCurvePoint(_Closed):
    trials: int
    p10: float
    p50: float
    p90: float


class ForecastVerdict(_Closed):
    """compare's exit code against the probability the forecast gave each exit code."""

    exit_code: int = Field(description="the run's exit code")
    probabilities: dict[str, float] = Field(
        description="the forecast's probability of each exit code (within the budget where "
        "the campaign has one)"
    )


class ForecastCheck(_Closed):
    """The forecast the run was launched from (its folder's forecast.json) against the run."""

    same_campaign: bool = Field(description="the forecast was made for this very campaign")
    evidence: str | None = Field(description="pilot, run, library or prior")
    simulations: int | None
    measures: dict[str, ForecastMeasure] = Field(
        description="trials, new_trials, tokens, gpu_s, wall_s, pairs_settled: where both are known"
    )
    curve: list[ForecastCurvePoint] = Field(
        description="the forecast's budget-decision curve: pairs settled against trials"
    )
    verdict: ForecastVerdict | None = Field(
        default=None, description="a compare run launched from a forecast --candidate"
    )


class ForecastRange(_Closed):
    p10: float
    p50: float
    p90: float


class LiveForecastPoint(_Closed):
    """The live forecast of the rest of the run, made after one round from all the evidence so
    far (:mod:`adaptive_eval.forecast.live`); ``*_to_go`` what was still to come."""

    round: int
    trials_used: int = Field(description="trials recorded when the forecast was made")
    elapsed_s: float
    simulations: int
    trials: ForecastRange = Field(description="the run's total trials at its stop, unbudgeted")
    trials_to_go: ForecastRange
    tokens_to_go: ForecastRange | None
    gpu_s_to_go: ForecastRange | None
    wall_s_to_go: ForecastRange | None = Field(
        description="at the run's steady seconds per trial since its first round"
    )
    pairs_to_settle: ForecastRange
    settled_now: int
    budget_trials: int | None
    budget_short: float | None = Field(
        description="pairs the trial budget leaves unsettled that the campaign settles without "
        "it (median over the simulations)"
    )
    budget_needed: float | None = Field(
        description="the trials by which the campaign settles all it settles (median)"
    )
    seconds: float = Field(
        description="the forecast's own compute time (CPU seconds of the process it ran in)"
    )


class ScoreDrop(_Closed):
    kind: Literal["score_drop"]
    model: str
    before: float
    now: float
    bayes_before: float | None = None
    bayes_now: float | None = None
    z: float
    rule: str | None


class RankingFlip(_Closed):
    kind: Literal["ranking_flip"]
    pair: list[str]
    before: str
    now: str
    direction: Literal["down", "up"] = "down"


class CostOutsideForecast(_Closed):
    """A night that sampled more (or fewer) trials than its forecast's 90% range."""

    kind: Literal["cost_outside_forecast"]
    measure: str
    low: float
    high: float
    actual: float


Alert = Annotated[ScoreDrop | RankingFlip | CostOutsideForecast, Field(discriminator="kind")]


class Nightly(_Closed):
    night: str
    alerts: list[Alert]
    exit_code: int


class ProvenanceModel(_Recorded):
    backend: str | None
    path: str | None
    name: str | None
    select: list[str] | None
    revision: str | None
    sha256: dict[str, str]
    engine: str | None
    server: str | None = None
    served: list[str] | None = None


class Library(_Recorded):
    path: str
    reused: int
    sampled: int
    changes: list[str]
    saved_fraction: float | None = None


class Provenance(_Recorded):
    written_utc: str
    seed: int | None
    models: list[ProvenanceModel]
    dataset: dict[str, Any] | None
    sampling: dict[str, Any] | None
    grader: str | dict[str, Any] | None
    rubric: list[float] | None = None
    extensions: list[Any] = Field(default_factory=list)
    library: Library | None
    packages: dict[str, str] | None
    packages_later: list[Any] | None
    report_build: dict[str, str]


class Summary(_Closed):
    """summary.json, version :data:`SCHEMA_VERSION`."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        title="adaptive-eval summary.json",
        json_schema_extra={"$id": "https://adaptive-eval.dev/summary.schema.json"},
    )

    schema_version: Literal[3]
    name: str
    campaign_id: str
    stop_reason: str | None = Field(description="null: the run has not finished.")
    stop_detail: str | None
    confidence: float
    prior: str
    score: ScoreBlock
    bayes: BayesBlock
    trials_used: int
    tokens_used: int | None
    gpu_s_used: float | None
    baseline: Baseline
    compute_saved: ComputeSaved
    decision_rules: DecisionRules
    models: list[ModelRow]
    pairs: list[PairRow]
    resumed: bool | None = None
    elapsed_s: float | None = None
    dispatch: Dispatch | None = None
    finished: bool
    provenance: Provenance
    comparison: Comparison | None = None
    nightly: Nightly | None = None
    forecast: ForecastCheck | None = None
    live_forecast: list[LiveForecastPoint] | None = Field(
        default=None,
        description="the live forecast after each round it was made for (null: none was made)",
    )


def json_schema() -> dict[str, Any]:
    """The published JSON Schema of the current version (docs/summary.schema.json)."""
    return Summary.model_json_schema(mode="serialization")


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=False) + "\n"


def field_paths(schema: dict[str, Any] | None = None) -> list[str]:
    """Every field the schema names, as dotted paths (``models[].score``), sorted: what a
    version promises its readers (a path that disappears is a renamed or removed field)."""
    schema = json_schema() if schema is None else schema
    definitions = schema.get("$defs", {})
    found: set[str] = set()

    def walk(node: dict[str, Any], path: str) -> None:
        if "$ref" in node:
            walk(definitions[node["$ref"].rsplit("/", 1)[-1]], path)
            return
        for key in ("anyOf", "oneOf", "allOf"):
            for alternative in node.get(key, []):
                walk(alternative, path)
        if node.get("type") == "array" and isinstance(node.get("items"), dict):
            walk(node["items"], path + "[]")
        for name, sub in node.get("properties", {}).items():
            child = f"{path}.{name}" if path else name
            found.add(child)
            walk(sub, child)

    walk(schema, "")
    return sorted(found)


def validate(document: dict[str, Any]) -> Summary:
    """The document as the model, or ``pydantic.ValidationError`` naming each bad field."""
    return Summary.model_validate(document)


def record(block: BaseModel) -> dict[str, Any]:
    """A block as summary.json (or the store) holds it: the fields it was given, absent ones
    left out (a run that never counted a figure does not write it as null)."""
    return block.model_dump(mode="json", exclude_unset=True)


def json_text(block: BaseModel) -> str:
    """summary.json's text, or one block's (what ``--json`` prints)."""
    return json.dumps(record(block), indent=2)


#: Version 1's Bayes@N names -> the current ones (the unbiased score took the lead names).
_V1_BAYES = {
    "mu": "bayes_mu",
    "sigma": "bayes_sigma",
    "ci_low": "bayes_low",
    "ci_high": "bayes_high",
}
_V1_SCORE = {
    "estimate": "score",
    "estimate_se": "score_se",
    "estimate_ci_low": "score_low",
    "estimate_ci_high": "score_high",
}
_NOT_RECORDED = "not recorded: a summary written before schema version 2"


def upgrade(document: dict[str, Any]) -> dict[str, Any]:
    """Any earlier version of summary.json in the current shape (a new dict).

    Version 1's model rows are renamed (``mu`` -> ``bayes_mu`` ..., ``estimate`` -> ``score``
    ...; where a row had no unbiased estimate, the score is its Bayes@N, the only score it
    had); blocks version 1 did not write (``score``, ``bayes``) say they were not recorded.
    Versions 2 and 3 differ in what a margin compare's pairs mean, not in shape.
    """
    version = document.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(
            f"schema_version = {version!r}: no adaptive-eval writes it (versions are 1 to "
            f"{SCHEMA_VERSION}): a damaged or hand-made summary"
        )
    if version > SCHEMA_VERSION:
        raise ValueError(
            f"schema_version = {version!r}: this adaptive-eval reads versions 1 to "
            f"{SCHEMA_VERSION}; a newer one wrote it"
        )
    out = dict(document)
    if version == 1:
        out["models"] = [_upgrade_model(dict(row)) for row in document.get("models") or []]
        out.setdefault(
            "score",
            {
                "statistic": _NOT_RECORDED,
                "interval": "unknown",
                "confidence": document.get("confidence"),
                "simultaneous": False,
                "half_width": None,
                "boundary_at_horizon": None,
                "guarantee": _NOT_RECORDED,
                "width_goal_met": None,
            },
        )
        out.setdefault("bayes", {"prior": "uniform", "description": _NOT_RECORDED})
        out.setdefault("finished", document.get("stop_reason") is not None)
    out["schema_version"] = SCHEMA_VERSION
    return out


def _upgrade_model(row: dict[str, Any]) -> dict[str, Any]:
    if "score" in row:
        return row
    for old, new in _V1_BAYES.items():
        if old in row:
            row[new] = row.pop(old)
    for old, new in _V1_SCORE.items():
        if old in row:
            row[new] = row.pop(old)
    for new, bayes in (
        ("score", "bayes_mu"),
        ("score_se", "bayes_sigma"),
        ("score_low", "bayes_low"),
        ("score_high", "bayes_high"),
    ):
        row.setdefault(new, row.get(bayes))
    return row


def read_summary(document: dict[str, Any]) -> Summary:
    """A summary.json of any version, upgraded and validated."""
    return validate(upgrade(document))


if __name__ == "__main__":
    sys.stdout.write(schema_text())
