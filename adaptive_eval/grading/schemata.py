r"""The twelve categorical rubric schemata of the paper (Appendix D, Tables 5 and 6).

One concept, kept whole (~630 lines): the twelve schemata are one table, read side by side.

A schema maps one attempt's :class:`~adaptive_eval.grading.signals.Signals` to a category in
``0..C`` through the paper's *rubric variables* (its Table 5):

============== ==================================================================================
invalid        ``repeated_pattern`` or verifier C (off-task) >= ``c_invalid`` (0.5); always 0
correct/wrong  ``is_correct`` / not ``is_correct``
high_conf      ``completion_bpt <= tau_high``; low_conf is its complement
wrong_high_conf wrong and ``completion_bpt <= tau_low_wrong``
ood / ind      ``prompt_bpt >= tau_prompt`` / ``<``
economical     ``token_ratio <= len_p33``; moderate ``<= len_p66``; verbose ``> len_p66``
boxed          ``has_box``
A_high         verifier A (correct) >= ``a_high`` (0.6)
============== ==================================================================================

The paper derives the thresholds from percentiles of *all* the data after the fact. A sequential
controller must fix them before sampling so that a trial's category never changes later: they live
in a frozen :class:`Thresholds`, given in the config or derived from an earlier run with
:meth:`Thresholds.from_run` (same percentiles as the paper).

Where the paper's tables leave a case open, the resolution is documented on the schema (``notes``):
e.g. *Conf-Wrong Penalty* puts every wrong attempt that is not ``wrong_high_conf`` in its
"wrong and low_conf" category, so the categories cover every attempt. The paper gives a weight
vector only for *Format Aware* (``[0, 0, 1, 2, 3]``); the other default weights are ours, chosen
from the paper's one-line description of each schema (see each schema's ``notes``); override them in
the rubric when needed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from adaptive_eval.base.errors import InputError
from adaptive_eval.config.registry import Registry
from adaptive_eval.grading.signals import Signals


class MissingSignalError(ValueError):
    """A schema needs a signal the attempt does not have (log-probs, verifier probabilities)."""


_THRESHOLD_DOCS = {
    "tau_high": "completion_bpt at or below it is high_conf (paper: 40th pct of completion_bpt)",
    "tau_low_wrong": "wrong with completion_bpt at or below it is wrong_high_conf "
    "(paper: 60th pct of completion_bpt among wrong attempts)",
    "tau_prompt": "prompt_bpt at or above it is ood (paper: 90th pct of prompt_bpt)",
    "len_p33": "token_ratio at or below it is economical (paper: 33rd pct of token_ratio)",
    "len_p66": "token_ratio above it is verbose (paper: 66th pct of token_ratio)",
    "corr_p33": "correct with completion_bpt at or below it is high confidence "
    "(paper: 33rd pct of completion_bpt among correct attempts)",
    "corr_p66": "correct with completion_bpt above it is low confidence "
    "(paper: 66th pct of completion_bpt among correct attempts)",
    "a_high": "verifier A at or above it is A_high (paper: 0.6)",
    "c_invalid": "verifier C at or above it makes the attempt invalid (paper: 0.5)",
}


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=float), q))


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Rubric thresholds, named as in the paper's Table 5; fixed before sampling.

    ``None`` means "not set": only schemata that use a threshold require it
    (:attr:`Schema.thresholds`). bpt values are bits per token, ``len_*`` token ratios.
    """

    tau_high: float | None = None
    tau_low_wrong: float | None = None
    tau_prompt: float | None = None
    len_p33: float | None = None
    len_p66: float | None = None
    corr_p33: float | None = None
    corr_p66: float | None = None
    a_high: float = 0.6
    c_invalid: float = 0.5

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InputError(f"must be a number, got {value!r}", field=f"thresholds.{f.name}")
            if not math.isfinite(value):
                raise InputError(f"must be finite, got {value!r}", field=f"thresholds.{f.name}")
        for name in ("a_high", "c_invalid"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise InputError(
                    f"is a probability, must be in [0, 1], got {value!r}",
                    field=f"thresholds.{name}",
                )
        for low, high in (("len_p33", "len_p66"), ("corr_p33", "corr_p66")):
            lo, hi = getattr(self, low), getattr(self, high)
            if lo is not None and hi is not None and lo > hi:
                raise InputError(
                    f"{low} = {lo!r} is above {high} = {hi!r}", field=f"thresholds.{low}"
                )

    @classmethod
    def field_docs(cls) -> dict[str, str]:
        """What each threshold means and which percentile the paper uses for it."""
        return dict(_THRESHOLD_DOCS)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, source: str | None = None) -> Thresholds:
        """Build from a config mapping; an unknown key is an :class:`InputError` naming it."""
        known = {f.name for f in fields(cls)}
        for key in values:
            if key not in known:
                raise InputError(
                    f"unknown threshold {key!r}; known: {', '.join(sorted(known))}",
                    source=source,
                    field=f"thresholds.{key}",
                )
        return cls(**dict(values))

    @classmethod
    def from_run(
        cls,
        signals: Iterable[Signals],
        *,
        high_conf_pct: float = 40.0,
        low_wrong_pct: float = 60.0,
        prompt_pct: float = 90.0,
        len_pcts: tuple[float, float] = (33.0, 66.0),
        corr_pcts: tuple[float, float] = (33.0, 66.0),
        a_high: float = 0.6,
        c_invalid: float = 0.5,
    ) -> Thresholds:
        """Thresholds from an earlier run's signals, with the paper's percentiles by default.

        Percentiles are numpy's (linear interpolation) over every attempt that has the signal;
        a threshold whose population is empty (e.g. no wrong attempts) stays ``None``.

        >>> rows = [Signals(False, i % 2 == 0, i / 10, False, 1.0 + i, 0.1 * i) for i in range(11)]
        >>> t = Thresholds.from_run(rows)
        >>> round(t.tau_high, 6), round(t.len_p66, 6), round(t.tau_prompt, 6)
        (0.4, 0.66, 10.0)
        """
        rows = list(signals)
        cbpt = [s.completion_bpt for s in rows if s.completion_bpt is not None]
        wrong = [
            s.completion_bpt for s in rows if s.completion_bpt is not None and not s.is_correct
        ]
        right = [s.completion_bpt for s in rows if s.completion_bpt is not None and s.is_correct]
        pbpt = [s.prompt_bpt for s in rows if s.prompt_bpt is not None]
        ratio = [s.token_ratio for s in rows]
        return cls(
            tau_high=_percentile(cbpt, high_conf_pct),
            tau_low_wrong=_percentile(wrong, low_wrong_pct),
            tau_prompt=_percentile(pbpt, prompt_pct),
            len_p33=_percentile(ratio, len_pcts[0]),
            len_p66=_percentile(ratio, len_pcts[1]),
            corr_p33=_percentile(right, corr_pcts[0]),
            corr_p66=_percentile(right, corr_pcts[1]),
            a_high=a_high,
            c_invalid=c_invalid,
        )

    def to_dict(self) -> dict[str, float | None]:
        return asdict(self)

    def missing(self, names: Iterable[str]) -> list[str]:
        """Which of ``names`` are not set."""
        return [name for name in names if getattr(self, name) is None]

    def require(self, names: Iterable[str], who: str) -> None:
        """Raise :class:`InputError` naming the first of ``names`` that is not set."""
        absent = self.missing(names)
        if absent:
            raise InputError(
                f"{who} needs threshold(s) {', '.join(absent)} "
                "(set them in the config or derive them from an earlier run: Thresholds.from_run)",
                field=f"thresholds.{absent[0]}",
            )


