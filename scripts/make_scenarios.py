"""Generate the shipped simulated scenarios (deterministic; re-running rewrites identical files).

    python scripts/make_scenarios.py

``configs/scenarios/llm_mimics.npz``: the paper's 11 "LLM mimics" (Section 2.8, Table 2): M = 30
questions, binary outcomes, per-question success probabilities drawn from Beta(6 t, 6 (1 - t))
around each model's true score t, then shifted in logit space so that their mean is exactly t.
Models 4 and 5 share t = 0.3642 (a true tie) with different per-question probabilities.
Completion tokens per (model, question) are log-normal around 15,400 (the paper's mean), so the
token accounting has realistic spread.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit, logit

TRUE_SCORES = [
    0.2332,
    0.2545,
    0.3604,
    0.3642,
    0.3642,
    0.4466,
    0.5418,
    0.5276,
    0.608,
    0.6213,
    0.7327,
]
NUM_QUESTIONS = 30
CONCENTRATION = 6.0
SEED = 20251122


def matched_probabilities(rng: np.random.Generator, target: float, size: int) -> np.ndarray:
    """Beta draws around ``target``, shifted in logit space to have mean exactly ``target``."""
    raw = np.clip(rng.beta(CONCENTRATION * target, CONCENTRATION * (1 - target), size), 0.01, 0.99)
    shift = brentq(lambda s: expit(logit(raw) + s).mean() - target, -10, 10, xtol=1e-14)
    return np.asarray(expit(logit(raw) + shift))


def llm_mimics(path: Path) -> None:
    rng = np.random.default_rng(SEED)
    success = np.stack([matched_probabilities(rng, t, NUM_QUESTIONS) for t in TRUE_SCORES])
    probs = np.stack([1 - success, success], axis=2)
    tokens_mean = np.exp(rng.normal(np.log(15_400), 0.5, size=success.shape)).round()
    models = np.array([f"LLM_{i + 1}" for i in range(len(TRUE_SCORES))])
    np.savez_compressed(
        path,
        probs=probs,
        models=models,
        tokens_mean=tokens_mean,
        true_scores=np.array(TRUE_SCORES),
        weights=np.array([0.0, 1.0]),
    )
    print(
        f"wrote {path}: probs {probs.shape}, mean success "
        f"{np.round(success.mean(axis=1), 4).tolist()}"
    )


if __name__ == "__main__":
    here = Path(__file__).resolve().parent.parent / "configs" / "scenarios"
    here.mkdir(parents=True, exist_ok=True)
    llm_mimics(here / "llm_mimics.npz")
