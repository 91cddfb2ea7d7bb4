"""The ``openai`` backend: retries against a server that fails on purpose, a campaign through it,
a worker crash re-run by the Ray dispatcher, and (marked ``vllm``) a real vLLM OpenAI server.

The flaky-server tests need neither vllm nor a GPU; backoffs are milliseconds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import TEST_DISPATCH, run_inline

from adaptive_eval._testing import CPU_VLLM_ENV, free_port, vllm_import_error
from adaptive_eval._testing.flaky_server import FlakyServer
from adaptive_eval.backends.openai import OpenAIWorker
from adaptive_eval.base.errors import BackendError
from adaptive_eval.base.summary_schema import record as summary_dict
from adaptive_eval.base.types import Batch, WorkItem, trial_seed
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.config.schema import parse_config
from adaptive_eval.inputs.datasets import ARITH20, load_dataset
from adaptive_eval.store import TrialStore

QUESTIONS = load_dataset(ARITH20)
ANSWERS = {q.problem: q.answer for q in QUESTIONS.questions}


def config(url: str, *, limit: int = 4, name: str = "srv", **options: Any) -> Any:
    data = {
        "name": "oa",
        "seed": 5,
        "models": [
            {
                "backend": "openai",
                "name": name,
                "workers": 1,
                "options": {
                    "base_url": url,
                    "backoff": 0.001,
                    "backoff_max": 0.01,
                    "max_retries": 4,
                    "timeout_s": 5,
                    **options,
                },
            }
        ],
        "rubric": {"weights": [0, 1]},
        "dataset": {"path": str(ARITH20), "limit": limit},
        "sampling": {"max_tokens": 32},
        "execution": {"workers": 1, "batch_size": 8},
        "output": {"progress": False, "fsync": "normal"},
    }
    return parse_config(data)


def worker_for(url: str, **options: Any) -> OpenAIWorker:
    plan = build_campaign(config(url, **options)).run.plans[0]
    worker = plan.make_worker(0)()
    assert isinstance(worker, OpenAIWorker)
    return worker


BATCH = Batch(1, 0, 0, (WorkItem(0, 0, 0, 3), WorkItem(0, 2, 0, 2)))


def check_trials(result: Any, worker: OpenAIWorker) -> None:
    ids = worker.setup.question_ids
    assert [(t.question, t.trial) for t in result.trials] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (2, 0),
        (2, 1),
    ]
    for trial in result.trials:
        assert trial.seed == trial_seed(5, "srv", ids[trial.question], trial.trial)
        assert (
            trial.text
            == f"Trial {trial.seed}. The answer is \\boxed"
            + "{"
            + QUESTIONS.questions[trial.question].answer
            + "}"
        )
        assert trial.category == 1 and trial.tokens and trial.tokens > 0
        assert trial.prompt_tokens and trial.prompt_tokens > 0
        assert trial.signals is not None and trial.signals["finish_reason"] == "stop"


def test_transient_failures_are_retried() -> None:
    script = [429, 500, "drop", 503, 502]
    with FlakyServer(script=script, answers=ANSWERS) as server:
        worker = worker_for(server.url, max_concurrency=2)
        result = worker.run(BATCH)
        worker.close()
    check_trials(result, worker)
    assert server.failures == len(script) and worker.retries == len(script)
    assert server.requests == BATCH.size + len(script)
    assert sum(t.signals["attempts"] for t in result.trials) == server.requests  # type: ignore
    seeds = sorted(body["seed"] for body in server.bodies)
    assert set(seeds) == {t.seed for t in result.trials}
    assert all(body["n"] == 1 and body["messages"][-1]["role"] == "user" for body in server.bodies)


def test_timeouts_are_retried() -> None:
    with FlakyServer(script=["hang"], hang_s=3.0, answers=ANSWERS) as server:
        worker = worker_for(server.url, timeout_s=0.3, max_concurrency=1)
        started = time.perf_counter()
        result = worker.run(BATCH)
        worker.close()
    assert time.perf_counter() - started < 3.0
    check_trials(result, worker)
    assert worker.retries == 1


def test_a_server_failing_forever_fails_the_batch() -> None:
    with FlakyServer(fail_forever=True, fail_status=503) as server:
        worker = worker_for(server.url, max_retries=3, max_concurrency=1)
        single = Batch(1, 0, 0, (WorkItem(0, 0, 0, 1),))
        started = time.perf_counter()
        with pytest.raises(BackendError, match=r"failed 4 times \(max_retries=3\).*HTTP 503"):
            worker.run(single)
        worker.close()
    assert server.requests == 4 and time.perf_counter() - started < 2


def test_client_errors_are_not_retried() -> None:
    with FlakyServer(script=[404]) as server:
        worker = worker_for(server.url, max_concurrency=1)
        with pytest.raises(BackendError, match="HTTP 404"):
            worker.run(Batch(1, 0, 0, (WorkItem(0, 0, 0, 1),)))
        worker.close()
    assert server.requests == 1


def test_retry_after_is_honoured() -> None:
    with FlakyServer(script=[429], retry_after=0.4, answers=ANSWERS) as server:
        worker = worker_for(server.url, max_concurrency=1, backoff_max=1.0)
        started = time.perf_counter()
        worker.run(Batch(1, 0, 0, (WorkItem(0, 0, 0, 1),)))
        worker.close()
    assert time.perf_counter() - started >= 0.4


def test_logprobs_completions_endpoint_and_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADAPTIVE_EVAL_TEST_KEY", "sk-test")
    with FlakyServer(answers=ANSWERS) as server:
        worker = worker_for(
            server.url,
            endpoint="completions",
            api_key_env="ADAPTIVE_EVAL_TEST_KEY",
            prompt_logprobs=True,
        )
        result = worker.run(BATCH)
        worker.close()
    body = server.bodies[0]
    assert "prompt" in body and "messages" not in body and body["logprobs"] == 0
    assert body["prompt_logprobs"] == 0
    assert all(h["authorization"] == "Bearer sk-test" for h in server.headers)
    for trial in result.trials:
        signals = trial.signals
        assert signals is not None
        assert signals["cumulative_logprob"] < 0 and signals["completion_bpt"] > 0
        assert signals["prompt_logprob_sum"] < 0 and signals["prompt_bpt"] > 0


def test_missing_api_key_in_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADAPTIVE_EVAL_TEST_KEY", "sk-test")
    plan = build_campaign(
        config("http://127.0.0.1:9/v1", api_key_env="ADAPTIVE_EVAL_TEST_KEY")
    ).run.plans[0]
    monkeypatch.delenv("ADAPTIVE_EVAL_TEST_KEY")
    with pytest.raises(BackendError, match="ADAPTIVE_EVAL_TEST_KEY"):
        plan.make_worker(0)()


def test_a_server_without_logprobs_is_asked_again_without_them() -> None:
    with FlakyServer(reject_logprobs=True, answers=ANSWERS) as server:
        worker = worker_for(server.url, max_concurrency=1)
        result = worker.run(BATCH)
        worker.close()
    check_trials(result, worker)
    assert worker.retries == 0 and not worker.use_logprobs
    assert all(t.signals and t.signals["completion_bpt"] is None for t in result.trials)


def test_campaign_through_a_flaky_server(tmp_path: Path) -> None:
    with FlakyServer(script=[500, 429, 500], answers=ANSWERS) as server:
        cfg = config(server.url, limit=3)
        data = cfg.model_dump(mode="json")
        data["policy"] = {
            "min_trials_per_question": 3,
            "max_trials_per_question": 3,
            "round_trials": 6,
        }
        run_inline(parse_config(data), tmp_path / "run")
    store = TrialStore(tmp_path / "run", readonly=True)
    trials = list(store.trials())
    store.close()
    assert len(trials) == 3 * 3 and all(t.category == 1 for t in trials)
    assert len({(t.question, t.trial) for t in trials}) == len(trials)
    assert all(t.text and t.signals and t.signals["finish_reason"] == "stop" for t in trials)


def test_request_retries_reach_events_and_summary(tmp_path: Path, no_ray: Any) -> None:
    """Issue 16, item 6: every request retry is counted by reason and reported as it happens
    (a ``request_retries`` event with the batch) and in summary.json's dispatch section."""
    from adaptive_eval.command_line.cli import main

    with FlakyServer(script=[503, 503, 429, "drop"], answers=ANSWERS) as server:
        data = config(server.url, limit=3).model_dump(mode="json")
        data["policy"] = {"min_trials_per_question": 2, "max_trials_per_question": 2}
        path = tmp_path / "c.yaml"
        path.write_text(json.dumps(data))
        assert (
            main(["run", str(path), "--out", str(tmp_path / "run"), "--json", *TEST_DISPATCH]) == 0
        )
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    dispatch = summary["dispatch"]
    assert dispatch["request_retries"] == 4
    assert dispatch["request_retry_reasons"] == {
        "HTTP 503": 2,
        "HTTP 429": 1,
        "connection error": 1,
    }
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").open()]
    retried = [e for e in events if e["event"] == "request_retries"]
    assert sum(e["retries"] for e in retried) == 4 and retried[-1]["total"] == 4
    assert all(e["batch"] >= 1 and e["worker"] for e in retried)
    # report keeps what only the run knew.
    assert main(["report", str(tmp_path / "run")]) == 0
    rebuilt = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert rebuilt["dispatch"]["request_retries"] == 4


