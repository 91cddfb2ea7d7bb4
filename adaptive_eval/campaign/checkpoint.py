"""A candidate against its incumbents: the steered campaign, its judge and its exit codes.

``adaptive-eval compare`` (:mod:`adaptive_eval.workflows.compare`) runs it.

The config lists the candidate and its incumbents as usual (incumbents typically as ``replay``
entries of their recorded trials, so only the candidate is sampled; any backend works). Only the
pairs (candidate, incumbent) are settled, never incumbent against incumbent, and the campaign
stops as soon as every one of them is settled (or at the budget / cap).

Each pair is settled by the campaign's own pair rules (``campaign.decision.pair_rules``,
whatever the config chose: by default the error-controlled ``group_sequential``), asked about
(candidate, incumbent) on the campaign's view. Only models still in an undecided pair with
the candidate (and the candidate) get trials.

With a non-inferiority ``margin`` (``--margin``, or ``compare.margin`` in the config) each
comparison is instead the one-sided test of :mod:`adaptive_eval.decide.noninferiority`: ``pass``
(not
worse than the incumbent by more than the margin) or ``fail`` (a regression), error-controlled
like the pair rules; the run stops once every comparison passed or any failed.

Exit codes (:func:`exit_code`): 0 the candidate is not worse than any incumbent (better or
equivalent within the rope; with a margin: passed against every one), 3 worse than at least one
(a regression; with a margin: failed against one), 4 some comparison undecided at the budget or
cap; 2 bad input, 1 failure. ``summary.json`` gains ``comparison``: ``{candidate, margin,
verdicts: [{incumbent, decision, z, boundary, boundary_at_cap, decided_at_round,
trials_at_decision, trials, reason}], exit_code, meaning, stopped}``
(:class:`~adaptive_eval.base.summary_schema.Comparison`), with ``decision`` one of ``better``,
``worse``, ``equivalent``, ``undecided`` (the candidate's side), or with a margin ``pass``,
``fail``, ``undecided``. The run goes through the same set-up
as ``run`` (run-folder lock, ``ray.log``, progress), and ``adaptive-eval report`` rebuilds it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.summary_schema import CompareVerdict, Comparison
from adaptive_eval.base.types import PairDecision, Stop, StopReason, Verdict
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.campaign.parts import budget_rule
from adaptive_eval.decide.contracts import (
    NO_MEMORY,
    CampaignView,
    Goals,
    PairRule,
    PairSelector,
    RuleMemory,
    StoppingRule,
    adjacent_pairs,
    any_of,
    candidate_pairs,
    even_plan,
    pair_key,
)
from adaptive_eval.decide.noninferiority import FAIL, NonInferiority, look_schedule

#: Verdicts that fix the exit code at 3 (a regression) once one is reached.
REGRESSIONS = frozenset({"worse", FAIL})
EXIT_NOT_WORSE = 0
EXIT_REGRESSION = 3
EXIT_UNDECIDED = 4


@dataclasses.dataclass(frozen=True)
class CandidateVerdict:
    """The candidate against one incumbent, from the candidate's side."""

    incumbent: int
    decision: str  # better / worse / equivalent / undecided; with a margin pass / fail / undecided
    z: float
    boundary: float | None = None
    look: int | None = None  # the round it was decided in
    reason: str | None = None


def verdicts(decisions: Sequence[PairDecision], candidate: int) -> list[CandidateVerdict]:
    """The candidate's verdict against every incumbent, from the core's decisions on the
    candidate's pairs (:func:`compare_pairs`), in incumbent order.

    The pairs are decided by the campaign's own decision core: by its pair rules (under
    ``error_control: ranking`` each of the L - 1 comparisons gets ``(1 - confidence) / (L - 1)``,
    so the CI gate's verdicts hold together), or with a margin by the non-inferiority rule.
    """
    found = {}
    for decision in decisions:
        if candidate in (decision.a, decision.b):
            incumbent = decision.b if decision.a == candidate else decision.a
            found[incumbent] = CandidateVerdict(
                incumbent,
                _side(decision, candidate),
                decision.z,
                decision.boundary,
                decision.look,
                decision.reason,
            )
    return [found[incumbent] for incumbent in sorted(found)]


