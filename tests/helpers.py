"""Builders shared by the tests: scenario files, configs, in-process campaigns."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from adaptive_eval._testing.dispatch import UnrulyInlineDispatcher
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.config.schema import CampaignConfig, load_config
from adaptive_eval.control.controller import Controller
from adaptive_eval.decide.contracts import CampaignView
from adaptive_eval.decide.state import RunState
from adaptive_eval.dispatch import InlineDispatcher, LaunchRequest, dispatch_modes
from adaptive_eval.loop.rundir import open_run_dir
from adaptive_eval.store import TrialStore

#: The recorded trials' identity and outcome, as the ledger comparisons read them.
LEDGER_COLUMNS = "model, question, trial, seed, category, tokens, round"


def write_scenario(
    path: Path, success: np.ndarray, *, tokens: bool = True, names: list[str] | None = None
) -> Path:
    """A binary simulated scenario from an (L, M) matrix of success probabilities."""
    probs = np.stack([1 - success, success], axis=2)
    arrays: dict[str, Any] = {"probs": probs}
    if names is not None:
        arrays["models"] = np.array(names)
    if tokens:
        arrays["tokens_mean"] = np.full(success.shape, 100.0)
    np.savez(path, **arrays)
    return path


def mimic_success(scores: list[float], questions: int = 20, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = np.clip(rng.beta(4, 4, size=(len(scores), questions)), 0.02, 0.98)
    return np.clip(raw - raw.mean(axis=1, keepdims=True) + np.array(scores)[:, None], 0.01, 0.99)


def served_campaign(
    url: str, name: str, seed: int, options: dict[str, Any], **execution: Any
) -> dict[str, Any]:
    """A campaign of one ``openai`` model at ``url`` on three arithmetic questions, two trials
    each (the hostile-server tests' campaign); ``options`` the backend's, ``execution`` added to
    one worker."""
    from adaptive_eval.inputs.datasets import ARITH20

    return {
        "name": name,
        "seed": seed,
        "models": [
            {
                "backend": "openai",
                "name": "srv",
                "workers": 1,
                "options": {"base_url": url, **options},
            }
        ],
        "rubric": {"weights": [0, 1]},
        "dataset": {"path": str(ARITH20), "limit": 3},
        "sampling": {"max_tokens": 16},
        "policy": {"min_trials_per_question": 2, "max_trials_per_question": 2, "round_trials": 6},
        "execution": {"workers": 1, **execution},
        "output": {"progress": False, "fsync": "normal"},
    }


def write_config(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def base_config(scenario: str, **policy: Any) -> dict[str, Any]:
    return {
        "name": "t",
        "seed": 7,
        "models": [{"backend": "simulated", "path": scenario}],
        "rubric": {"weights": [0, 1]},
        "policy": {
            "confidence": 0.95,
            "rope": 0.03,
            "min_trials_per_question": 2,
            "max_trials_per_question": 40,
            "round_trials": 64,
            **policy,
        },
        "baseline": {"fixed_n": 20},
        "execution": {"workers": 1, "batch_size": 16},
        "output": {"progress": False, "fsync": "normal"},
    }


class NullLog:
    """A structlog stand-in that remembers events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        def log(event: str, **kw: Any) -> None:
            self.events.append((level, event, kw))

        return log


def timeshare_config(
    load_s: float, slots: int | None, latency: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Three swappable simulated models "a", "b", "c" (one worker each) of ``s.npz`` sharing
    ``slots`` worker slots (None: a slot per model); ``latency`` emulates each one's engine."""
    data = base_config("s.npz", max_trials_per_question=12, round_trials=96)
    data["models"] = [
        {
            "backend": "simulated",
            "path": "s.npz",
            "select": [name],
            "workers": 1,
            "options": {"swappable": True, "load_s": load_s, "devices": 1},
            **({"latency": latency} if latency is not None else {}),
        }
        for name in ("a", "b", "c")
    ]
    data["execution"] = {"gpu_slots": slots, "batch_size": 16, "workers": 1}
    return data


def run_inline(config: CampaignConfig, run_dir: Path, **dispatch: Any) -> Controller:
    """Run a campaign to its end in this process (no Ray); ``dispatch``: the options of
    :class:`UnrulyInlineDispatcher` (``shuffle_seed``, ``crash_after``, ``batches_per_poll``)."""
    campaign = build_campaign(config)
    store, _, _ = open_run_dir(campaign, run_dir)
    dispatcher = UnrulyInlineDispatcher(campaign.run.plans, campaign.run.offsets, **dispatch)
    controller = Controller(campaign, store, dispatcher, NullLog())
    try:
        controller.run()
    finally:
        store.close()
    return controller


def load(path: Path, overrides: list[str] | None = None) -> CampaignConfig:
    return load_config(path, overrides)


def trials_in(store: Path) -> int:
    """Trials recorded in a store file (0 while it cannot be read: not created yet)."""
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as conn:
            count = int(conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0])
        conn.close()
        return count
    except sqlite3.Error:
        return 0


def ledger(run_dir: Path, columns: str = LEDGER_COLUMNS) -> list[tuple[Any, ...]]:
    """A run's recorded trials (``columns``, which start with model, question, trial), in
    (model, question, trial) order."""
    store = TrialStore(run_dir, readonly=True)
    try:
        return store.conn.execute(
            f"SELECT {columns} FROM trials ORDER BY model, question, trial"
        ).fetchall()
    finally:
        store.close()


@contextlib.contextmanager
def killed_holder(code: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A Python process running ``code`` (it takes a lock, prints one line, then sleeps):
    yields the process and that line, and kills it with SIGKILL on leaving, as a crash would."""
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        yield holder, holder.stdout.readline().strip()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


class InlineCluster:
    """The ``test_inline`` dispatch mode's workers: the in-process dispatcher, with a hook.
    ``InlineCluster.on_poll``, when set, is called with the dispatcher before each poll."""

    on_poll: Callable[[Any], None] | None = None

    def __new__(cls, plans: Any, offsets: Any, **options: Any) -> Any:

        hook = cls.on_poll

        class _Hooked(InlineDispatcher):
            def poll(self, timeout: float) -> Any:
                if hook is not None:
                    hook(self)
                return super().poll(timeout)

        return _Hooked(plans, offsets, on_event=options.get("on_event") or (lambda *e: None))


#: Every launch of the ``test_inline`` dispatch mode: what the run asked of Ray (``quiet``).
LAUNCHES: list[dict[str, Any]] = []
#: The command-line arguments that choose it.
TEST_SET = "execution.dispatch=test_inline"
TEST_DISPATCH = ("--set", TEST_SET)


def launch_test_inline(request: LaunchRequest) -> Any:
    """A dispatch mode of the tests' own, registered as a third party would: it records each
    launch (an empty :data:`LAUNCHES` says the workers never started) and runs the workers in
    this process (:class:`InlineCluster`)."""
    LAUNCHES.append({"quiet": request.quiet, "ray_address": request.execution.ray_address})
    return InlineCluster(request.plans, request.offsets, on_event=request.on_event)


# Once per process: pytest may import this file a second time under another name (the doctest
# collection, ``tests.helpers``); conftest imports it first, so that copy's LAUNCHES and
# InlineCluster are the ones the registered mode uses.
if "test_inline" not in dispatch_modes.names():
    dispatch_modes.register("test_inline")(launch_test_inline)


def count_view(
    counts: np.ndarray,
    capacity: int = 400,
    rope: float | None = 0.02,
    error_control: str = "pair",
    futility: float = 0.0,
) -> CampaignView:
    """The view of a binary campaign holding ``counts`` (L, M, 2), as one applied round."""
    state = RunState(np.ones(counts.shape), np.array([0.0, 1.0]))
    state.add_plan(counts.sum(axis=2))
    state.apply_counts(counts)
    num = counts.shape[0]
    return state.view(
        tuple(f"m{i}" for i in range(num)),
        np.full(num, capacity),
        0.95,
        2,
        0.0,
        rope=rope,
        error_control=error_control,
        futility=futility,
    )


# -- a real `adaptive-eval run` in a session of its own (signals, interrupts) -------------------

#: The console script of the environment running the tests.
CLI = Path(sys.executable).with_name("adaptive-eval")
#: The command line in a process of its own without the watcher: ``[*CLI_MODULE, "run", ...]``.
CLI_MODULE = (sys.executable, "-m", "adaptive_eval.command_line.cli")


def session_processes(sid: int) -> list[str]:
    """Live processes of session ``sid`` (a run started its own), as "pid command" lines."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(f"{entry.name} {command[:120]}")
    return found


def slow_run_command(tmp_path: Path) -> tuple[list[str], Path]:
    """An ``adaptive-eval run`` command on Ray whose batches take 0.2 s (it runs for a while)."""
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.5, 0.7], questions=8))
    data = base_config("s.npz", max_trials_per_question=60)
    data["models"][0]["latency"] = {"per_batch_s": 0.2}
    data["execution"] = {"workers": 1, "batch_size": 8, "num_cpus": 2}
    config = write_config(tmp_path / "c.yaml", data)
    run_dir = tmp_path / "run"
    return [str(CLI), "run", str(config), "--out", str(run_dir)], run_dir


def start_run(command: list[str], run_dir: Path, least: int = 16) -> subprocess.Popen[str]:
    """The command in a session of its own, once its store holds ``least`` trials."""
    process = subprocess.Popen(
        command, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 240
    while trials_in(run_dir / "trials.sqlite") < least:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the run recorded no trials in 240 s"
        time.sleep(0.2)
    return process


def assert_session_ended(sid: int, wait_s: float) -> None:
    """Every process of session ``sid`` is gone within ``wait_s`` (Ray's get a moment to
    exit); whatever is left is killed, even when the assertion fails."""
    deadline = time.monotonic() + wait_s
    while session_processes(sid) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = session_processes(sid)
    for line in left:
        os.kill(int(line.split()[0]), signal.SIGKILL)
    assert not left, f"processes left running: {left}"


def one_error_line(err: str) -> str:
    """The one error line of a command's stderr (warnings logged before it aside)."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("adaptive-eval:")]
    assert len(lines) == 1, err
    return lines[0]