def test_a_response_with_two_choices_fails_its_batch(tmp_path: Path) -> None:
    """n=1 is asked for: a second choice means the server ignored it. The request fails (not
    retried: the server would answer the same), so its batch records nothing."""
    with FlakyServer(choices=2) as server:
        worker = worker_for(server.url, max_concurrency=1)
        with pytest.raises(BackendError, match=r"2 choices where n=1 was asked for"):
            worker.run(Batch(1, 0, 0, (WorkItem(0, 0, 0, 2),)))
        # Nothing is asked twice (the batch's second trial may already be on its way when
        # the first answer fails it: at most one request per trial, never a repeat).
        bodies = [json.dumps(body, sort_keys=True) for body in server.bodies]
        assert 1 <= server.requests <= 2 and len(set(bodies)) == len(bodies)
        assert worker.retries == 0
        with pytest.raises(BackendError, match="2 choices"):
            run_inline(config(server.url, limit=2), tmp_path / "run")
    store = TrialStore(tmp_path / "run", readonly=True)
    try:
        assert store.count_trials() == 0
    finally:
        store.close()


@pytest.mark.slow
def test_crashed_worker_batch_is_rerun_once(tmp_path: Path, ray_local: None) -> None:
    """The worker's process dies on its first batch (os._exit); Ray restarts the actor, the
    dispatcher re-queues the batch, and every trial is recorded exactly once."""
    from adaptive_eval.workflows.run import run_campaign

    with FlakyServer(answers=ANSWERS) as server:
        cfg = config(server.url, limit=3, test_crash_once=str(tmp_path / "crash.marker"))
        data = cfg.model_dump(mode="json")
        data["policy"] = {
            "min_trials_per_question": 2,
            "max_trials_per_question": 2,
            "round_trials": 6,
        }
        # One retry is enough: the dispatcher waits for the restarted actor before re-sending.
        data["execution"]["max_batch_retries"] = 1
        summary = summary_dict(
            run_campaign(build_campaign(parse_config(data)), tmp_path / "run", quiet=True)
        )
    assert (tmp_path / "crash.marker").exists()
    store = TrialStore(tmp_path / "run", readonly=True)
    trials = list(store.trials())
    store.close()
    assert sorted((t.question, t.trial) for t in trials) == [
        (q, i) for q in range(3) for i in range(2)
    ]
    assert summary["dispatch"]["worker_restarts"] == 1
    assert summary["dispatch"]["failed_batches"] == 1


