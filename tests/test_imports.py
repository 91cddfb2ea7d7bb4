"""adaptive-eval import: lm-eval-harness and inspect_ai logs -> an (L, M, N) outcome npz."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import load, run_inline, write_config

from adaptive_eval.base.errors import InputError
from adaptive_eval.command_line.cli import main
from adaptive_eval.store import TrialStore
from adaptive_eval.workflows.imports import import_files, parse_map

FIXTURES = Path(__file__).parent / "fixtures"
LM_EVAL = sorted((FIXTURES / "lm_eval").glob("*/samples_*.jsonl"))
INSPECT = [FIXTURES / "inspect" / "model-a.json", FIXTURES / "inspect" / "model-b.eval"]
FULL_MAP = ["C=1", "I=0", "P=1", "N=0"]


def test_lm_eval_samples_become_runs_as_trials() -> None:
    result = import_files("lm-eval", LM_EVAL, None, None)
    assert result.models == ["org__model-a", "org__model-b"]
    assert result.questions == ["gsm8k/0", "gsm8k/1", "gsm8k/2"]
    # Trial t of a document is the t-th run by date (fixtures: the scores written per run).
    expected = np.array([[[1, 1], [1, 0], [0, 0]], [[0, 0], [1, 0], [0, 1]]])
    assert result.outcomes.tolist() == expected.tolist()
    assert result.dropped_trials == 0


def test_inspect_logs_json_and_eval_zip_epochs_as_trials() -> None:
    result = import_files("inspect", INSPECT, parse_map(FULL_MAP), None)
    assert result.models == ["openai/model-a", "openai/model-b"]
    assert result.questions == ["arc_easy/1", "arc_easy/2", "arc_easy/q3"]
    # model-b has two epochs of q3, so every cell keeps its first two epochs.
    assert result.outcomes.tolist() == [
        [[1, 1], [0, 1], [1, 0]],
        [[0, 0], [1, 0], [0, 0]],
    ]
    assert result.dropped_trials == 5 and result.trials_per_cell == (2, 3)


def test_unmapped_score_is_an_error_naming_it() -> None:
    with pytest.raises(InputError, match=r"score 'P' .* --map P=CATEGORY"):
        import_files("inspect", INSPECT, None, None)


def test_map_can_grade_partial_as_its_own_category() -> None:
    result = import_files("inspect", INSPECT, parse_map(["C=2", "P=1", "I=0", "N=0"]), None)
    assert result.outcomes[0, 2, 0] == 1 and result.outcomes[0, 0, 0] == 2


def test_missing_cell_and_foreign_file_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"cell\(s\) have no trial"):
        import_files("lm-eval", [*LM_EVAL[:2], _drop_line(LM_EVAL[2], tmp_path)], None, None)
    stray = tmp_path / "results.jsonl"
    stray.write_text("{}\n")
    with pytest.raises(InputError, match=r"samples_<task>_<date>\.jsonl"):
        import_files("lm-eval", [stray], None, None)


def _drop_line(path: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "org__model-b"
    folder.mkdir()
    target = folder / path.name
    target.write_text("".join(path.read_text().splitlines(keepends=True)[:2]))
    return target


def test_import_cli_writes_an_npz_that_replay_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "imported.npz"
    args = ["import", "--format", "inspect", *map(str, INSPECT), "--out", str(out)]
    assert main(args) == 2  # P and N need a mapping
    assert "--map P=CATEGORY" in capsys.readouterr().err
    assert main([*args, *[f"--map={m}" for m in FULL_MAP]]) == 0
    assert "5 trial(s) dropped" in capsys.readouterr().out
    assert main(["score", str(out), "--json"]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in scored["models"]] == ["openai/model-a", "openai/model-b"]

    config = {
        "name": "imported",
        "models": [{"backend": "replay", "path": str(out)}],
        "rubric": {"weights": [0, 1]},
        "policy": {"min_trials_per_question": 1, "max_trials_per_question": 2, "round_trials": 4},
        "execution": {"workers": 1, "batch_size": 8},
        "output": {"progress": False, "fsync": "normal"},
    }
    run_inline(load(write_config(tmp_path / "c.yaml", config)), tmp_path / "run")
    store = TrialStore(tmp_path / "run", readonly=True)
    try:
        replayed = store.trial_arrays()
    finally:
        store.close()
    with np.load(out) as data:
        outcomes = data["outcomes"]
    assert len(replayed.model) > 0
    assert replayed.category.tolist() == [
        int(outcomes[m, q, t])
        for m, q, t in zip(replayed.model, replayed.question, replayed.trial, strict=True)
    ]


# -- issue 15, item 6: lm-eval writes one line per (document, filter) ----------------------------


def _two_filters(tmp_path: Path) -> list[Path]:
    """The fixtures as gsm8k writes them: each document once per filter; flexible-extract
    scores every document 1 (a different answer extraction), strict-match as recorded."""
    out = []
    for path in LM_EVAL:
        target = tmp_path / path.parent.name / path.name
        target.parent.mkdir(exist_ok=True)
        lines = []
        for line in path.read_text().splitlines():
            record = json.loads(line)
            lines.append(json.dumps({**record, "filter": "strict-match"}))
            lines.append(json.dumps({**record, "filter": "flexible-extract", "exact_match": 1.0}))
        target.write_text("\n".join(lines) + "\n")
        out.append(target)
    return out


def test_lm_eval_with_several_filters_asks_for_one_and_lists_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _two_filters(tmp_path)
    args = ["import", "--format", "lm-eval", *map(str, files), "--out", str(tmp_path / "o.npz")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "2 filters (flexible-extract, strict-match)" in err and "--filter NAME" in err
    assert main([*args, "--filter", "exact"]) == 2
    assert "filters found: flexible-extract, strict-match" in capsys.readouterr().err


def test_lm_eval_filter_chooses_the_scores(tmp_path: Path) -> None:
    files = _two_filters(tmp_path)
    strict = import_files("lm-eval", files, None, None, "strict-match")
    recorded = import_files("lm-eval", LM_EVAL, None, None)
    assert strict.outcomes.tolist() == recorded.outcomes.tolist()
    flexible = import_files("lm-eval", files, None, None, "flexible-extract")
    assert flexible.outcomes.shape == strict.outcomes.shape and flexible.outcomes.min() == 1


def test_the_documented_import_commands_run_on_a_gsm8k_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 22, workflow 11: docs/workflows.md's gsm8k example exited 2 on a real (two-filter)
    gsm8k log: it lacked --filter. Every documented lm-eval import line runs here as written,
    on the fixtures laid out as ``out/<model>/samples_gsm8k_<date>.jsonl``."""
    import glob
    import shlex

    (tmp_path / "out").mkdir()
    _two_filters(tmp_path / "out")
    monkeypatch.chdir(tmp_path)
    docs = Path(__file__).resolve().parent.parent / "docs" / "workflows.md"
    commands = [
        line.strip()
        for line in docs.read_text().splitlines()
        if line.strip().startswith("adaptive-eval import --format lm-eval out/")
    ]
    assert commands
    for command in commands:
        words = shlex.split(command)[1:]
        args = [match for word in words for match in (sorted(glob.glob(word)) or [word])]
        capsys.readouterr()
        assert main(args) == 0, capsys.readouterr().err
        assert "outcomes (2, 3, 2)" in capsys.readouterr().out


def test_an_inspect_log_too_big_to_parse_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29, item 4.5: 12 members of 60 MB (each under the member limit) were parsed."""
    import zipfile

    from adaptive_eval.base.errors import InputError
    from adaptive_eval.workflows import imports

    monkeypatch.setattr(imports, "MAX_LOG_UNPACKED", 1 << 20)
    path = tmp_path / "big.eval"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("header.json", json.dumps({"eval": {"task": "t", "model": "m"}}))
        for index in range(12):
            archive.writestr(f"samples/{index}_epoch_1.json", " " * (100 << 10) + "{}")
    with pytest.raises(InputError, match="more than the 1 MB one log is read into memory for"):
        imports.read_inspect([path])
