"""Statistics core: Bayes@N posterior, rankings with uncertainty, baseline metrics, agreement.

* :mod:`adaptive_eval.stats.posterior` -- Dirichlet posterior mean/sd of a rubric-weighted
  score (the paper's Algorithm 1, per-question totals allowed), credible intervals, z-scores,
  rankings with ties, avg@N.
* :mod:`adaptive_eval.stats.metrics` -- Pass@k, Pass^k, G-Pass@k_tau, mG-Pass@k.
* :mod:`adaptive_eval.stats.agreement` -- Kendall tau_b, convergence@n, bootstrap.
"""

from adaptive_eval.stats.agreement import (
    bootstrap_columns,
    bootstrap_rows,
    convergence_at_n,
    kendall_tau_b,
    ranking_from_scores,
)
from adaptive_eval.stats.metrics import g_pass_at_k, mg_pass_at_k, pass_at_k, pass_hat_k
from adaptive_eval.stats.posterior import (
    avg_at_n,
    avg_sigma_from_bayes,
    bayes,
    bayes_at_n_moments,
    counts_from_outcomes,
    credible_interval,
    empirical_bayes_prior,
    pairwise_z,
    posterior_moments,
    prior_counts,
    rank_no_ties,
    rank_with_ties,
    ranking_confidence,
    z_threshold,
)

__all__ = [
    "avg_at_n",
    "avg_sigma_from_bayes",
    "bayes",
    "bayes_at_n_moments",
    "bootstrap_columns",
    "bootstrap_rows",
    "convergence_at_n",
    "counts_from_outcomes",
    "credible_interval",
    "empirical_bayes_prior",
    "g_pass_at_k",
    "kendall_tau_b",
    "mg_pass_at_k",
    "pairwise_z",
    "pass_at_k",
    "pass_hat_k",
    "posterior_moments",
    "prior_counts",
    "rank_no_ties",
    "rank_with_ties",
    "ranking_confidence",
    "ranking_from_scores",
    "z_threshold",
]