# -- a real vLLM OpenAI-compatible server (CPU) ---------------------------------------------------


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    reason = vllm_import_error()
    if reason is not None:
        print(f"skipping: {reason}")
        pytest.skip(reason)
    import httpx

    from adaptive_eval._testing.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path_factory.mktemp("models") / "tiny", seed=0)
    port = free_port()
    log = open(tmp_path_factory.mktemp("server") / "server.log", "w")  # noqa: SIM115
    env = {**os.environ, **CPU_VLLM_ENV}
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "256",
        "--enforce-eager",
        "--max-num-seqs",
        "16",
        "--seed",
        "0",
    ]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            if process.poll() is not None:
                log.flush()
                raise RuntimeError(
                    f"vLLM server exited with {process.returncode}: "
                    + Path(log.name).read_text()[-3000:]
                )
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    "vLLM server not healthy after 240 s: " + Path(log.name).read_text()[-3000:]
                )
            time.sleep(1)
        yield f"{url}/v1"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_real_vllm_server(vllm_server: str, endpoint: str) -> None:
    worker = worker_for(vllm_server, model="tiny", endpoint=endpoint, prompt_logprobs=True)
    worker.setup = type(worker.setup)(
        **{
            **worker.setup.__dict__,
            "sampling": dataclasses.replace(worker.setup.sampling, max_tokens=12),
        }
    )
    result = worker.run(BATCH)
    again = worker.run(Batch(2, 0, 0, (WorkItem(0, 2, 1, 1),)))
    worker.close()
    ids = worker.setup.question_ids
    assert len(result.trials) == BATCH.size
    for trial in result.trials:
        assert trial.seed == trial_seed(5, "srv", ids[trial.question], trial.trial)
        assert isinstance(trial.text, str) and trial.text
        assert trial.tokens is not None and 0 < trial.tokens <= 12
        assert trial.prompt_tokens is not None and trial.prompt_tokens > 0
        signals = trial.signals
        assert signals is not None and signals["finish_reason"] in ("stop", "length")
        assert signals["completion_bpt"] is not None and signals["completion_bpt"] > 0
        assert signals["prompt_bpt"] is not None and signals["prompt_bpt"] > 0
        assert trial.category in (0, 1)
    # The same trial seed gives the same completion, alone or in a batch.
    same = next(t for t in result.trials if (t.question, t.trial) == (2, 1))
    assert again.trials[0].text == same.text
    texts = {t.text for t in result.trials}
    assert len(texts) > 1, json.dumps(sorted(texts))