@dataclasses.dataclass(frozen=True)
class ComparePairs:
    """The adjacent pairs of the ordering (the ranking the pages show), then the candidate's
    pairs with the incumbents not adjacent to it, stated (candidate, incumbent). A value, not a
    closure: the live forecast sends the campaign to its own process."""

    candidate: int

    def __call__(self, view: CampaignView) -> list[tuple[int, int]]:
        adjacent = adjacent_pairs(view)
        seen = {pair_key(a, b) for a, b in adjacent}
        rest = [
            (a, b) for a, b in candidate_pairs(self.candidate)(view) if pair_key(a, b) not in seen
        ]
        return adjacent + rest


def compare_pairs(candidate: int) -> PairSelector:
    """:class:`ComparePairs` of ``candidate``."""
    return ComparePairs(candidate)


def boundary_at_cap(
    rules: Sequence[PairRule],
    view: CampaignView,
    a: int,
    b: int,
    memory: Sequence[RuleMemory] | None = None,
) -> float | None:
    """The boundary on |z| an undecided pair would have to cross with both models at the cap
    (by the first rule that has one: the error-controlled rules' last look, at the level their
    ``memory`` gives an open pair), None where no rule states one. The pages draw it, so an
    undecided pair's bar has a mark to be read against."""
    memories = tuple(memory) if memory is not None else (NO_MEMORY,) * len(rules)
    for rule, known in zip(rules, memories, strict=True):
        final = getattr(rule, "final", None)
        if not callable(final):
            continue
        resolve = float(final(view, a, b, known)[0])
        return resolve if math.isfinite(resolve) else None
    return None


def _side(decision: PairDecision, candidate: int) -> str:
    """The verdict seen from the candidate."""
    if decision.verdict in (Verdict.UNDECIDED, Verdict.EQUIVALENT, Verdict.PASS, Verdict.FAIL):
        return str(decision.verdict.value)
    winner = decision.a if decision.verdict is Verdict.A_GT_B else decision.b
    return "better" if winner == candidate else "worse"


def exit_code(decisions: Sequence[str]) -> int:
    """The gate's exit code for the candidate's decisions against its incumbents (what
    ``compare`` exits with, and what the forecast of a compare run counts per simulation)."""
    if "worse" in decisions or FAIL in decisions:
        return EXIT_REGRESSION
    if "undecided" in decisions:
        return EXIT_UNDECIDED
    return EXIT_NOT_WORSE


@dataclasses.dataclass(frozen=True)
class Judge:
    """What compare judges: the candidate's index, the margin of its non-inferiority test
    (``None``: the campaign's pair rules decide), and those rules (for the boundary an
    undecided pair would need at the cap)."""

    rules: tuple[PairRule, ...]
    candidate: int
    margin: float | None = None

    def __call__(self, decisions: Sequence[PairDecision]) -> list[CandidateVerdict]:
        return verdicts(decisions, self.candidate)


