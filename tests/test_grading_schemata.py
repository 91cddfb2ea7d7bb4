"""The twelve rubric schemata (paper Table 6) on hand-built signal rows, and their thresholds."""

from __future__ import annotations

import math

import pytest

from adaptive_eval.base.errors import InputError
from adaptive_eval.grading.schemata import SCHEMATA, MissingSignalError, Schema, Thresholds
from adaptive_eval.grading.signals import Signals

T = Thresholds(
    tau_high=0.5,
    tau_low_wrong=0.7,
    tau_prompt=2.0,
    len_p33=0.1,
    len_p66=0.3,
    corr_p33=0.3,
    corr_p66=0.6,
)

A_HIGH = (0.8, 0.1, 0.1)  # verifier: confident "correct"
B_HIGH = (0.3, 0.5, 0.2)  # verifier: "wrong", on task
C_MID = (0.3, 0.25, 0.45)  # verifier: more off-task than wrong, below the invalid cut
C_HIGH = (0.1, 0.2, 0.7)  # verifier: off-task -> invalid


def sig(
    correct: bool = True,
    box: bool = True,
    ratio: float = 0.05,
    rep: bool = False,
    pbpt: float | None = 1.0,
    cbpt: float | None = 0.2,
    verifier: tuple[float, float, float] | None = None,
) -> Signals:
    return Signals(box, correct, ratio, rep, pbpt, cbpt, verifier)


def run(name: str, rows: list[tuple[Signals, int]]) -> None:
    """Check every row's category and that the rows cover all of the schema's categories."""
    schema = SCHEMATA[name]
    got = [schema(s, T) for s, _ in rows]
    assert got == [want for _, want in rows]
    assert set(got) == set(range(schema.num_categories)), f"{name}: categories not all covered"


def test_registry_has_the_papers_twelve_schemata() -> None:
    assert set(SCHEMATA) == {
        "exact_match",
        "format_aware",
        "conf_calibrated",
        "ood_robustness",
        "strict_compliance",
        "conf_wrong_penalty",
        "verifier_only",
        "format_confidence",
        "length_robust",
        "verifier_prob",
        "efficiency_adjusted",
        "concision_high_conf",
    }
    for name, schema in SCHEMATA.items():
        assert isinstance(schema, Schema)
        assert schema.name == name
        assert len(schema.default_weights) == schema.num_categories == len(schema.labels)
        assert schema.num_categories - 1 == schema.C
        assert schema.default_weights[0] == 0.0  # invalid scores nothing
        assert schema.paper_name and schema.description
        assert schema.needs_verifier == name.startswith("verifier")
    # the paper's one explicit weight vector (Appendix D)
    assert SCHEMATA["format_aware"].default_weights == (0.0, 0.0, 1.0, 2.0, 3.0)
    expected_sizes = {"exact_match": 3, "format_aware": 5, "conf_calibrated": 6}
    expected_sizes |= {"ood_robustness": 5, "strict_compliance": 3, "conf_wrong_penalty": 4}
    expected_sizes |= {"verifier_only": 4, "format_confidence": 8, "length_robust": 3}
    expected_sizes |= {"verifier_prob": 5, "efficiency_adjusted": 7, "concision_high_conf": 6}
    assert {n: s.num_categories for n, s in SCHEMATA.items()} == expected_sizes


def test_exact_match() -> None:
    run(
        "exact_match",
        [
            (sig(rep=True), 0),
            (sig(verifier=C_HIGH), 0),
            (sig(correct=False), 1),
            (sig(correct=False, box=False), 1),
            (sig(), 2),
            (sig(box=False, ratio=0.9, cbpt=5.0), 2),
        ],
    )


def test_format_aware() -> None:
    run(
        "format_aware",
        [
            (sig(rep=True), 0),
            (sig(correct=False, box=False), 1),
            (sig(correct=False, box=True), 2),
            (sig(correct=True, box=False), 3),
            (sig(correct=True, box=True), 4),
        ],
    )


def test_conf_calibrated() -> None:
    run(
        "conf_calibrated",
        [
            (sig(rep=True), 0),
            (sig(correct=False, cbpt=0.9), 1),  # wrong, completion_bpt > tau_low_wrong
            (sig(correct=False, cbpt=0.7), 2),  # wrong_high_conf (boundary included)
            (sig(correct=False, cbpt=0.1), 2),
            (sig(cbpt=0.9), 3),  # correct, above corr_p66: low confidence
            (sig(cbpt=0.6), 4),  # mid (boundary included)
            (sig(cbpt=0.4), 4),
            (sig(cbpt=0.3), 5),  # high (boundary included)
        ],
    )


