"""``adaptive-eval compare CONFIG --candidate NAME --out DIR``: a checkpoint against incumbents.

The config lists the candidate and its incumbents as usual (incumbents typically as ``replay``
entries of their recorded trials, so only the candidate is sampled; any backend works). Only the
pairs (candidate, incumbent) are settled, never incumbent against incumbent, and the campaign
stops as soon as every one of them is settled (or at the budget / cap).

Each pair is settled by the campaign's own pair rules (``campaign.pair_rules``, whatever the config
chose: by default the error-controlled ``group_sequential``), asked about (candidate, incumbent)
on the campaign's view. Only models still in an undecided pair with
the candidate (and the candidate) get trials.

Exit codes (:func:`exit_code`): 0 the candidate is not worse than any incumbent (better or
equivalent within the rope), 3 worse than at least one (a regression), 4 some pair undecided at
the budget or cap; 2 bad input, 1 failure. ``summary.json`` gains ``comparison``:
``{candidate, verdicts: [{incumbent, decision, z, trials}], exit_code}``, with ``decision`` one
of ``better``, ``worse``, ``equivalent``, ``undecided`` (the candidate's side).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from adaptive_eval.campaign import Campaign, budget_rule, build_campaign, fingerprint_of
from adaptive_eval.config import CampaignConfig
from adaptive_eval.errors import InputError
from adaptive_eval.policy import CampaignView, PairRule, StoppingRule, any_of, even_plan
from adaptive_eval.types import PairDecision, Stop, StopReason, Verdict

EXIT_NOT_WORSE = 0
EXIT_REGRESSION = 3
EXIT_UNDECIDED = 4


def verdicts(
    view: CampaignView, rules: tuple[PairRule, ...], candidate: int
) -> list[tuple[int, str, float]]:
    """(incumbent, the candidate's verdict, z) for every incumbent, by the campaign's rules.

    The rules see the whole campaign view with the real model indices, so a sequential rule
    keeps one state per (candidate, incumbent) pair, shared with the controller's own calls in
    the same round; under ``error_control: ranking`` each of the L - 1 comparisons gets
    ``(1 - confidence) / (L - 1)``, so the CI gate's verdicts hold together.
    """
    for rule in rules:
        rule.observe(view)
    young = view.below_min()
    out = []
    for incumbent in range(view.num_models):
        if incumbent == candidate:
            continue
        decision = None
        if not (young[candidate] or young[incumbent]):
            z = view.pair_z(candidate, incumbent)
            decision = next(
                (d for d in (rule(view, candidate, incumbent, z) for rule in rules) if d), None
            )
        if decision is None:
            gap, spread = view.pair_stat(candidate, incumbent)
            z = abs(gap) / spread if spread > 0 else 0.0
            decision = PairDecision.undecided(candidate, incumbent, z)
        out.append((incumbent, _side(decision, candidate), decision.z))
    return out


def _side(decision: PairDecision, candidate: int) -> str:
    """The verdict seen from the candidate."""
    if decision.verdict is Verdict.UNDECIDED:
        return "undecided"
    if decision.verdict is Verdict.EQUIVALENT:
        return "equivalent"
    winner = decision.a if decision.verdict is Verdict.A_GT_B else decision.b
    return "better" if winner == candidate else "worse"


def exit_code(decisions: list[str]) -> int:
    if "worse" in decisions:
        return EXIT_REGRESSION
    if "undecided" in decisions:
        return EXIT_UNDECIDED
    return EXIT_NOT_WORSE


class CandidatePlaced(StoppingRule):
    """Stop once every (candidate, incumbent) pair is settled; need only their models."""

    name = "candidate_placed"

    def __init__(self, rules: tuple[PairRule, ...], candidate: int) -> None:
        self.rules = rules
        self.candidate = candidate

    def _should_stop(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> Stop | None:
        found = verdicts(view, self.rules, self.candidate)
        if all(v != "undecided" for _, v, _ in found):
            return Stop(StopReason.GOAL_MET, "every pair with the candidate is settled")
        return None

    def needs(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> np.ndarray | None:
        mask = np.zeros(view.num_models, dtype=bool)
        for incumbent, verdict, _ in verdicts(view, self.rules, self.candidate):
            if verdict == "undecided":
                mask[[incumbent, self.candidate]] = True
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
    ) -> np.ndarray:
        chosen = needs & (view.planned.min(axis=1) < view.capacity)
        return even_plan(view, chosen, round_trials, None)


def compare_campaign(config: CampaignConfig, candidate: str) -> Campaign:
    """The config's campaign, steered to place ``candidate`` among the other models."""
    campaign = build_campaign(config)
    if candidate not in campaign.names:
        raise InputError(
            f"--candidate {candidate!r} is not a model of this config "
            f"(models: {', '.join(campaign.names)})",
            source=config.source,
        )
    if campaign.num_models < 2:
        raise InputError("compare needs at least one incumbent beside the candidate")
    index = campaign.names.index(candidate)
    rules: list[StoppingRule] = [CandidatePlaced(campaign.pair_rules, index)]
    budget = budget_rule(config)
    if budget is not None:
        rules.append(budget)
    identity = {**campaign.identity, "compare": {"candidate": candidate}}
    fingerprint = fingerprint_of(identity)
    return dataclasses.replace(
        campaign,
        pair_rules=tuple(_per_comparison(rule) for rule in campaign.pair_rules),
        stopping=any_of(*rules),
        allocator=NeededOnly(),
        identity=identity,
        fingerprint=fingerprint,
    )


def _per_comparison(rule: PairRule) -> PairRule:
    """The rule without Holm's step-down over the adjacent pairs of the ranking: a comparison's
    family is the candidate's pairs, each at its Bonferroni share."""
    if dataclasses.is_dataclass(rule) and any(
        f.name == "step_down" for f in dataclasses.fields(rule)
    ):
        return dataclasses.replace(rule, step_down=False)  # type: ignore[type-var]
    return rule


def comparison(campaign: Campaign, view: CampaignView, candidate: str) -> dict[str, Any]:
    index = campaign.names.index(candidate)
    found = verdicts(view, campaign.pair_rules, index)
    rows = [
        {
            "incumbent": campaign.names[incumbent],
            "decision": verdict,
            "z": float(z),
            "trials": int(view.trials[[index, incumbent]].sum()),
        }
        for incumbent, verdict, z in found
    ]
    return {
        "candidate": candidate,
        "verdicts": rows,
        "exit_code": exit_code([verdict for _, verdict, _ in found]),
    }


def run_compare(
    config: CampaignConfig,
    candidate: str,
    run_dir: Path,
    *,
    dispatcher: Callable[[Campaign], Any] | None = None,
    console: IO[str] | None = None,
    quiet: bool = True,
) -> dict[str, Any]:
    """Run (or resume) the comparison in ``run_dir``; write summary.json and the reports."""
    from adaptive_eval.controller import Controller
    from adaptive_eval.logs import open_event_log
    from adaptive_eval.report import write_outputs
    from adaptive_eval.runner import build_summary, open_run_dir

    campaign = compare_campaign(config, candidate)
    store, campaign_id, resumed = open_run_dir(campaign, run_dir)
    log, handle = open_event_log(run_dir, campaign_id, "warning" if quiet else "info", console)
    try:
        if dispatcher is None:
            from adaptive_eval.dispatch import Dispatcher, init_ray

            execution = config.execution
            init_ray(execution.ray_address, execution.num_cpus)
            port: Any = Dispatcher(
                campaign.plans,
                campaign.offsets,
                in_flight_per_worker=execution.in_flight_per_worker,
                max_batch_retries=execution.max_batch_retries,
                shared_slots=execution.gpu_slots,
            )
        else:
            port = dispatcher(campaign)
        from adaptive_eval.library import attach

        port = attach(campaign, store, port, campaign_id)  # the trial library, if any
        controller = Controller(campaign, store, port, log)
        try:
            controller.run()
        finally:
            if hasattr(port, "shutdown"):
                port.shutdown()
        result = comparison(campaign, controller.view(), candidate)
        summary = build_summary(
            campaign, controller, campaign_id, extra={"resumed": resumed, "comparison": result}
        )
        write_outputs(run_dir, summary)
        return summary
    finally:
        store.close()
        handle.close()


def render(result: dict[str, Any]) -> str:
    lines = [f"candidate {result['candidate']}:"]
    for row in result["verdicts"]:
        lines.append(
            f"  vs {row['incumbent']}: {row['decision']} (z = {row['z']:.2f}, "
            f"{row['trials']} trials)"
        )
    meaning = {0: "not worse than any incumbent", 3: "a regression", 4: "undecided"}
    lines.append(f"exit code {result['exit_code']}: {meaning[result['exit_code']]}")
    return "\n".join(lines)
