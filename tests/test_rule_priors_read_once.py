"""Issue 48, follow-up: a ``betting`` rule's prior is read once when the campaign is built.

:func:`adaptive_eval.campaign.checks.check_goals` was not handed the built pair rules, so
:func:`~adaptive_eval.campaign.checks.check_rule_priors` built them again and read the earlier
run's summary.json a second time (up to 64 MB, parsed and validated twice). It now checks the
rules :func:`~adaptive_eval.campaign.build.build_campaign` built; nightly, which has no built
rules, still has them built for each night it tries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import base_config, load, write_config
from test_betting_prior import _summary

import policies.betting
from adaptive_eval.base.errors import InputError
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.campaign.checks import check_rule_priors


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
    data = base_config("s.npz", pair_rules=[{"name": "betting", "prior": "earlier", **rule}])
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


def test_without_built_rules_check_rule_priors_builds_them(
    earlier: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As nightly calls it, on each past night it could bet on."""
    reads = _reads(monkeypatch)
    config = load(_config(earlier))
    check_rule_priors(config, ["a", "b", "c"])
    assert len(reads) == 1
    with pytest.raises(InputError, match="none of its models"):
        check_rule_priors(config, ["p", "q"])
    assert len(reads) == 2


def test_the_identity_holds_the_priors_scores_not_its_path(earlier: Path, tmp_path: Path) -> None:
    """Issue 49, item 4: a prior moved or copied is the same campaign (the fingerprint a resume
    checks), one whose scores changed is another; no path of it is in the identity."""
    import json
    import shutil

    first = build_campaign(load(_config(earlier)))
    moved = tmp_path / "moved"
    shutil.copytree(earlier, moved)
    again = build_campaign(load(_config(moved)))
    assert again.fingerprint == first.fingerprint
    assert str(earlier) not in json.dumps(first.identity)
    (prior,) = first.identity["config"]["policy"]["pair_rules"]
    assert set(prior["prior"]) == {"scores_sha256"}

    summary = moved / "earlier" / "summary.json"
    document = json.loads(summary.read_text())
    document["models"][0]["score"] = round(document["models"][0]["score"] + 0.01, 6)
    summary.write_text(json.dumps(document))
    changed = build_campaign(load(_config(moved)))
    assert changed.fingerprint != first.fingerprint
