"""adaptive-eval as Inspect's early stopping (``pip install 'adaptive-eval[inspect]'``).

``Task(..., early_stopping=adaptive_stopping("my-campaign"))``: docs/inspect.md.
"""

from adaptive_eval.inspect.bridge import AdaptiveStopping, adaptive_stopping

__all__ = ["AdaptiveStopping", "adaptive_stopping"]
