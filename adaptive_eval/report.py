"""Outputs of a run: ``summary.json`` (the contract other tools read) and ``report.md``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from adaptive_eval import markdown as md
from adaptive_eval import stats
from adaptive_eval.accounting import Savings
from adaptive_eval.storage import atomic_write
from adaptive_eval.types import PairDecision, Stop

if TYPE_CHECKING:
    from adaptive_eval.store import TrialStore


def summarize(
    *,
    name: str,
    campaign_id: str,
    names: tuple[str, ...],
    mu: np.ndarray,
    sigma: np.ndarray,
    trials: np.ndarray,
    weighted_mean: np.ndarray,
    confidence: float,
    decisions: tuple[PairDecision, ...],
    stop: Stop | None,
    savings: Savings,
    prior_note: str,
    extra: dict[str, Any] | None = None,
    estimate: np.ndarray | None = None,
    estimate_se: np.ndarray | None = None,
    weight_range: tuple[float, float] = (0.0, 1.0),
    decision_rules: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary document. ``trials`` is (L, M); ``weighted_mean`` is each model's avg@n.

    Models are listed in decision order (the unbiased ``estimate``, see
    :mod:`adaptive_eval.stats.sequential`), with the paper's Bayes@N ``mu``/``sigma`` and
    credible interval (clipped to the weight range) and the estimate's frequentist interval.
    ``rank`` is dense over the final pair decisions: a resolved pair steps down a rank, an
    equivalent or undecided one shares it.
    """
    lo_w, hi_w = weight_range
    low, high = (np.clip(x, lo_w, hi_w) for x in stats.credible_interval(mu, sigma, confidence))
    theta = mu if estimate is None else estimate
    theta_se = sigma if estimate_se is None else estimate_se
    f_low, f_high = (
        np.clip(x, lo_w, hi_w) for x in stats.credible_interval(theta, theta_se, confidence)
    )
    order = np.argsort(-theta, kind="stable")
    ranks = _decision_ranks(order, decisions)
    plain = {int(m): k + 1 for k, m in enumerate(order)}
    models = [
        {
            "name": names[i],
            "mu": float(mu[i]),
            "sigma": float(sigma[i]),
            "ci_low": float(low[i]),
            "ci_high": float(high[i]),
            "estimate": float(theta[i]),
            "estimate_se": float(theta_se[i]),
            "estimate_ci_low": float(f_low[i]),
            "estimate_ci_high": float(f_high[i]),
            "trials": int(trials[i].sum()),
            "trials_per_question_min": int(trials[i].min()),
            "trials_per_question_max": int(trials[i].max()),
            "avg": float(weighted_mean[i]),
            "rank": ranks[int(i)],
            "rank_no_ties": plain[int(i)],
        }
        for i in order
    ]
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
    return {
        "name": name,
        "campaign_id": campaign_id,
        "stop_reason": None if stop is None else stop.reason.value,
        "stop_detail": None if stop is None else stop.detail,
        "confidence": confidence,
        "prior": prior_note,
        "trials_used": savings.trials_used,
        "tokens_used": savings.tokens_used,
        "gpu_s_used": savings.gpu_s_used,
        "baseline": baseline,
        "compute_saved": {
            "trials_fraction": savings.trials_fraction,
            "tokens_fraction": savings.tokens_fraction,
            "gpu_fraction": savings.gpu_fraction,
        },
        "decision_rules": decision_rules or {},
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


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def render_markdown(summary: dict[str, Any]) -> str:
    saved = summary["compute_saved"]
    base = summary["baseline"]
    lines = [
        f"# Campaign {md.code(summary['name'])}",
        "",
        f"Stopped: **{summary['stop_reason']}** ({md.text(summary['stop_detail'])}).  ",
        f"Ranking confidence {summary['confidence']}; prior: {md.text(summary['prior'])}.",
        "",
        *_decision_lines(summary.get("decision_rules") or {}),
        "## Ranking",
        "",
        f"| rank (decided) | order | model | Bayes@N mu | sigma | "
        f"{int(100 * summary['confidence'])}% CI | estimate | frequentist CI | avg | trials |",
        "|---:|---:|---|---:|---:|---|---:|---|---:|---:|",
    ]
    for m in summary["models"]:
        estimate = m.get("estimate", m["mu"])
        freq = (
            f"[{m['estimate_ci_low']:.4f}, {m['estimate_ci_high']:.4f}]"
            if "estimate_ci_low" in m
            else ""
        )
        lines.append(
            f"| {m['rank']} | {m['rank_no_ties']} | {md.text(m['name'])} | {m['mu']:.4f} | "
            f"{m['sigma']:.4f} | [{m['ci_low']:.4f}, {m['ci_high']:.4f}] | "
            f"{estimate:.4f} | {freq} | {m['avg']:.4f} | {m['trials']} |"
        )
    comparison = summary.get("comparison")
    if comparison is not None:  # compare settles only the candidate's pairs: show those
        lines += ["", *comparison_lines(comparison)]
    else:
        lines += [
            "",
            "## Adjacent pairs",
            "",
            "| a | b | z | decision | rule | boundary on z | error budget spent | round |",
            "|---|---|---:|---|---|---:|---:|---:|",
        ]
    for p in summary["pairs"] if comparison is None else []:
        lines.append(
            f"| {md.text(p['a'])} | {md.text(p['b'])} | {p['z']:.3f} | {decision_text(p)} | "
            f"{md.text(p['rule'] or '')} | "
            f"{optional(p.get('boundary'), '.3f')} | {optional(p.get('alpha_spent'), '.2e')} | "
            f"{optional(p.get('decided_at_round'))} |"
        )
    tokens = summary["tokens_used"]
    gpu = summary["gpu_s_used"]

    def estimate_of(value: float | None, digits: int) -> str:
        return "n/a" if value is None else f"{value:.{digits}f} (est.)"

    lines += [
        "",
        "## Compute",
        "",
        "| | used | fixed-N baseline | saved |",
        "|---|---:|---:|---:|",
        f"| trials | {summary['trials_used']} | {base['trials']} (N = {base['fixed_n']}) | "
        f"{_pct(saved['trials_fraction'])}{_undecided_note(summary)} |",
        f"| tokens | {'n/a' if tokens is None else tokens} | {estimate_of(base['tokens'], 0)} | "
        f"{_pct(saved['tokens_fraction'])} |",
        f"| GPU-s | {'n/a' if gpu is None else f'{gpu:.1f}'} | {estimate_of(base['gpu_s'], 1)} | "
        f"{_pct(saved['gpu_fraction'])} |",
        "",
    ]
    prefetch = (summary.get("dispatch") or {}).get("prefetch")
    if prefetch and base["trials"]:
        spent = summary["trials_used"] + prefetch["unused"]
        lines += [
            f"Speculative prefetch: {prefetch['sent']} trials sent ahead of the plans, "
            f"{prefetch['used']} of them recorded when a round planned them, "
            f"{prefetch['unused']} never used (generated or in flight at the stop); "
            f"counting those, trials saved: {_pct(1 - spent / base['trials'])}.",
            "",
        ]
    if summary.get("provenance"):
        from adaptive_eval.provenance import markdown

        lines += markdown(summary["provenance"], md.text, md.code)
    return "\n".join(lines)


def optional(value: Any, spec: str = "") -> str:
    """A table cell: the value formatted with ``spec``, or empty where there is none."""
    return "" if value is None else format(value, spec)


def decision_text(pair: dict[str, Any]) -> str:
    """A pair's decision, with the rule's reason where it gave one (e.g. why it is undecided)."""
    reason = pair.get("reason")
    return f"{pair['decision']} ({reason})" if reason else str(pair["decision"])


#: What compare's exit codes say (:mod:`adaptive_eval.compare`).
COMPARE_EXIT_MEANING = {0: "not worse than any incumbent", 3: "a regression", 4: "undecided"}


def comparison_lines(comparison: dict[str, Any]) -> list[str]:
    """compare's verdict for report.md: the candidate, each incumbent's verdict, the exit code."""
    margin = comparison.get("margin")
    code = comparison["exit_code"]
    test = (
        f"non-inferiority with margin {margin} (pass: not worse than the incumbent by more "
        "than the margin; fail: worse by more)"
        if margin is not None
        else "better / worse / equivalent by the campaign's pair rules"
    )
    lines = [
        "## Comparison",
        "",
        f"Candidate **{md.text(comparison['candidate'])}** against {len(comparison['verdicts'])} "
        f"incumbent(s); test: {test}.  ",
        f"Exit code **{code}**: {comparison.get('meaning') or COMPARE_EXIT_MEANING.get(code, '')}.",
        "",
        "| incumbent | verdict | z | boundary on z | round decided | trials (both) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in comparison["verdicts"]:
        lines.append(
            f"| {md.text(row['incumbent'])} | {decision_text(row)} | {row['z']:.3f} | "
            f"{optional(row.get('boundary'), '.3f')} | {optional(row.get('decided_at_round'))} | "
            f"{row['trials']} |"
        )
    return [*lines, ""]


def _decision_lines(rules: dict[str, Any]) -> list[str]:
    """The decision rules' guarantee (and a warning where there is none), for report.md."""
    if not rules:
        return []
    lines = [
        "## Decisions",
        "",
        f"Rules: {md.text(', '.join(rules.get('rules', [])))}; error control: "
        f"**{rules.get('error_control')}** (error budget per adjacent pair "
        f"{rules.get('pair_alpha', 0):.2e}). {rules.get('statistic', '')}  ",
        f"Prior in the test: {rules.get('prior_in_test', '')}",
        "",
    ]
    if rules.get("warning"):
        lines += [f"> **Warning:** {rules['warning']}", ""]
    return lines


def _undecided_note(summary: dict[str, Any]) -> str:
    """Beside "saved X%": a stop that left pairs undecided saved compute, not a settled ranking."""
    undecided = sum(p["decision"] == "undecided" for p in summary["pairs"])
    if not undecided or summary["stop_reason"] is None:
        return ""
    return f" (stopped on {summary['stop_reason']} with {undecided} pair(s) undecided)"


def render_console(summary: dict[str, Any]) -> str:
    """A compact human summary for the terminal."""
    saved = summary["compute_saved"]
    out = [
        f"campaign {summary['name']}: stopped on {summary['stop_reason']} "
        f"({summary['stop_detail']})",
        "",
        f"{'rank':>4} {'(no CI)':>7}  {'model':<24} {'mu':>7} {'CI':>19} {'trials':>7}",
    ]
    for m in summary["models"]:
        out.append(
            f"{m['rank']:>4} {m['rank_no_ties']:>7}  {m['name']:<24} {m['mu']:7.4f} "
            f"[{m['ci_low']:.4f}, {m['ci_high']:.4f}] {m['trials']:>7}"
        )
    out.append("")
    for p in summary["pairs"]:
        out.append(f"  {p['a']} vs {p['b']}: {decision_text(p)} (z = {p['z']:.2f})")
    warning = (summary.get("decision_rules") or {}).get("warning")
    if warning:
        out += ["", f"warning: {warning}"]
    out += [
        "",
        f"trials used {summary['trials_used']} vs fixed N = "
        f"{summary['baseline']['fixed_n']}: {summary['baseline']['trials']} "
        f"-> saved {_pct(saved['trials_fraction'])} of trials"
        + (
            f", {_pct(saved['tokens_fraction'])} of tokens"
            if saved["tokens_fraction"] is not None
            else ""
        )
        + _undecided_note(summary),
    ]
    return "\n".join(out)


def write_outputs(run_dir: Path, summary: dict[str, Any], store: TrialStore | None = None) -> None:
    """summary.json, report.md and report.html; adds the run's provenance to ``summary``.
    ``store``: the run's store where the caller holds it open."""
    from adaptive_eval.provenance import collect
    from adaptive_eval.report_html import write_html

    summary["provenance"] = collect(run_dir, store)
    library = summary["provenance"].get("library")
    if library is not None and summary["baseline"]["trials"]:
        # Compute saved counting only what this run sampled (reused trials cost nothing now).
        library["saved_fraction"] = 1 - library["sampled"] / summary["baseline"]["trials"]
    atomic_write(run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    atomic_write(run_dir / "report.md", render_markdown(summary))
    write_html(run_dir, summary, summary["provenance"], store=store)
