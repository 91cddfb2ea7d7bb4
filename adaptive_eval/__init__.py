"""adaptive-eval: sequential adaptive sampling for Bayesian LLM evaluation.

The public API is small on purpose: the statistics kernels live in
:mod:`adaptive_eval.stats`, campaigns are built from YAML by :mod:`adaptive_eval.campaign`
and run by :class:`adaptive_eval.controller.Controller`.
"""

from adaptive_eval.stats import bayes

__all__ = ["__version__", "bayes"]
__version__ = "0.1.0"