class CandidatePlaced(StoppingRule):
    """Stop once the gate's exit code cannot change: at the first regression (a ``worse`` or,
    with a margin, ``fail`` verdict: exit 3 whatever the rest give) or once every (candidate,
    incumbent) pair is settled; need only their models. ``settle_all`` keeps sampling after
    a regression until every pair is settled (the behaviour before issue 22, where the gate
    went on to the cap on another incumbent after its verdict was fixed)."""

    name = "candidate_placed"

    def __init__(self, judge: Judge, settle_all: bool = False) -> None:
        self.judge = judge
        self.settle_all = settle_all

    def _should_stop(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> Stop | None:
        found = self.judge(decisions)
        regressions = [v for v in found if v.decision in REGRESSIONS]
        open_pairs = [v for v in found if v.decision == "undecided"]
        if regressions and open_pairs and not self.settle_all:
            names = ", ".join(view.names[v.incumbent] for v in regressions)
            return Stop(
                StopReason.GOAL_MET,
                f"the candidate is a regression against {names}: exit 3 whatever the "
                f"{len(open_pairs)} undecided comparison(s) would give (--settle-all settles them)",
            )
        if not open_pairs:
            return Stop(StopReason.GOAL_MET, "every pair with the candidate is settled")
        return None

    def needs(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> np.ndarray | None:
        mask = np.zeros(view.num_models, dtype=bool)
        for verdict in self.judge(decisions):
            if verdict.decision == "undecided":
                mask[[verdict.incumbent, self.judge.candidate]] = True
        return mask


@dataclasses.dataclass(frozen=True)
class NeededOnly:
    """Equal trials per question for the needed models that have room (catching up first)."""

    name: str = "needed_only"

    def __call__(
        self,
        view: CampaignView,
        decisions: tuple[PairDecision, ...],
        needs: np.ndarray,
        round_trials: int,
        goals: Goals | None = None,
    ) -> np.ndarray:
        chosen = needs & (view.planned.min(axis=1) < view.capacity)
        return even_plan(view, chosen, round_trials, None)


def compare_campaign(
    campaign: Campaign,
    candidate: str,
    margin: float | None = None,
    settle_all: bool | None = None,
) -> tuple[Campaign, Judge]:
    """The campaign (as built from its config), steered to place ``candidate`` among the other
    models, and the judge of its comparisons. ``margin`` (else ``compare.margin``) asks for
    non-inferiority; ``settle_all`` (else ``compare.settle_all``) samples on after a
    regression."""
    settings = campaign.run.settings
    source = settings.source
    if candidate not in campaign.names:
        raise InputError(
            f"--candidate {candidate!r} is not a model of this config "
            f"(models: {', '.join(campaign.names)})",
            source=source,
        )
    if campaign.num_models < 2:
        raise InputError("compare needs at least one incumbent beside the candidate")
    if margin is None and settings.compare is not None:
        margin = settings.compare.margin
    if margin is not None and not (math.isfinite(margin) and margin > 0):
        raise InputError(f"--margin must be > 0, got {margin}", source=source)
    if margin is not None and margin >= settings.rubric_span:
        raise InputError(
            f"--margin {margin:g} is not below the range of the rubric weights "
            f"({settings.rubric_span:g}): any candidate would pass",
            source=source,
        )
    index = campaign.names.index(candidate)
    if margin is not None:
        _check_margin_matters(campaign, index, margin)
    per_comparison = tuple(_per_comparison(rule) for rule in campaign.decision.pair_rules)
    judge = Judge(per_comparison, index, margin)
    rules: tuple[PairRule, ...] = per_comparison
    if margin is not None:
        # The candidate's pairs get the gate's verdicts; the others (the ranking the pages
        # show) the campaign's rules.
        rules = (NonInferiority(index, margin, look_schedule(campaign.decision.pair_rules)), *rules)
    if settle_all is None:
        settle_all = settings.compare is not None and settings.compare.settle_all
    stopping: list[StoppingRule] = [CandidatePlaced(judge, settle_all)]
    budget = budget_rule(settings.budget, source)
    if budget is not None:
        stopping.append(budget)
    steering: dict[str, Any] = {"candidate": candidate}
    if margin is not None:
        steering["margin"] = margin
    decision = campaign.decision.steered(
        rules, compare_pairs(index), any_of(*stopping), NeededOnly()
    )
    run = campaign.run.with_identity({**campaign.run.identity, "compare": steering})
    steered = Campaign(decision, run)
    return steered, judge


def vacuous_against(campaign: Campaign, candidate: int, margin: float) -> list[tuple[str, float]]:
    """Incumbents (name, score) a candidate scoring the lowest weight on every question would
    pass against: their score, where the backend knows it (simulated, replay), is within the
    margin of the floor."""
    floor = float(campaign.decision.weights.min())
    found = []
    for plan, offset in zip(campaign.run.plans, campaign.run.offsets, strict=True):
        if plan.known_scores is None:
            continue
        scores = plan.known_scores(campaign.decision.weights)
        for local, name in enumerate(plan.models):
            if offset + local != candidate and float(scores[local]) - floor <= margin:
                found.append((name, float(scores[local])))
    return found


def _check_margin_matters(campaign: Campaign, candidate: int, margin: float) -> None:
    """Refuse a margin that makes the gate vacuous at the campaign's scores (``--margin 0.99``
    passed every candidate at round 2)."""
    found = vacuous_against(campaign, candidate, margin)
    if found:
        name, score = min(found, key=lambda item: item[1])
        floor = float(campaign.decision.weights.min())
        raise InputError(
            f"--margin {margin:g} makes the gate vacuous against {name} (score {score:.4f}): "
            f"a candidate scoring {floor:g} on every question would be within the margin and "
            f"pass; give a margin below {score - floor:.4f} (the largest drop you would ship "
            "unnoticed, typically 0.01-0.05)",
            source=campaign.run.settings.source,
        )


def _per_comparison(rule: PairRule) -> PairRule:
    """The rule without Holm's step-down over the adjacent pairs of the ranking: a comparison's
    family is the candidate's pairs, each at its Bonferroni share."""
    if dataclasses.is_dataclass(rule) and any(
        f.name == "step_down" for f in dataclasses.fields(rule)
    ):
        return dataclasses.replace(rule, step_down=False)  # type: ignore[type-var]
    return rule


def comparison(
    campaign: Campaign,
    view: CampaignView,
    decisions: Sequence[PairDecision],
    candidate: str,
    judge: Judge,
    plans: Sequence[np.ndarray] = (),
    stop: Stop | None = None,
    meanings: Mapping[int, str] | None = None,
) -> Comparison:
    """compare's verdicts for summary.json. Per incumbent, ``trials`` is both models' trials at
    the end of the run and ``trials_at_decision`` their trials when the verdict was reached
    (the rounds' ``plans`` up to it); they differ when the run went on for other pairs.
    ``stopped`` says why sampling ended (the run's stop); ``meanings`` words the exit code
    (:data:`adaptive_eval.outputs.presentation.COMPARE_EXIT_MEANING`, which the pages share)."""
    index = campaign.names.index(candidate)
    found = judge(decisions)
    rows = []
    for verdict in found:
        pair = [index, verdict.incumbent]
        row: dict[str, Any] = {
            "incumbent": campaign.names[verdict.incumbent],
            "decision": verdict.decision,
            "z": float(verdict.z),
            "boundary": None if verdict.boundary is None else float(verdict.boundary),
            "decided_at_round": verdict.look,
            "trials_at_decision": None
            if verdict.look is None or not plans
            else int(sum(plan[pair].sum() for plan in plans[: verdict.look])),
            "trials": int(view.trials[pair].sum()),
        }
        if verdict.decision == "undecided" and verdict.boundary is None and judge.margin is None:
            row["boundary_at_cap"] = boundary_at_cap(judge.rules, view, index, verdict.incumbent)
        if verdict.reason is not None:
            row["reason"] = verdict.reason
        rows.append(row)
    code = exit_code([v.decision for v in found])
    return Comparison(
        candidate=candidate,
        margin=judge.margin,
        verdicts=[CompareVerdict.model_validate(row) for row in rows],
        exit_code=code,
        meaning=(meanings or {}).get(code, ""),
        stopped=None if stop is None else stop.detail,
    )
