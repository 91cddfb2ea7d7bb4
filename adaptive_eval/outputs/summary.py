"""summary.json: the contract other tools read, built from a campaign's final state.

``schema_version`` is its first field. The document's shape, its versions and the published
JSON Schema are :mod:`adaptive_eval.base.summary_schema`'s: :func:`build_summary` returns the
validated model, which :func:`adaptive_eval.outputs.report.write_outputs` writes and renders.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from adaptive_eval import stats
from adaptive_eval.base.accounting import Savings
from adaptive_eval.base.summary_schema import (
    SCHEMA_VERSION,
    Comparison,
    DecisionRules,
    ForecastCheck,
    LiveForecastPoint,
    Provenance,
    Summary,
)
from adaptive_eval.base.types import PairDecision, Stop
from adaptive_eval.campaign.build import describe_rules
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.control.run_result import FinishedRun
from adaptive_eval.decide.contracts import adjacent_only
from adaptive_eval.outputs.presentation import SCORE_STATISTIC, bayes_description
from adaptive_eval.stats.intervals import IntervalDesign, ScoreIntervals


def summarize(
    *,
    name: str,
    campaign_id: str,
    names: tuple[str, ...],
    trials: np.ndarray,
    weighted_mean: np.ndarray,
    confidence: float,
    decisions: tuple[PairDecision, ...],
    stop: Stop | None,
    savings: Savings,
    prior_note: str,
    score_se: np.ndarray,
    intervals: ScoreIntervals,
    design: IntervalDesign,
    bayes_mu: np.ndarray,
    bayes_sigma: np.ndarray,
    bayes_prior: str = "empirical",
    extra: dict[str, Any] | None = None,
    weight_range: tuple[float, float] = (0.0, 1.0),
    decision_rules: DecisionRules | None = None,
) -> dict[str, Any]:
    """The summary document. ``trials`` is (L, M); ``weighted_mean`` is each model's avg@n.

    One score leads: ``score``, the unbiased estimate the decisions use (the mean of
    per-question means, :mod:`adaptive_eval.stats.sequential`), with its interval under
    ``design`` (``intervals``: ``score_low``, ``score_high``; valid under the campaign's
    stopping, see :mod:`adaptive_eval.stats.intervals`). Models are listed in its order. The
    paper's Bayes@N posterior mean and credible interval (clipped to the weight range) follow
    under ``bayes_*`` names, labelled for what they are. ``rank`` is dense over the final pair
    decisions: a resolved pair steps down a rank, an equivalent or undecided one shares it.
    """
    lo_w, hi_w = weight_range
    score = intervals.estimate
    b_low, b_high = (
        np.clip(x, lo_w, hi_w) for x in stats.credible_interval(bayes_mu, bayes_sigma, confidence)
    )
    order = np.argsort(-score, kind="stable")
    ranks = _decision_ranks(order, decisions)
    plain = {int(m): k + 1 for k, m in enumerate(order)}
    goal = design.half_width
    models = []
    for i in order:
        row: dict[str, Any] = {
            "name": names[i],
            "rank": ranks[int(i)],
            "rank_no_ties": plain[int(i)],
            "score": float(score[i]),
            "score_se": float(score_se[i]),
            "score_low": float(np.clip(intervals.low[i], lo_w, hi_w)),
            "score_high": float(np.clip(intervals.high[i], lo_w, hi_w)),
        }
        if goal is not None:
            row["width_goal_met"] = bool(intervals.half_width[i] <= goal + 1e-12)
        row |= {
            "trials": int(trials[i].sum()),
            "trials_per_question_min": int(trials[i].min()),
            "trials_per_question_max": int(trials[i].max()),
            "avg": float(weighted_mean[i]),
            "bayes_mu": float(bayes_mu[i]),
            "bayes_sigma": float(bayes_sigma[i]),
            "bayes_low": float(b_low[i]),
            "bayes_high": float(b_high[i]),
        }
        models.append(row)
    pairs = [
        {
            "a": names[d.a],
            "b": names[d.b],
            "z": float(d.z),
            "decision": d.verdict.value,
            "rule": d.rule,
            "boundary": None if d.boundary is None else float(d.boundary),
            "alpha_spent": None if d.alpha is None else float(d.alpha),
            "decided_at_round": d.look,
            "futile": d.futile,
            "reason": d.reason,
            "trials_needed_per_question": d.projected,
        }
        for d in decisions
    ]
    baseline = {
        "fixed_n": savings.fixed_n,
        "trials": savings.baseline_trials,
        "tokens": savings.baseline_tokens,
        "gpu_s": savings.baseline_gpu_s,
    }
    num_models = len(names)
    return {
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "campaign_id": campaign_id,
        "stop_reason": None if stop is None else stop.reason.value,
        "stop_detail": None if stop is None else stop.detail,
        "confidence": confidence,
        "prior": prior_note,
        "score": {
            "statistic": SCORE_STATISTIC,
            "interval": design.kind,
            "confidence": design.confidence,
            "simultaneous": design.simultaneous,
            "half_width": goal,
            "boundary_at_horizon": design.final_boundary(num_models),
            "guarantee": design.guarantee(num_models),
            "width_goal_met": None if goal is None else all(m["width_goal_met"] for m in models),
        },
        "bayes": {
            "prior": bayes_prior,
            "description": bayes_description(bayes_prior),
            "credible_interval": (
                f"bayes_low, bayes_high: the posterior's central {100 * confidence:g}% credible "
                "interval under that prior. It is not a confidence interval: after adaptive "
                "stopping it covered the full-pool score for only 62-80% of models in ranking "
                "campaigns on real replays. Tables and headlines show score_low, score_high."
            ),
        },
        "trials_used": savings.trials_used,
        "tokens_used": savings.tokens_used,
        "gpu_s_used": savings.gpu_s_used,
        "baseline": baseline,
        "compute_saved": {
            "trials_fraction": savings.trials_fraction,
            "tokens_fraction": savings.tokens_fraction,
            "gpu_fraction": savings.gpu_fraction,
        },
        "decision_rules": decision_rules or DecisionRules(),
        "models": models,
        "pairs": pairs,
        **(extra or {}),
    }


def _decision_ranks(order: np.ndarray, decisions: tuple[PairDecision, ...]) -> dict[int, int]:
    """Dense ranks down ``order``: only a resolved adjacent pair starts a new rank."""
    resolved = {frozenset((d.a, d.b)) for d in decisions if d.verdict.value in ("a>b", "b>a")}
    ranks: dict[int, int] = {}
    rank = 1
    for k, model in enumerate(order):
        if k and frozenset((int(order[k - 1]), int(model))) in resolved:
            rank += 1
        ranks[int(model)] = rank
    return ranks


def build_summary(
    campaign: Campaign,
    run: FinishedRun,
    provenance: Provenance,
    *,
    comparison: Comparison | None = None,
    forecast: ForecastCheck | None = None,
    live_forecast: list[LiveForecastPoint] | None = None,
) -> Summary:
    """summary.json for a finished run, from the run's snapshot alone, validated against the
    contract before anyone reads it. ``provenance``: the run folder's
    (:func:`adaptive_eval.outputs.provenance.collect`); ``comparison`` and ``forecast``: what
    compare and a run launched from a forecast add."""
    view = run.view
    mu, sigma = view.posterior()
    trials = np.asarray(view.trials)
    with np.errstate(invalid="ignore", divide="ignore"):
        weighted = (view.counts @ campaign.decision.weights).sum(axis=1) / trials.sum(axis=1)
    facts = run.facts
    known = {
        "resumed": facts.resumed,
        "elapsed_s": facts.elapsed_s,
        "dispatch": facts.dispatch,
        "finished": run.stop is not None if facts.finished is None else facts.finished,
        "provenance": _counting_sampled(provenance, run.savings),
        "comparison": comparison,
        "nightly": facts.nightly,
        "forecast": forecast,
        "live_forecast": live_forecast,
    }
    document = summarize(
        name=campaign.run.settings.name,
        campaign_id=run.campaign_id,
        names=campaign.names,
        trials=trials,
        weighted_mean=np.nan_to_num(weighted),
        confidence=campaign.decision.policy.confidence,
        decisions=adjacent_only(run.decisions, view),
        stop=run.stop,
        savings=run.savings,
        prior_note=campaign.decision.prior_note,
        score_se=view.theta_se,
        intervals=view.score_intervals(campaign.decision.interval_design),
        design=campaign.decision.interval_design,
        bayes_mu=mu,
        bayes_sigma=sigma,
        bayes_prior=view.bayes_prior,
        extra={key: value for key, value in known.items() if value is not None},
        weight_range=(float(min(campaign.decision.weights)), float(max(campaign.decision.weights))),
        decision_rules=describe_rules(campaign),
    )
    _mark_open_boundaries(document, campaign, run)
    if campaign.run.fixed_n_note is not None:
        document["baseline"]["note"] = campaign.run.fixed_n_note
    return Summary.model_validate(document)


def _counting_sampled(provenance: Provenance, savings: Savings) -> Provenance:
    """The library's compute saved counting only what this run sampled (reused trials cost
    nothing now)."""
    library = provenance.library
    if library is None or not savings.baseline_trials:
        return provenance
    saved = 1 - library.sampled / savings.baseline_trials
    return provenance.model_copy(
        update={"library": library.model_copy(update={"saved_fraction": saved})}
    )


def _mark_open_boundaries(summary: dict[str, Any], campaign: Campaign, run: FinishedRun) -> None:
    """Each undecided pair gets ``boundary_at_cap``: the boundary it would have to cross with
    both models at the cap (report.html drew no mark for undecided pairs)."""
    from adaptive_eval.campaign.checkpoint import boundary_at_cap

    index = {name: i for i, name in enumerate(campaign.names)}
    for pair in summary["pairs"]:
        if pair["decision"] == "undecided" and pair.get("boundary") is None:
            a, b = index[pair["a"]], index[pair["b"]]
            pair["boundary_at_cap"] = boundary_at_cap(
                campaign.decision.pair_rules, run.view, a, b, run.core.memory
            )
