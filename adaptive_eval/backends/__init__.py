"""Built-in backends, registered by name on import.

Generating backends (``vllm``, ``openai``) import their heavy dependencies only when a worker is
built, so listing or validating them needs neither installed.
"""

from adaptive_eval.backends import openai, replay, simulated, vllm  # noqa: F401 (registers)
from adaptive_eval.backends.base import BackendContext, BackendPlan, Worker

__all__ = ["BackendContext", "BackendPlan", "Worker", "replay", "simulated"]