@dataclass(frozen=True)
class Schema:
    """A rubric schema: categories ``0..C`` (``num_categories = C + 1``) and default weights."""

    name: str
    num_categories: int
    default_weights: tuple[float, ...]
    needs_verifier: bool
    categorize: Callable[[Signals, Thresholds], int]
    description: str
    labels: tuple[str, ...] = ()
    thresholds: tuple[str, ...] = ()
    paper_name: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        if len(self.default_weights) != self.num_categories:
            raise ValueError(f"{self.name}: {len(self.default_weights)} weights")
        if self.labels and len(self.labels) != self.num_categories:
            raise ValueError(f"{self.name}: {len(self.labels)} labels")

    @property
    def C(self) -> int:  # the paper's name
        return self.num_categories - 1

    def __call__(self, signals: Signals, thresholds: Thresholds) -> int:
        """Checked :attr:`categorize`: verifier and thresholds present, result in range."""
        if self.needs_verifier and signals.verifier is None:
            raise MissingSignalError(
                f"schema {self.name!r} needs verifier probabilities (A, B, C) in "
                "signals.verifier; this attempt has none (configure a verifier)"
            )
        thresholds.require(self.thresholds, f"schema {self.name!r}")
        category = self.categorize(signals, thresholds)
        if not 0 <= category < self.num_categories:  # pragma: no cover - a bug in a schema
            raise AssertionError(f"schema {self.name!r} returned category {category}")
        return category


