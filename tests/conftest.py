from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """One local Ray cluster for every test that needs one."""
    import ray

    from adaptive_eval.dispatch import init_ray

    init_ray(None, 2)
    yield
    ray.shutdown()
