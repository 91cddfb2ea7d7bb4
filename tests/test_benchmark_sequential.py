"""benchmarks/sequential.py's yardsticks: the oracle allocator sees the truth, not the data, and
replays drawn with replacement come from each cell's own recorded outcomes (the measurements
in docs/sequential.md, "What stands between the defaults and 0.40x", rest on both)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from adaptive_eval.decide.contracts import CampaignView
from adaptive_eval.forecast.simulate import Truth
from adaptive_eval.stats import allocation as program

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import sequential as bench  # noqa: E402


def view_of(counts: np.ndarray, mu: tuple[float, float]) -> CampaignView:
    trials = counts.sum(axis=2)
    return CampaignView(
        names=tuple(f"m{i}" for i in range(counts.shape[0])),
        counts=counts.astype(np.float64),
        bayes=(np.array(mu), np.full(counts.shape[0], 0.1)),
        trials=trials,
        planned=trials,
        capacity=np.full(counts.shape[0], 400),
        confidence=0.95,
        min_trials=2,
        round=0,
        trials_used=int(trials.sum()),
        tokens_used=None,
        elapsed_s=0.0,
        rope=0.02,
    )


def test_the_oracle_program_is_the_closed_form_on_the_truth_whatever_the_data() -> None:
    p = np.array([[0.2, 0.5, 0.9], [0.3, 0.5, 0.6]])
    truth = Truth(np.stack([1 - p, p], axis=2), np.array([0.0, 1.0]))
    oracle = bench.oracle_allocator(truth, {})
    first = view_of(np.array([[[5, 5], [5, 5], [1, 9]], [[7, 3], [5, 5], [4, 6]]]), (0.6, 0.5))
    second = view_of(np.array([[[9, 1], [2, 8], [5, 5]], [[1, 9], [8, 2], [6, 4]]]), (0.5, 0.46))
    targets, _ = oracle.pair_targets(first, [(0, 1)])
    again, _ = oracle.pair_targets(second, [(0, 1)])
    np.testing.assert_allclose(targets, again)
    # min T0 + T1 s.t. A0/T0 + A1/T1 <= r: T_i = sqrt(A_i) (sqrt(A0) + sqrt(A1)) / r.
    sd = np.sqrt(p * (1 - p))
    variance = sd.mean(axis=1) ** 2
    gap = max(abs(truth.scores[0] - truth.scores[1]), 0.02 - abs(truth.scores[0] - truth.scores[1]))
    radius = gap**2 / (2 * program.kl_log_term(first.pair_alpha()))
    expected = np.sqrt(variance) * np.sqrt(variance).sum() / radius
    np.testing.assert_allclose(targets, expected, rtol=1e-4)
    # The plug-in allocator reads the data: the two views give it different targets.
    plug_in = bench.TrackAndStop()
    a, _ = plug_in.pair_targets(first, [(0, 1)])
    b, _ = plug_in.pair_targets(second, [(0, 1)])
    assert not np.allclose(a, b)


def test_replays_with_replacement_draw_from_each_cells_own_outcomes() -> None:
    rng = np.random.default_rng(0)
    outcomes = rng.integers(0, 3, size=(3, 4, 12))
    drawn = bench.resampled(outcomes, np.random.default_rng(1))
    assert drawn.shape == outcomes.shape
    for model in range(3):
        for question in range(4):
            assert set(drawn[model, question]) <= set(outcomes[model, question])
    # With replacement: some cell repeats a recorded trial more often than it was recorded.
    counts = lambda x: [np.bincount(c, minlength=3) for c in x.reshape(-1, 12)]  # noqa: E731
    assert any((d > o).any() for d, o in zip(counts(drawn), counts(outcomes), strict=True))
    truth = bench.recorded_truth(outcomes)
    np.testing.assert_allclose(truth.probs[..., 2], (outcomes == 2).mean(axis=2))
    np.testing.assert_allclose(truth.weights, [0.0, 0.5, 1.0])


def test_the_capped_bound_uses_the_theorems_constant_and_the_cap() -> None:
    p = np.array([[0.2, 0.5, 0.9], [0.3, 0.5, 0.6], [0.1, 0.2, 0.4]])
    truth = Truth(np.stack([1 - p, p], axis=2), np.array([0.0, 1.0]))
    delta = 0.025
    kl = (1 - 2 * delta) * np.log((1 - delta) / delta)
    loose, uncapped = bench.lower_bounds(truth, delta, cap=10**9)
    assert np.isclose(uncapped, loose * kl / program.kl_log_term(delta), rtol=1e-12)
    assert uncapped > loose
    # A cap below every model's share: each model gets exactly cap trials per question.
    assert bench.lower_bounds(truth, delta, cap=1) == (loose, 3 * 3)


def test_the_futility_calibration_records_each_check_and_restores_the_rule() -> None:
    import futility_calibration

    from adaptive_eval.stats import sequential as seq

    before = seq.settle_probability
    truth = bench.suite(10)["gap = eps"]
    rows = futility_calibration.recorded_checks(truth, None, 60, 20, 3)
    assert seq.settle_probability is before
    assert len(rows) > 0 and rows.shape[1] == 5
    assert ((rows[:, 0] >= 0) & (rows[:, 0] <= 1)).all()
    assert ((rows[:, 1] > 0) & (rows[:, 1] < 1)).all()  # checked only before the cap
    assert set(np.unique(rows[:, 2])) <= {0.0, 1.0}
    settled = rows[:, 2] == 1
    assert (rows[:, 3] > 0).all() and np.isnan(rows[~settled, 4]).all()
    assert (rows[settled, 4] > 0).all()


def test_the_futility_calibration_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    import subprocess

    script = str(REPO / "benchmarks" / "futility_calibration.py")
    for args, named in (
        (["--replay", str(tmp_path / "missing.npz")], "cannot read its outcomes"),
        (["--campaign", "no such campaign"], "not one of"),
        ([], "give one of --campaign NAME or --replay FILE"),
    ):
        done = subprocess.run(
            [sys.executable, script, *args], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 2, done.stderr[-400:]
        assert named in done.stderr and "Traceback" not in done.stderr