class SlowServer(FlakyServer):
    """Answers question 0's requests after ``slow_s`` and the others after ``fast_s``, and
    records how many requests it holds at once."""

    def __init__(self, slow_s: float, fast_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slow_s, self.fast_s = slow_s, fast_s
        self.inside = 0
        self.peak = 0
        self.gate = threading.Lock()

    def next_step(self, body: dict[str, Any], headers: Any) -> Any:
        step = super().next_step(body, headers)
        slow = QUESTIONS.questions[0].problem in json.dumps(body)
        with self.gate:
            self.inside += 1
            self.peak = max(self.peak, self.inside)
        time.sleep(self.slow_s if slow else self.fast_s)
        with self.gate:
            self.inside -= 1
        return step


def test_requests_stay_in_flight_across_batch_boundaries() -> None:
    """Two batches queued at one worker share its request pool: while the first batch waits
    on its one slow request, the second batch's requests take the free slots and the second
    batch finishes first; never more than max_concurrency requests are in flight."""
    import threading

    with SlowServer(slow_s=1.5, fast_s=0.1, answers=ANSWERS) as server:
        plan = build_campaign(config(server.url, max_concurrency=4)).run.plans[0]
        assert plan.actor_concurrency == 3  # in_flight_per_worker (2) batches + control
        worker = plan.make_worker(0)()
        assert isinstance(worker, OpenAIWorker)
        first = Batch(1, 0, 0, (WorkItem(0, 0, 0, 1), WorkItem(0, 1, 0, 3)))
        second = Batch(2, 0, 0, (WorkItem(0, 2, 0, 4), WorkItem(0, 3, 0, 4)))
        finished: dict[int, float] = {}
        results: dict[int, Any] = {}

        def run(batch: Batch) -> None:
            results[batch.batch_id] = worker.run(batch)
            finished[batch.batch_id] = time.perf_counter()

        started = time.perf_counter()
        threads = [threading.Thread(target=run, args=(b,)) for b in (first, second)]
        for thread in threads:
            thread.start()
            time.sleep(0.05)  # the first batch's requests enter the pool first
        for thread in threads:
            thread.join(timeout=30)
        worker.close()
    assert set(results) == {1, 2} and all(r.error is None for r in results.values())
    assert len(results[1].trials) == 4 and len(results[2].trials) == 8
    # Second batch: 8 fast requests through the 3 slots the slow one leaves: ~0.3 s, done
    # long before the slow request (1.5 s); one batch at a time would take 1.5 + 0.2 s.
    assert finished[2] < finished[1]
    assert finished[2] - started < 1.2, finished[2] - started
    assert server.peak == 4
    # Busy time is each batch's share of the pool, so the two add up to at most the wall time.
    assert results[1].busy_s + results[2].busy_s <= finished[1] - started + 0.05


def test_the_served_model_is_recorded_and_a_stated_revision_is_the_identity(
    tmp_path: Path,
) -> None:
    """Issue 29, section 1: a server's weights cannot be hashed. The model it reports serving
    (and its system fingerprint) is kept with every trial and listed in the provenance; a
    revision the user states is part of the model's identity (library cells, fingerprint)."""
    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.outputs.provenance import collect

    with FlakyServer(script=[], answers=ANSWERS) as server:
        cfg = config(server.url, limit=2, revision="2026-11-01")
        data = cfg.model_dump(mode="json")
        data["policy"] = {"min_trials_per_question": 1, "max_trials_per_question": 1}
        run_inline(parse_config(data), tmp_path / "run")
        other = build_campaign(config(server.url, limit=2, revision="2026-11-02"))
        assert other.run.fingerprint != build_campaign(cfg).run.fingerprint
    (model,) = collect(tmp_path / "run").models
    assert model.served == [server.model] == ["flaky"]  # what the server said, not our name
    # What it said when the campaign was planned: its /models card (no /version here).
    assert model.server == "card not reported; version none"  # it lists "flaky", not "srv"
    from adaptive_eval.outputs.provenance import markdown

    text = "\n".join(markdown(collect(tmp_path / "run")))
    assert "server's model card at planning: card not reported; version none" in text


# -- the server's report is part of the model's identity (issue 29, section 1) ------------------


def night_against_the_library(tmp_path: Path, url: str, **options: Any) -> tuple[int, list[str]]:
    """One night of the ``srv`` model against a library: (trials it would reuse of one per
    question, the library's change lines); then the night records one trial per question."""
    from adaptive_eval.base.types import Trial
    from adaptive_eval.control.library import TrialLibrary

    campaign = build_campaign(config(url, limit=3, **options))
    library = TrialLibrary(tmp_path / "lib", campaign, "night")
    try:
        items = tuple(WorkItem(0, q, 0, 1) for q in range(3))
        found, _ = library.lookup(Batch(0, 0, 0, items))
        qids = campaign.question_ids
        library.add([Trial(0, q, 0, trial_seed(5, "srv", qids[q], 0), 1) for q in range(3)])
        return len(found), list(library.changes)
    finally:
        library.close()


VLLM_CARD = {"root": "/models/candidate-a", "owned_by": "vllm", "max_model_len": 4096}


def test_a_server_serving_other_weights_under_the_same_name_is_resampled(
    tmp_path: Path,
) -> None:
    """The name and the stated options are unchanged; what the server reports serving is not."""
    with FlakyServer(model="srv", card=VLLM_CARD, version="0.6.3") as server:
        assert night_against_the_library(tmp_path, server.url) == (0, [])
        assert night_against_the_library(tmp_path, server.url) == (3, [])  # unchanged: reused
        server.card = {**VLLM_CARD, "root": "/models/candidate-b"}  # other weights, same name
        reused, changes = night_against_the_library(tmp_path, server.url)
        assert reused == 0
        (line,) = changes
        assert line == (
            "model srv changed since the library last saw it (server root /models/candidate-a "
            "-> root /models/candidate-b): its trials are sampled anew, none reused"
        )
        assert night_against_the_library(tmp_path, server.url) == (3, [])
        server.version = "0.7.0"  # the same weights under another vLLM
        reused, changes = night_against_the_library(tmp_path, server.url)
        assert reused == 0 and "version 0.6.3 -> version 0.7.0" in changes[0]
        identity = build_campaign(config(server.url)).run.identity["files"][0]["server"]
    assert identity == (
        "id srv; root /models/candidate-b; owned_by vllm; max_model_len 4096; version 0.7.0"
    )


def test_a_server_without_models_says_once_what_the_identity_rests_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from adaptive_eval.backends import served_identity

    served_identity._said.clear()
    with FlakyServer(model="srv", models=False) as server:
        first = build_campaign(config(server.url, revision="r7"))
        again = build_campaign(config(server.url, revision="r7"))
        assert first.run.fingerprint == again.run.fingerprint
        assert first.run.identity["files"][0]["server"] == "card not reported; version none"
        (line,) = capsys.readouterr().err.strip().splitlines()  # once, not per plan
        assert line == (
            f"models[0] (srv): the server at {server.url} reports no model card (GET /models: "
            "HTTP 404); the model's identity rests on its stated revision 'r7' and the name "
            "'srv' only"
        )
        server.models = True  # now it answers: the identity is what it reports
        assert (
            build_campaign(config(server.url, revision="r7")).run.fingerprint
            != first.run.fingerprint
        )
    # No server at all (nothing listens on port 9): planned all the same, and said once.
    served_identity._said.clear()
    lone = build_campaign(config("http://127.0.0.1:9/v1"))
    assert lone.run.identity["files"][0]["server"] == "card not reported; version none"
    err = capsys.readouterr().err
    assert "reports no model card (GET /models: no answer" in err
    assert "rests on the served model name 'srv' (state options.revision" in err


def test_hostile_server_cards_are_bounded_and_escaped() -> None:
    from adaptive_eval.backends.served_identity import query_server, version_url

    card = {"root": "\x1b[31m/evil; id other" + "x" * 5000, "max_model_len": True}
    with FlakyServer(model="srv", card=card, version="1\n2") as server:
        report = query_server(server.url, "srv", {})
    assert report.card is not None and report.card["root"].startswith("\\x1b[31m/evil, id other")
    assert len(report.card["root"]) == 200 and "max_model_len" not in report.card
    assert report.version == "1\\n2"
    assert version_url("http://h:8000/v1/") == "http://h:8000/version"
    assert version_url("https://h/api/v1") == "https://h/api/version"
    assert version_url("https://h/openai") == "https://h/version"


def test_an_older_run_without_the_servers_report_still_resumes(tmp_path: Path) -> None:
    """A run recorded before the server's report joined the identity resumes (its server then
    is unknown); a report of it states the identity it recorded, with a note."""
    from adaptive_eval.loop.rundir import identity_changes

    with FlakyServer(model="srv", card=VLLM_CARD) as server:
        identity = build_campaign(config(server.url)).run.identity
    older = json.loads(json.dumps(identity))
    del older["files"][0]["server"]
    assert identity_changes(older, identity) == []
    (change,) = identity_changes(older, identity, leg=False)
    assert change.startswith("files[0].server: null -> ")
    other = json.loads(json.dumps(identity))
    other["files"][0]["server"] = "card not reported; version none"
    assert identity_changes(other, identity) == []  # an unread card is no identity (issue 40)
    other["files"][0]["server"] = identity["files"][0]["server"].replace("root ", "root /x")
    assert identity_changes(other, identity)  # another model served still refuses a resume


def test_the_nightly_command_names_a_server_serving_other_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through ``adaptive-eval nightly``: an unchanged server's trials are reused; the same name
    served from another ``root`` is sampled anew, and the night says so in one line."""
    import yaml

    from adaptive_eval.command_line.cli import main

    with FlakyServer(model="srv", card=VLLM_CARD, version="0.6.3", answers=ANSWERS) as server:
        data = config(server.url, limit=3).model_dump(mode="json", exclude_none=True)
        data["policy"] = {"min_trials_per_question": 2, "max_trials_per_question": 2}
        data["execution"] = {"dispatch": "inline", "workers": 1, "batch_size": 8}
        path = tmp_path / "nightly.yaml"
        path.write_text(yaml.safe_dump(data))
        history = str(tmp_path / "history")

        def night(date: str) -> str:
            assert main(["nightly", str(path), "--history", history, "--night", date]) == 0
            return capsys.readouterr().out

        assert "sampled 6 trials, reused 0" in night("2026-12-01")
        assert "sampled 0 trials, reused 6" in night("2026-12-02")
        server.card = {**VLLM_CARD, "root": "/models/candidate-b"}
        out = night("2026-12-03")
    assert "sampled 6 trials, reused 0" in out
    (line,) = [x for x in out.splitlines() if "changed since the library" in x]
    assert "(server root /models/candidate-a -> root /models/candidate-b)" in line
