"""Where a run's numbers came from: inputs and their hashes, sampling, grader, package versions.

Read back from the run folder alone (``config.yaml`` as copied at the start, with absolute paths,
and the store's recorded identity, which holds the content hash of every input file and the
engine of every generating model), so ``adaptive-eval report DIR`` can state it for any run,
finished or not. The package versions are the run's own, recorded in its store when it started
(:func:`adaptive_eval.loop.rundir.record_packages`; a resume under other versions adds them to
``packages_later``); ``report_build`` is the environment that wrote the report, stated apart
from them. A run recorded before versions were kept has ``packages: null``.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from adaptive_eval.base.errors import printable
from adaptive_eval.base.summary_schema import Provenance
from adaptive_eval.config.registry import backends
from adaptive_eval.loop import rundir

if TYPE_CHECKING:
    from adaptive_eval.store import TrialStore

#: How each recorded input is named in report.md (a model's identity, labelled for what it is).
ROLES = {
    "model_files": "content sha256 of every file in the model folder",
    "tokenizer_files": "content sha256 of every file in the tokenizer folder",
    "chat_template": "chat template sha256",
    "scenario": "scenario file sha256",
    "outcomes": "replay file sha256",
    # Runs recorded before every byte of a model folder was hashed.
    "model": "model folder manifest (config and tokenizer bytes, other files' names and sizes "
    "only)",
}
#: Recorded inputs that are descriptions, not digests: a vLLM model's engine, and what an
#: OpenAI-compatible server reported serving when the campaign was planned.
DESCRIPTIONS = ("engine", "server")


#: The most distinct server reports listed per model.
MAX_SERVED = 5


def _served(store: TrialStore) -> dict[str, list[str]]:
    """What OpenAI-compatible servers reported serving, per model name: ``model`` and
    ``system_fingerprint`` of their responses, as recorded in the trials' signals."""
    names = [str(n) for n in store.get_meta("models") or []]
    out: dict[str, list[str]] = {}
    for model, served, fingerprint in store.served_reports(limit=100):
        if not 0 <= model < len(names):
            continue
        # A server's words, shown in report.md and report.html: control characters escaped.
        text = printable(str(served)[:200]) + (
            f" ({printable(str(fingerprint)[:200])})" if fingerprint else ""
        )
        listed = out.setdefault(names[model], [])
        if text not in listed and len(listed) < MAX_SERVED:
            listed.append(text)
    return out


def collect(run_dir: Path, store: TrialStore | None = None) -> Provenance:
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
    served: dict[str, list[str]] = {}
    packages: Any = None
    later: Any = None
    changes: Any = None
    if store is not None or (run_dir / TrialStore.FILENAME).exists():
        with reading(run_dir, store) as opened:
            identity = opened.get_meta("identity") or {}
            files = list(identity.get("files") or [])
            extensions = list(opened.get_meta("extensions") or [])
            reused = int(opened.get_meta("library_reused") or 0)
            recorded = opened.count_trials()
            packages = opened.get_meta("packages")
            later = opened.get_meta("packages_later")
            changes = opened.get_meta("library_changes")
            served = _served(opened)
    models = []
    for index, entry in enumerate(config.get("models") or []):
        hashes = files[index] if index < len(files) else {}
        options = entry.get("options") if isinstance(entry.get("options"), dict) else {}
        models.append(
            {
                "backend": entry.get("backend"),
                "path": entry.get("path"),
                "name": entry.get("name"),
                "select": entry.get("select"),
                "revision": options.get("revision"),
                "sha256": {
                    k: v for k, v in hashes.items() if k != "dataset" and k not in DESCRIPTIONS
                },
                "engine": hashes.get("engine"),
                "server": hashes.get("server"),
            }
        )
        if backends.traits(entry.get("backend")).served:
            name = entry.get("name") or options.get("model")
            models[-1]["served"] = served.get(str(name), [])
    dataset = None
    if config.get("dataset"):
        digest = next((f["dataset"] for f in files if "dataset" in f), None)
        dataset = {
            "path": config["dataset"].get("path"),
            "limit": config["dataset"].get("limit"),
            "sha256": digest,
        }
    generating = dataset is not None
    found = {
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
        else {
            "path": config["library"],
            "reused": reused,
            "sampled": recorded - reused,
            "changes": [str(x) for x in changes] if isinstance(changes, list) else [],
        },
        "packages": packages if isinstance(packages, dict) else None,
        "packages_later": later if isinstance(later, list) and later else None,
        "report_build": rundir.package_versions(),
    }
    return Provenance.model_validate(found)


