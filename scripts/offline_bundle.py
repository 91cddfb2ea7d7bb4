"""Bundle vLLM, Ray and this project's needs for a GPU host that has PyTorch but no package index.

    python scripts/offline_bundle.py --have have.txt --out bundle/          # wheels + site.tar.xz
    python scripts/offline_bundle.py --have have.txt --out bundle/ --split 60M

On the host (Python 3.12, the bundle's parts joined with ``cat``)::

    mkdir -p /tmp/site && tar -xJf site.tar.xz -C /tmp/site
    python3 -m pip install --no-index --no-deps --no-build-isolation --target /tmp/site .
    export PYTHONPATH=/tmp/site

``--have`` lists the distributions the host already has (names, separated by commas, spaces or
lines: ``pip list --format freeze`` there, or an image's package list); they are not carried.
The closure follows each wheel's ``Requires-Dist`` (markers evaluated for CPython 3.12 on x86-64
Linux), skipping what the host has and what vLLM imports only inside ``try``/``except``
(:data:`OPTIONAL`); each missing wheel is fetched with ``pip download --no-deps``. The wheels are
unpacked into one site folder (no pip on this side: the target's Python is not this one), parts
a Hopper GPU serving a dense model never loads are removed (:data:`PRUNE`), and the folder is
packed with xz. The H100 figures in docs/generation.md (2026-11-25) ran on a bundle made by
these steps by hand; this script's own (91 wheels, 404 MiB pruned, 168 MiB packed) was built
here but not yet installed on a GPU. Found there, and handled here: vLLM 0.26.0 pins
``apache-tvm-ffi==0.1.10`` but its ``xgrammar`` 0.2.8 needs 0.1.11 or later (``--pin``), and
without FlashInfer the engine needs ``VLLM_USE_FLASHINFER_SAMPLER=0`` (the ``vllm`` backend sets
it itself).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

#: Marker environment of the target: CPython 3.12 on x86-64 Linux.
TARGET = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "platform_machine": "x86_64",
    "platform_system": "Linux",
    "sys_platform": "linux",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}
#: vLLM requirements it imports only inside try/except (or for other GPUs, video, or
#: speculative decoding), and the torch family the host must already have.
OPTIONAL = frozenset(
    canonicalize_name(name)
    for name in (
        "torchcodec",
        "PyNvVideoCodec",
        "flashinfer-python",
        "tilelang",
        "nvidia-cudnn-frontend",
        "fastsafetensors",
        "nvidia-cutlass-dsl",
        "quack-kernels",
        "humming-kernels",
        "tokenspeed-mla",
        "numba",
        "setuptools",
        "torch",
        "torchaudio",
        "torchvision",
    )
)
#: Files in the unpacked site a Hopper GPU serving a dense model never loads: FlashAttention 2
#: (Hopper uses FA3), the optional Rust API server, Blackwell kernels, Java, source maps, and
#: extensions built for other Pythons.
PRUNE = (
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",
    "vllm/vllm-rs",
    "vllm/third_party/fmha_sm100",
    "ray/jars",
)
PRUNE_PATTERNS = (
    re.compile(r"\.cpython-31[0134]-x86_64-linux-gnu\.so$"),
    re.compile(r"\.js\.map$"),
)
PLATFORMS = tuple(
    [f"manylinux_2_{minor}_x86_64" for minor in (39, 35, 34, 31, 28, 27, 24, 17, 5)]
    + ["manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64"]
)


def read_names(text: str) -> set[str]:
    """Distribution names from a list separated by commas, spaces or lines (``name==1.0`` too)."""
    names = set()
    for word in re.split(r"[,\s]+", text):
        name = re.split(r"[=<>!~\[;]", word, maxsplit=1)[0].strip()
        if name:
            names.add(canonicalize_name(name))
    return names


def wheel_name(path: Path) -> str:
    """The canonical distribution name of a wheel file."""
    return canonicalize_name(path.name.split("-", 1)[0])


def wheel_requirements(path: Path, extras: Iterable[str] = ()) -> Iterator[Requirement]:
    """The wheel's ``Requires-Dist`` that apply on the target, with ``extras`` asked for."""
    with zipfile.ZipFile(path) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(meta).decode("utf-8")
    wanted = set(extras) or {""}
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = Requirement(line.split(":", 1)[1].strip())
        marker: Marker | None = requirement.marker
        if marker is None or any(marker.evaluate({**TARGET, "extra": e}) for e in wanted):
            yield requirement


