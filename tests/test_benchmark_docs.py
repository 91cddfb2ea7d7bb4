"""Issue 22, vLLM item 3: benchmarks/gpu_throughput.py's code, its --help and
docs/generation.md describe the same run (the docs and help said 8 questions x 2 trials x 32
tokens for --tiny and 1,536 tokens per completion on the GPU; the code ran 32 x 8 capped at 448
in batches of 32, and lognormal lengths of median 800 capped at 16,384)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_throughput  # noqa: E402


@pytest.mark.parametrize("kind", ["gpu", "tiny"])
def test_the_code_runs_what_its_defaults_say(kind: str, tmp_path: Path) -> None:
    args = gpu_throughput.parse_args(
        ["--out", str(tmp_path), *(["--tiny"] if kind == "tiny" else [])]
    )
    for name, value in gpu_throughput.DEFAULTS[kind].items():
        assert getattr(args, name) == value, name


def test_help_and_docs_state_the_same_defaults() -> None:
    help_text = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_throughput.py"), "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    flat = " ".join(help_text.split())
    gpu, tiny = gpu_throughput.DEFAULTS["gpu"], gpu_throughput.DEFAULTS["tiny"]
    for name, option in (("questions", "--questions"), ("trials", "--trials")):
        assert f"(default {gpu[name]:g}; --tiny {tiny[name]:g})" in flat, option
    assert f"(default {gpu['max_tokens']:g}; --tiny {tiny['max_tokens']:g})" in flat
    docs = (REPO / "docs" / "generation.md").read_text()
    for kind, row in (("GPU", gpu), ("`--tiny` (CPU)", tiny)):
        line = next(x for x in docs.splitlines() if x.startswith(f"| {kind} |"))
        assert f"{row['questions']:g} x {row['trials']:g}" in line
        assert f"median {row['median']:g}" in line
        assert f"capped at {row['max_tokens']:,}" in line
        assert f"{row['batch_size']:g}, {row['max_num_seqs']:g}" in line
    # The old description is gone (the note saying it changed remains).
    assert "and 1,536 output tokens each" not in docs
    assert "8 questions x 2 trials x 32 tokens, batches of" not in docs
