"""More models than worker slots: shared slots load, run and swap models, charging the loads."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
from helpers import ledger as read_ledger
from helpers import load, mimic_success, timeshare_config, write_config, write_scenario

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.summary_schema import record as summary_dict
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.workflows.run import run_campaign

ledger = partial(read_ledger, columns="model, question, trial, category")


@pytest.mark.slow
def test_three_models_time_share_one_slot(tmp_path: Path, ray_local: None) -> None:
    write_scenario(
        tmp_path / "s.npz", mimic_success([0.3, 0.5, 0.7], questions=8), names=["a", "b", "c"]
    )
    shared = summary_dict(
        run_campaign(
            build_campaign(load(write_config(tmp_path / "shared.yaml", timeshare_config(0.1, 1)))),
            tmp_path / "shared",
            quiet=True,
        )
    )
    dedicated = summary_dict(
        run_campaign(
            build_campaign(load(write_config(tmp_path / "own.yaml", timeshare_config(0.0, None)))),
            tmp_path / "own",
            quiet=True,
        )
    )
    dispatch = shared["dispatch"]
    assert dispatch["workers"] == 1
    assert dispatch["model_loads"] >= 3  # every model was loaded at least once
    assert dispatch["load_s"] == pytest.approx(0.1 * dispatch["model_loads"], rel=0.5)
    # Loads are charged: device-seconds cover at least the load time.
    assert shared["gpu_s_used"] >= dispatch["load_s"] * 0.99
    # Time-sharing changes where trials run, never what they are.
    assert ledger(tmp_path / "shared") == ledger(tmp_path / "own")
    assert shared["pairs"] == dedicated["pairs"]
    json.dumps(shared)


def test_unknown_simulated_option_is_named(tmp_path: Path) -> None:
    from adaptive_eval.campaign.build import build_campaign

    write_scenario(
        tmp_path / "s.npz", mimic_success([0.3, 0.5, 0.7], questions=8), names=["a", "b", "c"]
    )
    data = timeshare_config(0.1, 1)
    data["models"][1]["options"]["load_seconds"] = 3
    with pytest.raises(InputError, match=r"models\[1\]\.options\.load_seconds"):
        build_campaign(load(write_config(tmp_path / "c.yaml", data)))
