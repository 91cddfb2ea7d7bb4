"""adaptive-eval: sequential adaptive sampling for Bayesian LLM evaluation.

The public API is small on purpose: the statistics kernels live in
:mod:`adaptive_eval.stats`, campaigns are built from YAML by :mod:`adaptive_eval.campaign.build`
and run by :class:`adaptive_eval.control.controller.Controller`.

``bayes`` is loaded on first use, so that the console script's watcher (and its Ctrl-C
handling) starts before numpy and scipy load.
"""

from typing import Any

__all__ = ["__version__", "bayes"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "bayes":
        from adaptive_eval.stats import bayes

        return bayes
    raise AttributeError(f"module 'adaptive_eval' has no attribute {name!r}")
