"""Core claims for engines' step loops (``adaptive_eval.backends.cores``).

Claims are ``flock`` locks on one file per core in a host-wide folder; the tests give each a
folder of its own (``tmp_path``) and made-up core sets where the host's cores do not matter.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from helpers import killed_holder

from adaptive_eval.backends.cores import (
    LOCK_DIR_ENV,
    claim_cores,
    claim_listed,
    parse_cpu_list,
    pin_current_thread,
)
from adaptive_eval.backends.vllm_setup import VllmSettings, claim_engine_cpus
from adaptive_eval.base.errors import BackendError

CORES = (0, 1, 2, 3)


def test_engines_on_one_host_claim_distinct_cores_highest_first(tmp_path: Path) -> None:
    first, _ = claim_cores(1, allowed=CORES, folder=tmp_path)
    second, _ = claim_cores(1, allowed=CORES, folder=tmp_path)
    pair, _ = claim_cores(2, allowed=CORES, folder=tmp_path)
    assert first is not None and second is not None and pair is not None
    assert (first.cpus, second.cpus, pair.cpus) == ((3,), (2,), (0, 1))
    none, why = claim_cores(1, allowed=CORES, folder=tmp_path)
    assert none is None and "only 0 of the 4" in why and str(tmp_path) in why
    second.release()
    again, why = claim_cores(1, allowed=CORES, folder=tmp_path)
    assert again is not None and again.cpus == (2,), why
    for claim in (first, pair, again):
        claim.release()


def test_a_link_planted_in_the_shared_folder_is_not_followed(tmp_path: Path) -> None:
    """The claims folder is shared by every user of the host (issue 16, item 5): a lock file
    planted there as a link to someone's file is never opened; that core is left unclaimed."""
    victim = tmp_path / "victim"
    folder = tmp_path / "claims"
    folder.mkdir()
    (folder / "cpu3.lock").symlink_to(victim)
    claim, _ = claim_cores(1, allowed=CORES, folder=folder)
    assert claim is not None and claim.cpus == (2,)
    assert not victim.exists()
    claim.release()


def test_a_partial_claim_is_given_back(tmp_path: Path) -> None:
    held, _ = claim_cores(2, allowed=CORES, folder=tmp_path)  # 2 and 3
    assert held is not None
    none, why = claim_cores(3, allowed=CORES, folder=tmp_path)
    assert none is None and "only 2 of the 4" in why
    rest, _ = claim_cores(2, allowed=CORES, folder=tmp_path)  # the 2 it tried are free again
    assert rest is not None and rest.cpus == (0, 1)


def test_no_pinning_when_the_engine_would_take_every_core(tmp_path: Path) -> None:
    claim, why = claim_cores(4, allowed=CORES, folder=tmp_path)
    assert claim is None and "nothing to pin" in why
    assert list(tmp_path.iterdir()) == []  # and nothing was locked
    with pytest.raises(ValueError, match="at least 1"):
        claim_cores(0, allowed=CORES, folder=tmp_path)


def test_a_killed_process_leaks_no_claim(tmp_path: Path) -> None:
    """The kernel drops a dead process's locks: kill -9 a holder, and its core is free."""
    code = f"""
        import time
        from pathlib import Path
        from adaptive_eval.backends.cores import claim_cores
        claim, why = claim_cores(1, allowed=(0, 1, 2, 3), folder=Path({str(tmp_path)!r}))
        print(claim.cpus[0], flush=True)
        time.sleep(600)
        """
    with killed_holder(code) as (_, held):
        assert held == "3"
        mine, _ = claim_cores(1, allowed=CORES, folder=tmp_path)
        assert mine is not None and mine.cpus == (2,)  # 3 is the other process's
        mine.release()
    after, _ = claim_cores(1, allowed=CORES, folder=tmp_path)
    assert after is not None and after.cpus == (3,)
    after.release()


def test_listed_cores_must_be_the_process_s_own(tmp_path: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    outside = max(allowed) + 1
    with pytest.raises(ValueError, match=rf"core\(s\) \[{outside}\] are not available"):
        claim_listed([outside], folder=tmp_path)
    claim = claim_listed([allowed[0]], folder=tmp_path)
    assert claim.cpus == (allowed[0],)
    # A listed core keeps automatic claims off it.
    auto, _ = claim_cores(1, allowed=(allowed[0], outside), folder=tmp_path)
    assert auto is not None and auto.cpus == (outside,)
    claim.release()
    auto.release()


def test_pinning_holds_the_calling_thread_only() -> None:
    process_cores = os.sched_getaffinity(0)
    core = min(process_cores)
    seen: dict[str, set[int]] = {}

    def body() -> None:
        pin_current_thread([core])
        seen["pinned"] = os.sched_getaffinity(0)
        child = threading.Thread(target=lambda: seen.setdefault("child", os.sched_getaffinity(0)))
        child.start()
        child.join()

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen["pinned"] == {core} and seen["child"] == {core}  # OpenMP's team inherits it
    assert os.sched_getaffinity(0) == process_cores


def test_core_lists_parse_as_linux_writes_them() -> None:
    assert parse_cpu_list("0-3,6") == (0, 1, 2, 3, 6)
    assert parse_cpu_list(" 7 , 2-2") == (2, 7)
    for bad in ("", "a", "3-1", "1-", "-2", "1,,2"):
        with pytest.raises(ValueError, match="not a list of cores"):
            parse_cpu_list(bad)


def test_the_vllm_worker_s_choice_of_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``engine_cpus`` per device and value; on CPU, cores given to vLLM through
    ``VLLM_CPU_OMP_THREADS_BIND`` are the feed thread's (vLLM itself applies them only in the
    processes its multiprocessing executor starts, not to an engine in the actor's process)."""
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path))
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    allowed = sorted(os.sched_getaffinity(0))

    def settings(device: str, engine_cpus: object) -> VllmSettings:
        return VllmSettings("models[2]", "/m", device, {}, 0, engine_cpus=engine_cpus)  # type: ignore[arg-type]

    assert claim_engine_cpus(settings("cpu", "off"), lambda: 1) == (None, "engine_cpus: off")
    claim, why = claim_engine_cpus(settings("cpu", "auto"), lambda: len(allowed))
    assert claim is None and "nothing to pin" in why
    if len(allowed) > 1:
        claim, why = claim_engine_cpus(settings("cuda", "auto"), lambda: 1)
        assert claim is not None and claim.cpus == (allowed[-1],), why
        claim.release()
    claim, why = claim_engine_cpus(settings("cpu", (allowed[0],)), lambda: 1)
    assert (
        claim is not None
        and claim.cpus == (allowed[0],)
        and why == f"listed core(s) [{allowed[0]}]"
    )
    claim.release()
    with pytest.raises(BackendError, match=r"models\[2\]\.options\.engine_cpus: core\(s\)"):
        claim_engine_cpus(settings("cpu", (max(allowed) + 1,)), lambda: 1)
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", f"{allowed[0]}|{max(allowed) + 1}")
    claim, why = claim_engine_cpus(settings("cpu", "auto"), lambda: len(allowed))
    assert claim is not None and claim.cpus == (allowed[0],) and "THREADS_BIND" in why
    claim.release()
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-x")
    claim, why = claim_engine_cpus(settings("cpu", "auto"), lambda: 1)
    assert claim is None and "not a list of cores" in why and "not pinned" in why
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    claim, why = claim_engine_cpus(settings("cpu", "auto"), lambda: len(allowed))
    assert claim is None and "nothing to pin" in why