# ---- rubric variables (Table 5) ---------------------------------------------------------------


def _th(t: Thresholds, name: str) -> float:
    value = getattr(t, name)
    if value is None:
        raise InputError("threshold is not set", field=f"thresholds.{name}")
    return float(value)


def _known_bpt(value: float | None, which: str, needed_by: str) -> float:
    """A bits-per-token signal (``which``: completion or prompt) a schema reads; where the
    backend returned no log-probs for it, :class:`MissingSignalError` saying who needs them."""
    if value is None:
        raise MissingSignalError(
            f"{which}_bpt is unknown (the backend returned no {which} log-probs); {needed_by}"
        )
    return value


def _completion_bpt(s: Signals) -> float:
    return _known_bpt(s.completion_bpt, "completion", "confidence-based schemata need them")


def _prompt_bpt(s: Signals) -> float:
    return _known_bpt(s.prompt_bpt, "prompt", "the OOD schema needs them")


def _verifier(s: Signals) -> tuple[float, float, float]:
    if s.verifier is None:
        raise MissingSignalError("verifier probabilities (A, B, C) are missing")
    return s.verifier


def is_invalid(s: Signals, t: Thresholds) -> bool:
    """``repeated_pattern`` or verifier C >= ``c_invalid``."""
    return s.repeated_pattern or (s.verifier is not None and s.verifier[2] >= t.c_invalid)


def is_high_conf(s: Signals, t: Thresholds) -> bool:
    return _completion_bpt(s) <= _th(t, "tau_high")


def is_wrong_high_conf(s: Signals, t: Thresholds) -> bool:
    return not s.is_correct and _completion_bpt(s) <= _th(t, "tau_low_wrong")


def is_ood(s: Signals, t: Thresholds) -> bool:
    return _prompt_bpt(s) >= _th(t, "tau_prompt")


def length_band(s: Signals, t: Thresholds) -> int:
    """0 economical, 1 moderate, 2 verbose."""
    if s.token_ratio <= _th(t, "len_p33"):
        return 0
    if s.token_ratio <= _th(t, "len_p66"):
        return 1
    return 2


def is_a_high(s: Signals, t: Thresholds) -> bool:
    return _verifier(s)[0] >= t.a_high


# ---- the twelve schemata (Table 6) ------------------------------------------------------------


def exact_match(s: Signals, t: Thresholds) -> int:
    """0 invalid; 1 wrong; 2 correct."""
    if is_invalid(s, t):
        return 0
    return 2 if s.is_correct else 1


