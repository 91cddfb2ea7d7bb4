"""Issue 48, follow-up: a ``betting`` rule's prior is read once when the campaign is built.

:func:`adaptive_eval.campaign.checks.check_goals` was not handed the built pair rules, so
:func:`~adaptive_eval.campaign.checks.check_rule_priors` built them again and read the earlier
run's summary.json a second time (up to 64 MB, parsed and validated twice). It now checks the
rules :func:`~adaptive_eval.campaign.build.build_campaign` built; nightly gives each night it
tries to the built campaign's rules (:func:`~adaptive_eval.campaign.build.with_rule_prior`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import base_config, load, write_config
from test_betting_prior import _summary

import policies.betting
from adaptive_eval.base.errors import InputError
from adaptive_eval.campaign.build import build_campaign, with_rule_prior


@pytest.fixture(scope="module")
def earlier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("earlier")
    _summary(root)  # a finished run of models a, b, c in root / "earlier"; root / "s.npz"
    return root


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The priors read from here on, by path."""
    reads: list[str] = []
    real = policies.betting.read_prior_scores

    def counted(path: str) -> dict[str, tuple[float, float]]:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(policies.betting, "read_prior_scores", counted)
    return reads


def _config(root: Path, **rule: Any) -> Path:
    """A campaign of one betting rule on ``root / "earlier"`` (``prior=None``: on none)."""
    spec = {"name": "betting", "prior": "earlier", **rule}
    data = base_config("s.npz", pair_rules=[{k: v for k, v in spec.items() if v is not None}])
    return write_config(root / "betting.yaml", data)


def test_building_a_campaign_reads_its_prior_once(
    earlier: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = _reads(monkeypatch)
    campaign = build_campaign(load(_config(earlier)))
    assert len(reads) == 1, reads
    assert campaign.decision.pair_rules[0].prior_scores.keys() == {"a", "b", "c"}


def test_a_prior_that_does_not_fit_is_still_refused_naming_the_rule(
    earlier: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check on the built rules refuses what it refused when it built them itself."""
    reads = _reads(monkeypatch)
    with pytest.raises(InputError) as info:
        build_campaign(load(_config(earlier, prior_models={"x": "a"})))
    assert info.value.field == "policy.pair_rules[0]"
    assert "prior_models maps 'x', which is no model of this campaign" in str(info.value)
    assert len(reads) == 1, reads


def test_a_prior_given_to_the_built_campaign_is_the_campaign_built_with_it(
    earlier: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 49, item 1: nightly gives last night's run to its betting rules as a typed change of
    the built campaign (:func:`with_rule_prior`), which reads the run once and equals the
    campaign a config naming that prior builds: the rule's scores, the identity, the
    fingerprint and config.yaml; a run the rule cannot bet on is refused naming the rule."""
    run = (earlier / "earlier").resolve()
    plain = build_campaign(load(_config(earlier, prior=None)))
    reads = _reads(monkeypatch)
    given = with_rule_prior(plain, [0], run)
    assert len(reads) == 1
    named = build_campaign(load(_config(earlier, prior=str(run))))
    assert given.decision.pair_rules[0].prior_scores == named.decision.pair_rules[0].prior_scores
    assert given.run.identity == named.run.identity
    assert given.run.fingerprint == named.run.fingerprint != plain.run.fingerprint
    assert given.run.settings.run_record == named.run.settings.run_record
    unfitting = build_campaign(load(_config(earlier, prior=None, prior_models={"x": "a"})))
    with pytest.raises(InputError) as info:
        with_rule_prior(unfitting, [0], run)
    assert info.value.field == "policy.pair_rules[0]"
    assert "prior_models maps 'x', which is no model of this campaign" in str(info.value)


def test_the_identity_holds_the_priors_scores_not_its_path(earlier: Path, tmp_path: Path) -> None:
    """Issue 49, item 4: a prior moved or copied is the same campaign (the fingerprint a resume
    checks), one whose scores changed is another; no path of it is in the identity."""
    import json
    import shutil

    first = build_campaign(load(_config(earlier)))
    moved = tmp_path / "moved"
    shutil.copytree(earlier, moved)
    again = build_campaign(load(_config(moved)))
    assert again.run.fingerprint == first.run.fingerprint
    assert str(earlier) not in json.dumps(first.run.identity)
    (prior,) = first.run.identity["config"]["policy"]["pair_rules"]
    assert set(prior["prior"]) == {"scores_sha256"}

    summary = moved / "earlier" / "summary.json"
    document = json.loads(summary.read_text())
    document["models"][0]["score"] = round(document["models"][0]["score"] + 0.01, 6)
    summary.write_text(json.dumps(document))
    changed = build_campaign(load(_config(moved)))
    assert changed.run.fingerprint != first.run.fingerprint
