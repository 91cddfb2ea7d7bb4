"""scripts/offline_bundle.py: the wheel closure for a GPU host with no package index."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location(
    "offline_bundle", ROOT / "scripts" / "offline_bundle.py"
)
assert spec is not None and spec.loader is not None
offline_bundle = importlib.util.module_from_spec(spec)
sys.modules["offline_bundle"] = offline_bundle
spec.loader.exec_module(offline_bundle)


def make_wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        meta = "".join(f"Requires-Dist: {r}\n" for r in requires)
        archive.writestr(f"{name}-{version}.dist-info/METADATA", f"Name: {name}\n{meta}")
        archive.writestr(f"{name}/__init__.py", "")
        archive.writestr(f"{name}-{version}.data/purelib/{name}_extra.py", "X = 1\n")
        archive.writestr(f"{name}-{version}.data/scripts/{name}-cli", "#!/bin/sh\n")
    return path


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    index = tmp_path / "index"
    index.mkdir()
    make_wheel(
        index,
        "engine",
        "1.0",
        [
            "helper>=1",
            "torch==2.11.0",  # the host's own: never carried
            "flashinfer-python==0.6",  # optional: never carried
            'oldpy; python_version < "3.11"',
            'fancy; extra == "fancy"',
            "tvmffi==0.1.10",
            "present",
        ],
    )
    make_wheel(index, "helper", "1.2", ["leaf"])
    make_wheel(index, "leaf", "0.1", [])
    make_wheel(index, "fancy", "2.0", [])
    make_wheel(index, "tvmffi", "0.1.15", [])
    return index


def fetch_from(index: Path, fetched: list[str]):  # type: ignore[no-untyped-def]
    def fetch(requirement: str, wheels: Path) -> None:
        fetched.append(requirement)
        name = offline_bundle.Requirement(requirement).name
        for wheel in index.glob(f"{name}-*.whl"):
            shutil.copy(wheel, wheels)

    return fetch


def test_closure_follows_requirements_for_the_target_only(registry: Path, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    fetched: list[str] = []
    failed = offline_bundle.closure(
        ["engine"], {"present"}, wheels, fetch_from(registry, fetched), ["tvmffi>=0.1.11"]
    )
    assert failed == []
    got = sorted(p.name.split("-")[0] for p in wheels.glob("*.whl"))
    assert got == ["engine", "helper", "leaf", "tvmffi"]
    assert "tvmffi>=0.1.11" in fetched  # the pin replaced engine's ==0.1.10
    assert not any(r.startswith(("torch", "flashinfer", "oldpy", "fancy")) for r in fetched)


def test_closure_takes_extras_and_reports_what_it_cannot_fetch(
    registry: Path, tmp_path: Path
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    failed = offline_bundle.closure(
        ["engine[fancy]", "missing>=1"], set(), wheels, fetch_from(registry, [])
    )
    assert failed == ["missing>=1", "present"]
    assert (wheels / "fancy-2.0-py3-none-any.whl").exists()


def test_unpack_places_data_folders_and_prune_removes_unused_parts(
    registry: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    offline_bundle.unpack([registry / "helper-1.2-py3-none-any.whl"], site)
    assert (site / "helper" / "__init__.py").exists()
    assert (site / "helper_extra.py").read_text() == "X = 1\n"
    assert (site / "bin" / "helper-cli").exists()
    fa2 = site / "vllm" / "vllm_flash_attn" / "_vllm_fa2_C.abi3.so"
    fa2.parent.mkdir(parents=True)
    fa2.write_bytes(b"x" * 10)
    other_python = site / "vllm" / "_C.cpython-313-x86_64-linux-gnu.so"
    other_python.write_bytes(b"x" * 5)
    kept = site / "vllm" / "_C.cpython-312-x86_64-linux-gnu.so"
    kept.write_bytes(b"x")
    assert offline_bundle.prune(site) == 15
    assert not fa2.exists() and not other_python.exists() and kept.exists()


def test_host_lists_and_sizes_are_read_as_written() -> None:
    names = offline_bundle.read_names("torch==2.11.0, numpy\nPyYAML>=6 Typing_Extensions")
    assert names == {"torch", "numpy", "pyyaml", "typing-extensions"}
    assert offline_bundle.parse_size("56M") == 56 * 2**20
    with pytest.raises(Exception, match="56 MB"):
        offline_bundle.parse_size("56 MB")


def test_an_unreadable_host_list_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        offline_bundle.main(["--have", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "b")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--have" in err and "nope.txt" in err and "Traceback" not in err