def format_aware(s: Signals, t: Thresholds) -> int:
    """0 invalid; 1 wrong & unboxed; 2 wrong & boxed; 3 correct & unboxed; 4 correct & boxed."""
    if is_invalid(s, t):
        return 0
    return 1 + 2 * s.is_correct + s.has_box


def conf_calibrated(s: Signals, t: Thresholds) -> int:
    """0 invalid; 1 wrong & low_conf; 2 wrong_high_conf; 3/4/5 correct & low/mid/high conf."""
    if is_invalid(s, t):
        return 0
    if not s.is_correct:
        return 2 if is_wrong_high_conf(s, t) else 1
    bpt = _completion_bpt(s)
    if bpt <= _th(t, "corr_p33"):
        return 5
    if bpt <= _th(t, "corr_p66"):
        return 4
    return 3


def ood_robustness(s: Signals, t: Thresholds) -> int:
    """0 invalid; 1 ood & wrong; 2 ind & wrong; 3 ood & correct; 4 ind & correct."""
    if is_invalid(s, t):
        return 0
    return 1 + 2 * s.is_correct + (not is_ood(s, t))


def strict_compliance(s: Signals, t: Thresholds) -> int:
    """0 invalid; 1 wrong or (correct & unboxed); 2 correct & boxed."""
    if is_invalid(s, t):
        return 0
    return 2 if s.is_correct and s.has_box else 1


def conf_wrong_penalty(s: Signals, t: Thresholds) -> int:
    """0 invalid; 1 wrong_high_conf; 2 wrong (not high conf); 3 correct."""
    if is_invalid(s, t):
        return 0
    if s.is_correct:
        return 3
    return 1 if is_wrong_high_conf(s, t) else 2


def verifier_only(s: Signals, t: Thresholds) -> int:
    """0 invalid; 1 high C; 2 high B; 3 A_high (verifier signals only, not is_correct)."""
    if is_invalid(s, t):
        return 0
    _, b, c = _verifier(s)
    if is_a_high(s, t):
        return 3
    return 2 if b >= c else 1


def format_confidence(s: Signals, t: Thresholds) -> int:
    """0 invalid; 1 wrong & unboxed; 2/3 wrong & boxed & low/high conf;
    4/5 correct & unboxed & low/high conf; 6/7 correct & boxed & low/high conf."""
    if is_invalid(s, t):
        return 0
    if not s.is_correct:
        if not s.has_box:
            return 1
        return 3 if is_high_conf(s, t) else 2
    return 4 + 2 * s.has_box + is_high_conf(s, t)


def length_robust(s: Signals, t: Thresholds) -> int:
    """0 invalid; 1 wrong; 2 correct (length never matters)."""
    return exact_match(s, t)


def verifier_prob(s: Signals, t: Thresholds) -> int:
    """0 invalid; 1 wrong & A_high; 2 wrong & not A_high; 3 correct & not A_high;
    4 correct & A_high."""
    if is_invalid(s, t):
        return 0
    a_high = is_a_high(s, t)
    if s.is_correct:
        return 4 if a_high else 3
    return 1 if a_high else 2


def efficiency_adjusted(s: Signals, t: Thresholds) -> int:
    """0 invalid; 1/2/3 wrong & economical/moderate/verbose; 4/5/6 correct & same."""
    if is_invalid(s, t):
        return 0
    return 1 + 3 * s.is_correct + length_band(s, t)


def concision_high_conf(s: Signals, t: Thresholds) -> int:
    """0 invalid; 1 wrong; 2 correct & verbose; 3 correct & moderate; 4 correct & economical;
    5 correct & economical & high_conf."""
    if is_invalid(s, t):
        return 0
    if not s.is_correct:
        return 1
    band = length_band(s, t)
    if band == 2:
        return 2
    if band == 1:
        return 3
    return 5 if is_high_conf(s, t) else 4