def markdown(
    provenance: Provenance,
    text: Callable[[object], str] = str,
    code: Callable[[object], str] = lambda value: f"`{value}`",
) -> list[str]:
    """The provenance section of report.md, from summary.json's validated ``provenance`` block.
    ``text`` and ``code`` place names and paths from the user's files
    (:mod:`adaptive_eval.base.markdown`); report.html keeps the defaults (plain text, backtick
    spans), escapes the lines and turns the spans into ``<code>``."""
    lines = ["## Provenance", ""]
    lines.append(f"- Report written {provenance.written_utc}; campaign seed {provenance.seed}.")
    for index, model in enumerate(provenance.models):
        label = model.name or ", ".join(model.select or []) or "all models in the file"
        parts = [
            f"{ROLES.get(k, k + ' sha256')} {code(str(v)[:16])}" for k, v in model.sha256.items()
        ]
        if model.revision is not None:
            parts.insert(0, f"revision {code(model.revision)} (stated)")
        if model.engine:
            parts.append(f"engine: {text(model.engine)}")
        if model.server:
            parts.append(f"server's model card at planning: {text(model.server)}")
        if model.served:
            parts.append(f"the server reported serving {text(', '.join(model.served))}")
        lines.append(
            f"- models[{index}]: {text(model.backend)} {code(model.path)} ({text(label)})"
            + (f"; {'; '.join(parts)}" if parts else "")
        )
    dataset = provenance.dataset
    if dataset is not None:
        digest = dataset["sha256"] or "unknown"
        limit = f", first {dataset['limit']} questions" if dataset["limit"] else ""
        lines.append(f"- Dataset {code(dataset['path'])} (sha256 {code(digest)}{limit}).")
    if provenance.sampling is not None:
        sampling = ", ".join(f"{k}={v}" for k, v in provenance.sampling.items())
        lines.append(f"- Sampling: {text(sampling)}.")
    if provenance.grader is not None:
        lines.append(f"- Grader: {text(provenance.grader)}.")
    lines.append(f"- Rubric weights: {provenance.rubric}.")
    library = provenance.library
    if library is not None:
        lines.append(
            f"- Trial library {code(library.path)}: {library.reused} trial(s) reused from "
            f"it, {library.sampled} sampled by this run"
            + (
                f" (counting only those, {100 * library.saved_fraction:.1f}% of the fixed-N "
                "run's trials saved)."
                if library.saved_fraction is not None
                else "."
            )
        )
        for change in library.changes:
            lines.append(f"- Trial library: {text(change)}.")
    for ext in provenance.extensions:
        lines.append(
            f"- Extended after {ext['trials']} trials: limits {ext['from']} -> {ext['to']}."
        )

    def versions(found: dict[str, Any]) -> str:
        return ", ".join(f"{k} {v}" for k, v in found.items())

    recorded = provenance.packages
    if recorded:
        lines.append(f"- Packages the run used: {text(versions(recorded))}.")
    else:
        lines.append("- Packages the run used: not recorded (the run predates their recording).")
    for later in provenance.packages_later or []:
        lines.append(f"- Resumed under other packages: {text(versions(later))}.")
    build = provenance.report_build
    if build and build != recorded:
        lines.append(f"- This report was written by: {text(versions(build))}.")
    lines.append("")
    return lines
