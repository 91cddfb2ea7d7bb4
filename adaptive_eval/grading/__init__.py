"""Grading: answers (math-verify with a hard timeout), base signals, rubric schemata, graders.

>>> from adaptive_eval.grading import SCHEMATA, build_grader
>>> SCHEMATA["format_aware"].default_weights
(0.0, 0.0, 1.0, 2.0, 3.0)
>>> build_grader("exact", extract="none").num_categories
2
"""

from adaptive_eval.grading.answers import extract_boxed, is_grader_failure, math_equal
from adaptive_eval.grading.graders import (
    ExactGrader,
    Graded,
    Grader,
    MathGrader,
    RegexGrader,
    VerifierFn,
    build_grader,
    grader,
    graders,
)
from adaptive_eval.grading.schemata import (
    SCHEMATA,
    MissingSignalError,
    Schema,
    Thresholds,
    get_schema,
    schemata,
)
from adaptive_eval.grading.signals import (
    DEFAULT_MAX_TOKENS_REF,
    GeneratedSample,
    Signals,
    base_signals,
    bits_per_token,
    compute_signals,
)

__all__ = [
    "DEFAULT_MAX_TOKENS_REF",
    "SCHEMATA",
    "ExactGrader",
    "GeneratedSample",
    "Graded",
    "Grader",
    "MathGrader",
    "MissingSignalError",
    "RegexGrader",
    "Schema",
    "Signals",
    "Thresholds",
    "VerifierFn",
    "base_signals",
    "bits_per_token",
    "build_grader",
    "compute_signals",
    "extract_boxed",
    "get_schema",
    "grader",
    "graders",
    "is_grader_failure",
    "math_equal",
    "schemata",
]