_COMPLEMENT_NOTE = (
    "A wrong attempt that is not wrong_high_conf goes to the 'wrong & low_conf' category (the "
    "paper's wrong_high_conf uses tau_low_wrong but low_conf uses tau_high, which can leave gaps)."
)

#: Every rubric schema, by name: plug-ins without parameters of the one registry class.
schemata: Registry[Schema] = Registry("schema")
#: ``name -> Schema``, read-only, for reading the schemata as a table.
SCHEMATA: Mapping[str, Schema] = schemata.mapping()


def _register(schema: Schema) -> Schema:
    """Register ``schema`` under its name (as a factory without parameters that returns it)."""

    def build() -> Schema:
        return schema

    build.__name__ = build.__qualname__ = schema.name
    schemata.register(schema.name)(build)
    return schema


_register(
    Schema(
        "exact_match",
        3,
        (0.0, 0.0, 1.0),
        False,
        exact_match,
        "Correctness only; ignores formatting, confidence, and length.",
        ("invalid", "wrong", "correct"),
        paper_name="Exact Match",
        notes="Weights: ours (score = rate of valid correct attempts).",
    )
)
_register(
    Schema(
        "format_aware",
        5,
        (0.0, 0.0, 1.0, 2.0, 3.0),
        False,
        format_aware,
        "Rewards boxed, well-formatted answers; distinguishes boxed/unboxed even when wrong.",
        ("invalid", "wrong & unboxed", "wrong & boxed", "correct & unboxed", "correct & boxed"),
        paper_name="Format Aware",
        notes="Weights: the paper's example [0, 0, 1, 2, 3] (Appendix D).",
    )
)
_register(
    Schema(
        "conf_calibrated",
        6,
        (0.0, 1.0, 0.0, 2.0, 3.0, 4.0),
        False,
        conf_calibrated,
        "Penalizes confidently wrong; grades correct answers by confidence (low/mid/high).",
        (
            "invalid",
            "wrong & low_conf",
            "wrong_high_conf",
            "correct & low_conf",
            "correct & mid_conf",
            "correct & high_conf",
        ),
        thresholds=("tau_low_wrong", "corr_p33", "corr_p66"),
        paper_name="Conf-Calibrated",
        notes=_COMPLEMENT_NOTE + " Correct attempts are split by the paper's corr_p33/corr_p66 "
        "(completion_bpt <= corr_p33: high, <= corr_p66: mid, else low). Weights: ours; "
        "wrong_high_conf scores like invalid (0), below an uncertain wrong answer (1).",
    )
)
_register(
    Schema(
        "ood_robustness",
        5,
        (0.0, 0.0, 1.0, 2.0, 3.0),
        False,
        ood_robustness,
        "Separates in-distribution vs. OOD prompts; checks correctness under both.",
        ("invalid", "ood & wrong", "ind & wrong", "ood & correct", "ind & correct"),
        thresholds=("tau_prompt",),
        paper_name="OOD Robustness",
        notes="Weights: ours, the Format Aware pattern over the category order.",
    )
)
_register(
    Schema(
        "strict_compliance",
        3,
        (0.0, 0.0, 1.0),
        False,
        strict_compliance,
        "Requires boxed final answers; unboxed-correct is treated as non-compliant.",
        ("invalid", "wrong or unboxed", "correct & boxed"),
        paper_name="Strict Compliance",
        notes="Weights: ours.",
    )
)
_register(
    Schema(
        "conf_wrong_penalty",
        4,
        (0.0, 0.0, 1.0, 2.0),
        False,
        conf_wrong_penalty,
        "Heavier penalty for wrong answers at high confidence; lighter when uncertain.",
        ("invalid", "wrong_high_conf", "wrong & low_conf", "correct"),
        thresholds=("tau_low_wrong",),
        paper_name="Conf-Wrong Penalty",
        notes=_COMPLEMENT_NOTE + " Weights: ours (Format Aware pattern).",
    )
)
_register(
    Schema(
        "verifier_only",
        4,
        (0.0, 0.0, 1.0, 2.0),
        True,
        verifier_only,
        "Uses verifier signals alone to rank; model-agnostic prob of the verifier.",
        ("invalid", "high C", "high B", "A_high"),
        paper_name="Verifier-Only",
        notes="C >= c_invalid is already invalid, so when A is not high the attempt is 'high B' "
        "if B >= C else 'high C'. Weights: ours (Format Aware pattern).",
    )
)
_register(
    Schema(
        "format_confidence",
        8,
        (0.0, 0.0, 1.0, 0.0, 2.0, 3.0, 4.0, 5.0),
        False,
        format_confidence,
        "Balanced composite over (boxed/unboxed) x (low/high confidence) for both wrong and "
        "correct; emphasizes boxed, high-confidence correctness and penalizes confidently wrong.",
        (
            "invalid",
            "wrong & unboxed",
            "wrong & boxed & low_conf",
            "wrong & boxed & high_conf",
            "correct & unboxed & low_conf",
            "correct & unboxed & high_conf",
            "correct & boxed & low_conf",
            "correct & boxed & high_conf",
        ),
        thresholds=("tau_high",),
        paper_name="Format+Confidence",
        notes="high_conf is Table 5's (completion_bpt <= tau_high). Weights: ours; the "
        "confidently wrong boxed answer scores 0.",
    )
)
_register(
    Schema(
        "length_robust",
        3,
        (0.0, 0.0, 1.0),
        False,
        length_robust,
        "Isolates correctness irrespective of verbosity; does not penalize length.",
        ("invalid", "wrong", "correct"),
        paper_name="Length-Robust",
        notes="Same categories as Exact Match in the paper's Table 6. Weights: ours.",
    )
)
_register(
    Schema(
        "verifier_prob",
        5,
        (0.0, 0.0, 1.0, 2.0, 3.0),
        True,
        verifier_prob,
        "Probes agreement with the verifier: flags wrong with high verifier A as inconsistent "
        "and distinguishes under/over-confidence on correct.",
        (
            "invalid",
            "wrong & A_high",
            "wrong & not A_high",
            "correct & not A_high",
            "correct & A_high",
        ),
        paper_name="Verifier Prob",
        notes="Weights: ours (Format Aware pattern).",
    )
)
_register(
    Schema(
        "efficiency_adjusted",
        7,
        (0.0, 2.0, 1.0, 0.0, 5.0, 4.0, 3.0),
        False,
        efficiency_adjusted,
        "Rewards short, correct completions; penalizes verbose outputs (especially when wrong).",
        (
            "invalid",
            "wrong & economical",
            "wrong & moderate",
            "wrong & verbose",
            "correct & economical",
            "correct & moderate",
            "correct & verbose",
        ),
        thresholds=("len_p33", "len_p66"),
        paper_name="Efficiency-Adjusted",
        notes="Weights: ours; any correct answer outscores any wrong one, shorter is better "
        "within each, a verbose wrong answer scores like invalid.",
    )
)
_register(
    Schema(
        "concision_high_conf",
        6,
        (0.0, 0.0, 1.0, 2.0, 3.0, 4.0),
        False,
        concision_high_conf,
        "Prefers concise, high-confidence correct answers; downweights verbose correctness.",
        (
            "invalid",
            "wrong",
            "correct & verbose",
            "correct & moderate",
            "correct & economical",
            "correct & economical & high_conf",
        ),
        thresholds=("len_p33", "len_p66", "tau_high"),
        paper_name="Concision-High-Conf",
        notes="Category 4 is correct & economical & not high_conf. Weights: ours (Format Aware "
        "pattern).",
    )
)


def get_schema(name: str) -> Schema:
    """The registered schema ``name``; :class:`InputError` listing the known names otherwise."""
    return schemata.build(name, field="schema")