def test_ood_robustness() -> None:
    run(
        "ood_robustness",
        [
            (sig(rep=True, pbpt=5.0), 0),
            (sig(correct=False, pbpt=2.0), 1),  # ood: prompt_bpt >= tau_prompt
            (sig(correct=False, pbpt=1.9), 2),
            (sig(pbpt=3.0), 3),
            (sig(pbpt=0.5), 4),
        ],
    )


def test_strict_compliance() -> None:
    run(
        "strict_compliance",
        [
            (sig(rep=True), 0),
            (sig(correct=False, box=True), 1),
            (sig(correct=False, box=False), 1),
            (sig(correct=True, box=False), 1),
            (sig(correct=True, box=True), 2),
        ],
    )


def test_conf_wrong_penalty() -> None:
    run(
        "conf_wrong_penalty",
        [
            (sig(correct=False, cbpt=0.1, rep=True), 0),
            (sig(correct=False, cbpt=0.6), 1),
            (sig(correct=False, cbpt=0.8), 2),
            (sig(correct=True, cbpt=5.0), 3),
        ],
    )


def test_verifier_only() -> None:
    run(
        "verifier_only",
        [
            (sig(verifier=C_HIGH), 0),
            (sig(rep=True, verifier=A_HIGH), 0),
            (sig(verifier=C_MID), 1),
            (sig(verifier=B_HIGH), 2),
            (sig(correct=False, verifier=A_HIGH), 3),  # the verifier alone decides
            (sig(verifier=(0.6, 0.3, 0.1)), 3),  # A_high boundary included
        ],
    )


def test_format_confidence() -> None:
    run(
        "format_confidence",
        [
            (sig(rep=True), 0),
            (sig(correct=False, box=False, cbpt=0.1), 1),
            (sig(correct=False, box=True, cbpt=0.9), 2),
            (sig(correct=False, box=True, cbpt=0.5), 3),
            (sig(correct=True, box=False, cbpt=0.9), 4),
            (sig(correct=True, box=False, cbpt=0.1), 5),
            (sig(correct=True, box=True, cbpt=0.9), 6),
            (sig(correct=True, box=True, cbpt=0.1), 7),
        ],
    )


def test_length_robust() -> None:
    run(
        "length_robust",
        [
            (sig(rep=True, ratio=0.01), 0),
            (sig(correct=False, ratio=0.01), 1),
            (sig(correct=True, ratio=0.99), 2),
        ],
    )


def test_verifier_prob() -> None:
    run(
        "verifier_prob",
        [
            (sig(verifier=C_HIGH), 0),
            (sig(correct=False, verifier=A_HIGH), 1),
            (sig(correct=False, verifier=B_HIGH), 2),
            (sig(correct=True, verifier=B_HIGH), 3),
            (sig(correct=True, verifier=A_HIGH), 4),
        ],
    )


def test_efficiency_adjusted() -> None:
    run(
        "efficiency_adjusted",
        [
            (sig(rep=True), 0),
            (sig(correct=False, ratio=0.1), 1),  # economical (boundary included)
            (sig(correct=False, ratio=0.3), 2),  # moderate (boundary included)
            (sig(correct=False, ratio=0.31), 3),
            (sig(correct=True, ratio=0.0), 4),
            (sig(correct=True, ratio=0.2), 5),
            (sig(correct=True, ratio=1.0), 6),
        ],
    )


def test_concision_high_conf() -> None:
    run(
        "concision_high_conf",
        [
            (sig(rep=True), 0),
            (sig(correct=False, ratio=0.01, cbpt=0.1), 1),
            (sig(ratio=0.5), 2),
            (sig(ratio=0.2), 3),
            (sig(ratio=0.05, cbpt=0.9), 4),
            (sig(ratio=0.05, cbpt=0.5), 5),
        ],
    )


def test_weights_follow_the_schema_descriptions() -> None:
    w = {name: s.default_weights for name, s in SCHEMATA.items()}
    # confidently wrong is worse than uncertain wrong
    assert w["conf_calibrated"][2] < w["conf_calibrated"][1]
    assert w["conf_wrong_penalty"][1] < w["conf_wrong_penalty"][2]
    assert w["format_confidence"][3] < w["format_confidence"][2]
    # efficiency: shorter is better within wrong and within correct; any correct beats any wrong
    eff = w["efficiency_adjusted"]
    assert eff[1] > eff[2] > eff[3] and eff[4] > eff[5] > eff[6] > eff[1]
    # concision: more concise and confident correct answers score higher
    assert list(w["concision_high_conf"][2:]) == sorted(w["concision_high_conf"][2:])


