"""adaptive-eval as Inspect's early stopping (``pip install 'adaptive-eval[inspect]'``).

``Task(..., early_stopping=adaptive_stopping("my-campaign"))``; ``retry(LOG_DIR)`` resumes a
campaign's evals together from their logs: docs/inspect.md.
"""

from adaptive_eval.inspect.bridge import AdaptiveStopping, adaptive_stopping
from adaptive_eval.inspect.resume import retry

__all__ = ["AdaptiveStopping", "adaptive_stopping", "retry"]
