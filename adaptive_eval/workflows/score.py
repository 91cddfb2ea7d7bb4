"""``adaptive-eval score FILE.npz``: score a recorded outcome tensor offline.

The unbiased score leads, as in every other output, over every recorded trial: an export's
``recorded`` (ragged, ``-1`` where a trial was not drawn) unless ``--first-n`` asks for its
dense ``outcomes``; the first line says which trials were scored. Bayes@N, avg and pass@k follow.

The score's interval depends on how the trials were sampled. An export of a run
(``adaptive-eval export``: ``recorded`` and ``trials`` beside ``outcomes``) holds trials a
campaign chose to draw as it looked at their results, so a fixed-sample interval would cover the
truth less often than it says: its score gets the run's own anytime-valid confidence sequence
(:mod:`adaptive_eval.stats.intervals`; the same numbers as the run's summary.json for a ranking
campaign under the uniform prior), which holds however the campaign stopped. Any other tensor
is taken as a fixed-N sample and gets the normal interval, labelled as valid for a fixed N only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from adaptive_eval.base.errors import InputError
from adaptive_eval.inputs.npz import NpzFile, check_categories

#: ``score --json``'s version (2: the unbiased score leads; Bayes@N as ``bayes_*`` with the old
#: ``mu``, ``sigma``, ``ci_low``, ``ci_high`` kept beside it; ``trials`` says which were scored.
#: 3: the score's own interval ``score_low``, ``score_high``; Bayes@N's credible interval only as
#: ``bayes_low``, ``bayes_high``: ``ci_low``, ``ci_high`` beside ``score`` were taken for the
#: score's interval, which they are not; ``intervals`` says what each is; added since, keys
#: only: ``sampling`` (how the trials were drawn) and ``interval``, the kind of ``score_low``,
#: ``score_high``: ``anytime`` for an export's adaptively sampled trials, else ``normal``).
SCORE_SCHEMA_VERSION = 3
#: How the trials of a file were sampled (``sampling`` in ``score --json``).
ADAPTIVE, FIXED = "adaptive", "fixed"


def score_tensor(
    outcomes: np.ndarray,
    names: Sequence[str],
    weights: np.ndarray,
    prior: np.ndarray | None,
    confidence: float,
    ks: Sequence[int],
    *,
    dense: np.ndarray | None = None,
    which: str = "all trials",
    sampling: str = FIXED,
) -> dict[str, Any]:
    """The unbiased score of a recorded (L, M, N) tensor first, then avg@N, Bayes@N and
    Pass@k. ``outcomes`` may be ragged (``-1`` where a trial was not sampled, as export's
    ``recorded``): every recorded trial counts. Pass@k needs the same N in every cell: it is
    computed on ``dense`` (default ``outcomes``).

    The score is the mean over questions of each question's observed mean (what a campaign's
    summary leads with, and ranks by); its rank groups are the models whose scores are within
    ``z_{(1+c)/2}`` standard errors of each other. Bayes@N (uniform prior, or ``prior``)
    follows for reference, with its credible interval under ``bayes_low``, ``bayes_high`` in the
    JSON only. The score's interval ``score_low``, ``score_high``: with ``sampling`` ``fixed``
    (a tensor whose N was set before its trials were seen) ``score +- z se``, ``z`` the
    two-sided normal quantile at the confidence; with ``adaptive`` (a campaign's trials, drawn
    as it looked at their results) the anytime-valid confidence sequence a ranking campaign
    reports, which holds however the campaign stopped. Both within the weights' range.
    """
    from adaptive_eval import stats
    from adaptive_eval.stats.intervals import IntervalDesign, score_intervals
    from adaptive_eval.stats.sequential import empirical_estimate

    num_categories = len(weights)
    counts = np.zeros((*outcomes.shape[:2], num_categories), dtype=np.int64)
    for k in range(num_categories):
        counts[..., k] = (outcomes == k).sum(axis=2)
    n0 = stats.prior_counts(None, outcomes.shape[1], num_categories)
    if prior is not None:
        n0 = stats.counts_from_outcomes(prior, num_categories).astype(np.float64) + 1.0
    nu = counts + n0
    score, score_se = empirical_estimate(counts, nu, weights)
    mu, sigma = stats.posterior_moments(nu, weights)
    low, high = stats.credible_interval(mu, sigma, confidence)
    z_two = NormalDist().inv_cdf((1 + confidence) / 2)
    if sampling == ADAPTIVE:
        anytime = score_intervals(counts, nu, weights, IntervalDesign(confidence))
        score_low, score_high = anytime.low, anytime.high
        interval = (
            f"score_low, score_high: the score's {confidence:g} anytime-valid confidence "
            "sequence (the trials were sampled adaptively, by a campaign that looked at their "
            "results: it holds however the campaign stopped, as the run's own interval does; a "
            "fixed-sample score +- z se would cover the truth less often than it says)"
        )
    else:
        score_low = np.clip(score - z_two * score_se, weights.min(), weights.max())
        score_high = np.clip(score + z_two * score_se, weights.min(), weights.max())
        interval = (
            f"score_low, score_high: the score's {confidence:g} interval, score +- "
            f"{z_two:.2f} score_se (normal), valid for a fixed N only: trials whose number was "
            "set before any was seen (for a campaign's trials, score its export: the anytime "
            "interval)"
        )
    trials = counts.sum(axis=2)
    avg = (counts @ weights).sum(axis=1) / np.maximum(trials.sum(axis=1), 1)
    dense = outcomes if dense is None else dense
    correct = weights[np.clip(dense, 0, None)] == weights.max()
    ranks = stats.rank_with_ties(score, score_se, stats.z_threshold(confidence))
    plain = stats.rank_no_ties(score)
    # A row per model, best first: its name, then these per-model columns in this order (the
    # JSON's), then Bayes@N's mean and sd again under their version-1 names, then Pass@k.
    columns: tuple[tuple[str, Callable[[Any], Any], np.ndarray], ...] = (
        ("rank", int, ranks),
        ("rank_no_ties", int, plain),
        ("score", float, score),
        ("score_se", float, score_se),
        ("score_low", float, score_low),
        ("score_high", float, score_high),
        ("trials", int, trials.sum(axis=1)),
        ("avg@N", float, avg),
        ("bayes_mu", float, mu),
        ("bayes_sigma", float, sigma),
        ("bayes_low", float, low),
        ("bayes_high", float, high),
    )
    rows = []
    for i in np.argsort(-score, kind="stable"):
        row: dict[str, Any] = {"name": names[i]}
        row.update((key, cast(values[i])) for key, cast, values in columns)
        row.update(mu=row["bayes_mu"], sigma=row["bayes_sigma"])
        row.update((f"pass@{k}", float(stats.pass_at_k(correct[i], k))) for k in ks)
        rows.append(row)
    return {
        "schema_version": SCORE_SCHEMA_VERSION,
        "trials": which,
        "trials_per_question": int(dense.shape[2]),
        "confidence": confidence,
        "statistic": "score: the mean over questions of each question's observed mean "
        "(unbiased); rank groups: adjacent scores within z_c standard errors share a rank "
        f"(z_c = {stats.z_threshold(confidence):.2f}, the one-sided normal quantile at c)",
        "sampling": sampling,
        "interval": "anytime" if sampling == ADAPTIVE else "normal",
        "intervals": f"{interval}; bayes_low, bayes_high: Bayes@N's {confidence:g} "
        "credible interval, for reference only (not the score's: it covers the truth less "
        "often than stated); mu, sigma: Bayes@N's, as bayes_mu, bayes_sigma",
        "prior": "uniform" if prior is None else f"R0 with {prior.shape[-1]} trials",
        "models": rows,
    }


def score_npz(
    path: Path,
    *,
    key: str = "outcomes",
    weights: Sequence[float] | None = None,
    prior_path: Path | None = None,
    prior_key: str = "outcomes",
    confidence: float = 0.95,
    ks: Sequence[int] = (1,),
    first_n: bool = False,
) -> dict[str, Any]:
    """Read, check and score ``path`` (see :func:`score_tensor`); errors name file and array."""
    file = NpzFile(path)
    outcomes = file.get(key, ndim=3, kind="i").astype(np.int64)
    num_models, _, num_trials = outcomes.shape
    names = file.names("models", num_models, "model-")
    w = np.asarray([0.0, 1.0] if weights is None else list(weights), dtype=np.float64)
    check_categories(outcomes, len(w), file=file, name=key)
    if len(w) < 2 or w.max() == w.min():
        raise InputError(
            f"--weights {','.join(f'{x:g}' for x in w)!r}: give at least two different weights "
            "(every model would score the same)"
        )
    scored = outcomes
    which = f"all trials ({key!r}, N = {num_trials} in every cell)"
    if key == "outcomes" and file.has("recorded") and not first_n:
        # An export: 'outcomes' is the dense prefix; 'recorded' holds every trial (-1: none).
        scored = file.get("recorded", ndim=3, kind="i").astype(np.int64)
        if scored.shape[:2] != outcomes.shape[:2] or scored.shape[2] < num_trials:
            raise file.error(
                "recorded", f"shape {scored.shape} does not extend outcomes {outcomes.shape}"
            )
        if scored.size and (int(scored.min()) < -1 or int(scored.max()) >= len(w)):
            raise file.error("recorded", f"holds values outside -1..{len(w) - 1} (-1: not sampled)")
        which = "all recorded trials ('recorded', ragged)"
    elif file.has("recorded") and key == "outcomes":
        which = f"the first N = {num_trials} trials of every cell ('outcomes', --first-n)"
    if weights is not None and outcomes.size and int(scored.max()) < len(w) - 1:
        raise InputError(
            f"--weights gives {len(w)} categories (0..{len(w) - 1}) but {key} only uses "
            f"0..{int(scored.max())}; give one weight per category of the data"
        )
    prior = None
    if prior_path is not None:
        prior_file = NpzFile(prior_path)
        prior = prior_file.get(prior_key, ndim=(2, 3), kind="i").astype(np.int64)
        check_categories(prior, len(w), file=prior_file, name=prior_key)
        if prior.shape[-2] != outcomes.shape[1]:
            raise prior_file.error(
                prior_key, f"has {prior.shape[-2]} questions, the outcomes have {outcomes.shape[1]}"
            )
        if prior.ndim == 3 and prior.shape[0] != num_models:
            raise prior_file.error(
                prior_key, f"has {prior.shape[0]} models, the outcomes have {num_models}"
            )
    bad = [k for k in ks if not 1 <= k <= num_trials]
    if bad:
        raise InputError(f"--k {bad[0]} is outside 1..N = 1..{num_trials}")
    if not 0.5 < confidence < 1:
        raise InputError(f"--confidence must be in (0.5, 1), got {confidence}")
    # Only a run's export holds 'recorded': trials a campaign drew as it looked at them.
    sampling = ADAPTIVE if file.has("recorded") else FIXED
    return score_tensor(
        scored, names, w, prior, confidence, ks, dense=outcomes, which=which, sampling=sampling
    )


def render_score(result: dict[str, Any], ks: Sequence[int]) -> str:
    """The console table: the score first with its interval, no credible interval; the last
    line says which interval it is (how the trials were sampled)."""
    from adaptive_eval import stats

    names = [row["name"] for row in result["models"]]
    width = max(24, *(len(name) for name in names))
    z = float(stats.z_threshold(result["confidence"]))
    level = f"{100 * result['confidence']:g}%"
    head = (
        f"{'rank':>4} {'(no ties)':>9}  {'model':<{width}} {'score':>7} {level + ' interval':>18} "
        f"{'se':>7} {'trials':>7} {'avg':>7} {'Bayes@N':>8}"
        + "".join(f" {'pass@' + str(k):>8}" for k in ks)
    )
    lines = [
        f"score of {result['trials']}: the mean over questions of each question's observed "
        f"mean (unbiased); models within z = {z:.2f} se share a rank; Bayes@N "
        f"({result['prior']} prior) for reference; pass@k over the first N = "
        f"{result['trials_per_question']}",
        head,
    ]
    for row in result["models"]:
        bounds = f"[{row['score_low']:.4f}, {row['score_high']:.4f}]"
        lines.append(
            f"{row['rank']:>4} {row['rank_no_ties']:>9}  {row['name']:<{width}} "
            f"{row['score']:7.4f} {bounds:>18} {row['score_se']:7.4f} {row['trials']:>7} "
            f"{row['avg@N']:7.4f} {row['bayes_mu']:8.4f}"
            + "".join(f" {row[f'pass@{k}']:8.4f}" for k in ks)
        )
    if result.get("sampling") == ADAPTIVE:
        lines.append(
            f"interval: the {level} anytime-valid confidence sequence (a ranking run's own): the "
            "trials were sampled adaptively (a campaign chose them as it saw their results), "
            "and it holds however the campaign stopped"
        )
    else:
        lines.append(
            f"interval: score +- {NormalDist().inv_cdf((1 + result['confidence']) / 2):.2f} se "
            "(normal), valid for a fixed N only: trials whose number was set before any was "
            "seen; a campaign's trials: score its export (adaptive-eval export DIR)"
        )
    return "\n".join(lines)


__all__ = ["SCORE_SCHEMA_VERSION", "render_score", "score_npz", "score_tensor"]
