"""The array types the statistics modules are written in, named once for all of them.

``FloatArray`` holds real values (scores, probabilities, variances), ``IntArray`` counts and
indices (category counts, trial counts, pairs of model indices). Annotations only: nothing here
computes.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["FloatArray", "IntArray"]

#: Real values: scores, probabilities, variances (float64).
FloatArray = NDArray[np.float64]
#: Counts and indices (int64).
IntArray = NDArray[np.int64]
