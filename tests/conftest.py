from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from adaptive_eval.dispatch.cluster import RAY_ENVIRONMENT

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
# Ray reads its environment when first imported, and tests import it before init_ray: the
# session's cluster gets the run's settings (no folded "[repeated Nx]" worker lines) here.
os.environ.update({k: os.environ.get(k, v) for k, v in RAY_ENVIRONMENT.items()})
# Under pytest-xdist (`make test` runs two or more workers) each worker gets a Ray temp folder
# and a core-claims folder of its own: `ray.init()` with no address joins the cluster that the
# last `ray start` recorded in its temp folder, and engines claim cores host-wide; a test on one
# worker must not join or block another worker's.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER:
    os.environ.setdefault("RAY_TMPDIR", f"/tmp/ae-ray-{_WORKER}")
    os.environ.setdefault("ADAPTIVE_EVAL_CORE_LOCKS", f"/tmp/ae-cores-{_WORKER}")
    Path(os.environ["RAY_TMPDIR"]).mkdir(exist_ok=True)

#: Tests that start vLLM engines run on one xdist worker, one after another (`--dist
#: loadgroup`): two engines at once would each claim the same cores and most of the memory.
#: Under pytest 9.2 with pytest-xdist 3.8 the group has no effect (xdist writes it into the
#: item's ``_nodeid``, which pytest 9 no longer reads): `make test` runs these tests in a
#: pytest of their own, without workers.
SERIAL_GROUP = "vllm-engines"
#: The fixtures that give a test a local Ray cluster.
RAY_FIXTURES = frozenset({"ray_local", "ray_module"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("vllm"):
            item.add_marker(pytest.mark.xdist_group(SERIAL_GROUP))


# The tests' dispatch mode registers from this copy of helpers, before a second import of the
# file under another name (doctest collection) could.
importlib.import_module("helpers")


# A command keeps ignoring a stop signal its caller ignored (as nohup's children must). A suite
# started in the background or under nohup (SIGINT and SIGHUP ignored) handed that to every run
# it started, and the signal tests' SIGINT and SIGHUP did nothing: the tests take the defaults.
for _signum, _default in (
    (signal.SIGINT, signal.default_int_handler),
    (signal.SIGHUP, signal.SIG_DFL),
):
    if signal.getsignal(_signum) is signal.SIG_IGN:
        signal.signal(_signum, _default)


@pytest.fixture(autouse=True)
def stop_signals_as_they_were() -> Iterator[None]:
    """Each test ends with the stop signals' handlers it began with: a command stopped by a
    signal in this process leaves them ignored to the end of the process (by design), which
    would reach every later test and the runs they start."""
    from adaptive_eval.base.interrupts import STOP_SIGNALS

    handlers = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    yield
    for signum, handler in handlers.items():
        if handler is not None:
            signal.signal(signum, handler)


@pytest.fixture(scope="session")
def _ray_to_the_end() -> Iterator[None]:
    yield
    _stop_local_ray()


def _stop_local_ray() -> None:
    """End the Ray session of this process, whoever began it (``stop_ray`` ends only one that
    ``init_ray`` began and left marked as a command's; a test may have called ``ray.init``)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


@pytest.fixture(autouse=True)
def _no_ray_unless_asked(request: pytest.FixtureRequest) -> None:
    """A test that did not ask for a Ray cluster starts without one. A cluster left up by the
    tests before it stood in for the one its command's ``execution.ray_address`` names (and
    ``ray_local``'s cluster, shared across a worker's tests, was ended by an in-process command
    between them: "Ray has not been started yet"); consecutive Ray tests still share one."""
    if not RAY_FIXTURES & set(request.fixturenames):
        _stop_local_ray()


@pytest.fixture()
def ray_local(_ray_to_the_end: None) -> None:
    """A local Ray cluster (2 CPUs) for this test: the one the Ray tests before it left up,
    else a new one."""
    from adaptive_eval.dispatch.cluster import init_ray

    init_ray(None, 2)


@pytest.fixture(scope="module")
def ray_module() -> Iterator[None]:
    """:func:`ray_local` for a whole module whose fixtures hold actors across its tests."""
    from adaptive_eval.dispatch.cluster import init_ray

    init_ray(None, 2)
    yield
    _stop_local_ray()


@pytest.fixture()
def finished_run(tmp_path: Path) -> tuple[Path, Path]:
    """A finished in-process run (no Ray) with its outputs written by ``report``:
    (config path, run directory)."""
    from helpers import base_config, load, mimic_success, run_inline, write_config, write_scenario

    from adaptive_eval.command_line.cli import main

    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.5, 0.7], questions=10))
    config_path = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    run_dir = tmp_path / "run"
    run_inline(load(config_path), run_dir)
    assert main(["report", str(run_dir), "--json"]) == 0
    return config_path, run_dir


@pytest.fixture()
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``tmpfs(size)``: a fresh tmpfs of that size (``"2m"``) mounted under ``tmp_path``, for
    real full-disk and read-only file system tests; unmounted afterwards. Skips, saying why,
    where this process may not mount (not root, or no mount namespace rights)."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        point = tmp_path / f"tmpfs{len(mounted)}"
        point.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(point)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            reason = f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}"
            print(f"SKIP REASON: {reason}")
            pytest.skip(reason)
        mounted.append(point)
        return point

    yield mount
    for point in reversed(mounted):
        subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.fixture()
def no_ray() -> Iterator[list[dict[str, Any]]]:
    """``run`` in-process without Ray: the tests' own dispatch mode (``test_inline``, chosen on
    the command line with ``*TEST_DISPATCH``); returns its launches (empty: no worker started)."""
    from helpers import LAUNCHES, InlineCluster

    LAUNCHES.clear()
    InlineCluster.on_poll = None
    yield LAUNCHES
    InlineCluster.on_poll = None
