"""Rules that settle an adjacent pair of the ranking."""

from __future__ import annotations

from dataclasses import dataclass

from adaptive_eval.policy import CampaignView, PairRule
from adaptive_eval.registry import pair_rules
from adaptive_eval.stats import z_threshold
from adaptive_eval.types import PairDecision


@dataclass(frozen=True)
class ZRank:
    """The paper's rule: a > b once z = |mu_a - mu_b| / sqrt(s_a^2 + s_b^2) >= z_c.

    ``z_c = Phi^-1(confidence)``. Checked after every round, the first crossing is an optional
    stopping test whose error rate exceeds ``1 - confidence``; ``looks`` > 1 applies a
    Bonferroni bound over that many looks (``z_c = Phi^-1(1 - (1 - confidence) / looks)``),
    which keeps the realised error at or below nominal for up to ``looks`` checks
    (see ``benchmarks/error_rate.py``).
    """

    confidence: float | None = None
    looks: int = 1

    def threshold(self, view: CampaignView) -> float:
        confidence = self.confidence if self.confidence is not None else view.confidence
        return float(z_threshold(1 - (1 - confidence) / self.looks))

    def __call__(self, view: CampaignView, a: int, b: int, z: float) -> PairDecision | None:
        if z >= self.threshold(view):
            return PairDecision.resolved(a, b, z, bool(view.mu[a] >= view.mu[b]), "z_rank")
        return None


@dataclass(frozen=True)
class Rope:
    """Practical equivalence: the credible interval of mu_a - mu_b lies inside +-epsilon.

    With d = mu_a - mu_b and s = sqrt(s_a^2 + s_b^2), the pair is equivalent when
    |d| + Phi^-1(confidence) * s <= epsilon (two one-sided tests at ``confidence``).
    """

    epsilon: float
    confidence: float | None = None

    def __call__(self, view: CampaignView, a: int, b: int, z: float) -> PairDecision | None:
        confidence = self.confidence if self.confidence is not None else view.confidence
        spread = float(view.sigma[a] ** 2 + view.sigma[b] ** 2) ** 0.5
        gap = abs(float(view.mu[a] - view.mu[b]))
        if gap + float(z_threshold(confidence)) * spread <= self.epsilon:
            return PairDecision.equivalent(a, b, z, "rope")
        return None


@pair_rules.register("z_rank")
def z_rank(confidence: float | None = None, looks: int = 1) -> PairRule:
    if confidence is not None and not 0.5 < confidence < 1:
        raise ValueError(f"confidence must be in (0.5, 1), got {confidence}")
    if looks < 1:
        raise ValueError(f"looks must be >= 1, got {looks}")
    return ZRank(confidence, looks)


@pair_rules.register("rope")
def rope(epsilon: float, confidence: float | None = None) -> PairRule:
    if epsilon < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    return Rope(epsilon, confidence)