def closure(
    roots: Iterable[str],
    have: set[str],
    wheels: Path,
    fetch: Callable[[str, Path], None],
    pins: Iterable[str] = (),
) -> list[str]:
    """Fetch every wheel ``roots`` need on the target that it lacks; return what failed.

    ``pins`` replace the requirement of the same name wherever it appears (a version the
    resolver would not pick, e.g. one that an indirect requirement needs).
    """
    pinned = {canonicalize_name(Requirement(p).name): Requirement(p) for p in pins}
    queue = [Requirement(root) for root in roots]
    seen: set[tuple[str, tuple[str, ...]]] = set()
    failed = []
    found = {wheel_name(p): p for p in wheels.glob("*.whl")}
    while queue:
        requirement = queue.pop(0)
        name = canonicalize_name(requirement.name)
        requirement = pinned.get(name, requirement)
        key = (name, tuple(sorted(requirement.extras)))
        if key in seen or name in OPTIONAL or name in have:
            continue
        seen.add(key)
        if name not in found:
            spec = f"{requirement.name}{requirement.specifier}"
            try:
                fetch(spec, wheels)
            except subprocess.CalledProcessError:
                failed.append(spec)
                continue
            found = {wheel_name(p): p for p in wheels.glob("*.whl")}
            if name not in found:
                failed.append(spec)
                continue
        queue.extend(wheel_requirements(found[name], requirement.extras))
    return failed


def pip_download(spec: str, wheels: Path) -> None:
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"),
            *("--python-version", "3.12", "--implementation", "cp", *platforms),
            *("-d", str(wheels), spec),
        ],
        check=True,
        capture_output=True,
    )


def unpack(wheels: Iterable[Path], site: Path) -> None:
    """Install wheels by unpacking them (``.data/purelib|platlib`` to the root, scripts to bin)."""
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                parts = info.filename.split("/")
                name = info.filename
                if parts[0].endswith(".data") and len(parts) > 2:
                    if parts[1] in ("purelib", "platlib"):
                        name = "/".join(parts[2:])
                    elif parts[1] == "scripts":
                        name = "bin/" + "/".join(parts[2:])
                    else:
                        continue
                target = site / name
                if name.endswith("/"):
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as source, open(target, "wb") as sink:
                    shutil.copyfileobj(source, sink)
                if (info.external_attr >> 16) & 0o111:
                    target.chmod(0o755)


def prune(site: Path) -> int:
    """Remove :data:`PRUNE` and files matching :data:`PRUNE_PATTERNS`; return bytes removed."""
    removed = 0
    for relative in PRUNE:
        path = site / relative
        if path.is_dir():
            removed += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            shutil.rmtree(path)
        elif path.is_file():
            removed += path.stat().st_size
            path.unlink()
    for path in list(site.rglob("*")):
        if path.is_file() and any(p.search(path.name) for p in PRUNE_PATTERNS):
            removed += path.stat().st_size
            path.unlink()
    return removed


def parse_size(text: str) -> int:
    match = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not match:
        raise argparse.ArgumentTypeError(f"--split: expected a size like 56M, got {text!r}")
    return int(match.group(1)) * 1024 ** " KMG".index(match.group(2) or " ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--have", type=Path, required=True, help="the host's distributions")
    parser.add_argument("--out", type=Path, required=True, help="bundle folder")
    parser.add_argument(
        "--requirement",
        action="append",
        default=[
            *("vllm==0.26.0", "ray==2.60.0", "pydantic>=2.12", "structlog>=24.1"),
            "math-verify[antlr4_13_2]>=0.7",
        ],
        help="a further root requirement (repeatable; added to vLLM, Ray, the project's needs)",
    )
    parser.add_argument(
        "--pin",
        action="append",
        default=["apache-tvm-ffi>=0.1.11,<0.2"],
        help="a further pin replacing a requirement wherever it appears (repeatable)",
    )
    parser.add_argument("--split", type=parse_size, help="split the bundle into parts this size")
    args = parser.parse_args(argv)
    try:
        have = read_names(args.have.read_text())
    except (OSError, UnicodeDecodeError) as error:
        parser.error(f"--have {args.have}: {error}")
    wheels = args.out / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    failed = closure(args.requirement, have, wheels, pip_download, args.pin)
    if failed:
        print(f"offline_bundle: could not fetch {', '.join(failed)}", file=sys.stderr)
        return 1
    site = args.out / "site"
    shutil.rmtree(site, ignore_errors=True)
    unpack(sorted(wheels.glob("*.whl")), site)
    removed = prune(site)
    bundle = args.out / "site.tar.xz"
    with tarfile.open(bundle, "w:xz", preset=6) as tar:
        tar.add(site, arcname=".")
    count = len(list(wheels.glob("*.whl")))
    size = bundle.stat().st_size
    print(f"{count} wheels, {removed / 2**20:.0f} MiB pruned, {bundle}: {size / 2**20:.0f} MiB")
    if args.split:
        with open(bundle, "rb") as source:
            for index in range(-(-size // args.split)):
                part = args.out / f"site.tar.xz.part{index}"
                part.write_bytes(source.read(args.split))
                print(part, os.path.getsize(part))
    return 0


if __name__ == "__main__":
    sys.exit(main())