# ---- missing signals and thresholds ------------------------------------------------------------


def test_verifier_schemata_need_verifier_probabilities() -> None:
    for name in ("verifier_only", "verifier_prob"):
        with pytest.raises(MissingSignalError, match="verifier"):
            SCHEMATA[name](sig(), T)


def test_confidence_schema_without_logprobs_is_a_clear_error() -> None:
    with pytest.raises(MissingSignalError, match="completion_bpt"):
        SCHEMATA["conf_wrong_penalty"](sig(correct=False, cbpt=None), T)
    with pytest.raises(MissingSignalError, match="prompt_bpt"):
        SCHEMATA["ood_robustness"](sig(pbpt=None), T)
    # a schema that does not use the signal does not need it
    assert SCHEMATA["format_aware"](sig(cbpt=None, pbpt=None), Thresholds()) == 4


def test_schema_without_its_thresholds_names_them() -> None:
    with pytest.raises(InputError, match="len_p33") as info:
        SCHEMATA["efficiency_adjusted"](sig(), Thresholds())
    assert info.value.field == "thresholds.len_p33"


# ---- Thresholds --------------------------------------------------------------------------------


def test_thresholds_from_run_uses_the_papers_percentiles() -> None:
    # 10 correct rows (completion_bpt 0..0.9) and 10 wrong rows (completion_bpt 1.0..1.9)
    rows = [
        Signals(
            True, i < 10, (i + 1) / 20, False, float(i), 0.1 * i if i < 10 else 1.0 + 0.1 * (i - 10)
        )
        for i in range(20)
    ]
    t = Thresholds.from_run(rows)
    all_bpt = sorted(r.completion_bpt for r in rows if r.completion_bpt is not None)
    wrong = [r.completion_bpt for r in rows if not r.is_correct]
    right = [r.completion_bpt for r in rows if r.is_correct]

    def pct(values: list[float | None], q: float) -> float:
        xs = sorted(v for v in values if v is not None)
        pos = (len(xs) - 1) * q / 100
        lo = math.floor(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    assert t.tau_high == pytest.approx(pct(list(all_bpt), 40))
    assert t.tau_low_wrong == pytest.approx(pct(list(wrong), 60))
    assert t.tau_prompt == pytest.approx(pct([float(i) for i in range(20)], 90))
    assert t.len_p33 == pytest.approx(pct([(i + 1) / 20 for i in range(20)], 33))
    assert t.len_p66 == pytest.approx(pct([(i + 1) / 20 for i in range(20)], 66))
    assert t.corr_p33 == pytest.approx(pct(list(right), 33))
    assert t.corr_p66 == pytest.approx(pct(list(right), 66))
    assert (t.a_high, t.c_invalid) == (0.6, 0.5)
    # every schema can run with them
    for schema in SCHEMATA.values():
        if not schema.needs_verifier:
            schema(rows[0], t)


def test_thresholds_from_run_custom_percentiles_and_missing_populations() -> None:
    rows = [Signals(True, True, r, False, None, None) for r in (0.1, 0.2, 0.3, 0.4, 0.5)]
    t = Thresholds.from_run(rows, len_pcts=(0, 100))
    assert (t.len_p33, t.len_p66) == pytest.approx((0.1, 0.5))
    # no log-probs, no wrong attempts: those thresholds stay unset
    assert t.tau_high is None and t.tau_low_wrong is None and t.tau_prompt is None
    assert t.missing(["tau_high", "len_p33"]) == ["tau_high"]


def test_thresholds_are_frozen_and_validated() -> None:
    with pytest.raises(AttributeError):
        T.tau_high = 1.0  # type: ignore[misc]
    with pytest.raises(InputError, match="len_p33"):
        Thresholds(len_p33=0.5, len_p66=0.1)
    with pytest.raises(InputError, match="a_high"):
        Thresholds(a_high=1.5)
    with pytest.raises(InputError, match="finite"):
        Thresholds(tau_high=math.nan)
    with pytest.raises(InputError, match="tau_hgih"):
        Thresholds.from_mapping({"tau_hgih": 1.0})
    assert Thresholds.from_mapping({"tau_high": 1}).tau_high == 1
    assert set(Thresholds.field_docs()) == set(T.to_dict())
