"""Issue 40, section 3: a /models query that failed once while a campaign was planned froze
"card not reported" into the run's identity, and the resume was refused once the server
answered (and the reverse). An unread card is no identity; another model served is refused,
saying which field differs; what the server reported is kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import TEST_DISPATCH, served_campaign, write_config

from adaptive_eval._testing.flaky_server import FlakyServer
from adaptive_eval.command_line.cli import main
from adaptive_eval.store import TrialStore

CARD = {"root": "/models/candidate-a", "owned_by": "vllm"}


def _config(tmp_path: Path, url: str) -> Path:
    data = served_campaign(url, "flaky-models", 2, {"backoff": 0.001, "timeout_s": 5}, batch_size=4)
    return write_config(tmp_path / "c.yaml", data)


def _recorded_server(run_dir: Path) -> str:
    store = TrialStore(run_dir)
    try:
        identity: Any = store.get_meta("identity")
    finally:
        store.close()
    return str(identity["files"][0]["server"])


@pytest.mark.parametrize("answers_first", [False, True])
def test_a_card_unread_once_does_not_block_the_resume(
    tmp_path: Path, no_ray: Any, capsys: pytest.CaptureFixture[str], answers_first: bool
) -> None:
    run_dir = tmp_path / "run"
    with FlakyServer(model="srv", card=CARD, models=answers_first) as server:
        config = _config(tmp_path, server.url)
        assert main(["run", str(config), "--out", str(run_dir), *TEST_DISPATCH]) == 0
        server.models = not answers_first  # /models flakes the other way on the resume
        capsys.readouterr()
        code = main(["run", str(config), "--out", str(run_dir), *TEST_DISPATCH])
        err = capsys.readouterr().err
        assert code == 0, err
        assert "different campaign" not in err
        # What the server reported, when it did, is what the run keeps.
        assert _recorded_server(run_dir).startswith("id srv; root /models/candidate-a")
        # Another model under the name is still another campaign, and the refusal says why.
        server.models = True
        server.card = {**CARD, "root": "/models/candidate-b"}
        assert main(["run", str(config), "--out", str(run_dir), *TEST_DISPATCH]) == 2
        err = capsys.readouterr().err
        assert "holds a different campaign" in err
        assert "root '/models/candidate-b' where it served '/models/candidate-a'" in err
