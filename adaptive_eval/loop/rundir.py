"""A run's folder: created and locked, its store opened or refused, its config copy and limits.

A folder holds one campaign: resuming one whose identity differs is refused with the fields
that changed, as is a folder that holds someone else's files or a campaign's outputs without its
store.
"""

from __future__ import annotations

import json
import platform
import re
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

from adaptive_eval.backends.served_identity import reconcile_servers
from adaptive_eval.base.errors import InputError, first_few
from adaptive_eval.base.files import atomic_write, foreign_entries, storage_error
from adaptive_eval.base.redact import without_secrets
from adaptive_eval.campaign.campaign import Campaign, fingerprint_of
from adaptive_eval.config.registry import BackendTraits, backends
from adaptive_eval.config.settings import RunRecord
from adaptive_eval.store import CorruptStore, RunLock, StoreError, TrialStore

#: The packages that shape every run's results; each backend adds its own (its registration's
#: ``packages``, :class:`~adaptive_eval.config.registry.BackendTraits`). Their versions are kept
#: in the run's store.
PACKAGES = ("adaptive-eval", "numpy", "scipy", "ray", "pydantic", "matplotlib")


def backend_packages() -> tuple[str, ...]:
    """Every registered backend's packages, in registration order."""
    traits: list[BackendTraits] = backends.declared()
    return tuple(dict.fromkeys(name for found in traits for name in found.packages))


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that shape results, then of every registered
    backend's (absent ones are left out)."""
    out = {"python": platform.python_version()}
    for name in dict.fromkeys((*PACKAGES, *backend_packages())):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def record_packages(store: TrialStore) -> None:
    """Keep the versions this run uses in its store: the first leg's as ``packages``, a
    resume's other versions in ``packages_later``."""
    now = package_versions()
    first = store.get_meta("packages")
    if not isinstance(first, dict):
        store.set_meta(packages=now)
        return
    later = store.get_meta("packages_later")
    later = later if isinstance(later, list) else []
    if now != first and now not in later:
        store.set_meta(packages_later=[*later, now])


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new)):
            out += differences(old.get(key), new.get(key), f"{path}.{key}" if path else key)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            d
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for d in differences(a, b, f"{path}[{i}]")
        ]
    return [] if old == new else [f"{path}: {json.dumps(old)} -> {json.dumps(new)}"]


#: Files a run leaves besides its store: their presence means a campaign was run here.
RUN_OUTPUTS = ("summary.json", "config.yaml", "events.jsonl", "report.md")


def prepare_run_dir(run_dir: Path) -> RunLock:
    """Create the run directory (after every input was checked) and take its lock."""
    if run_dir.exists() and not run_dir.is_dir():
        raise InputError("exists and is not a directory", source=str(run_dir))
    check_out_folder(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise storage_error(error, run_dir, "create the run directory") from error
    return RunLock(run_dir).acquire()


def earlier_outputs(run_dir: Path) -> list[str]:
    return [name for name in RUN_OUTPUTS if (run_dir / name).exists()]


MAX_CHANGES_SHOWN = 5


def open_run_dir(
    campaign: Campaign, run_dir: Path, *, recover: bool = False, leg: bool | None = None
) -> tuple[TrialStore, str, bool]:
    """Open or create the store; refuse a directory that holds another campaign.

    Also refused: a directory whose outputs say a campaign ran there but whose store is gone or
    empty (starting afresh would overwrite its summary), and a damaged store, unless
    ``recover`` (a resume): then the rounds whose digests verify are kept, the rest is sampled
    again (:mod:`adaptive_eval.store.recovery`), and the salvaged store is opened and checked anew.
    Damage found on open or by any check after it (a page that cannot be read) is salvaged.

    ``leg``: this open samples (a run or its resume: the default), so the packages it runs
    under are recorded (:func:`record_packages`); a report passes ``leg=False``. A new store
    always records them. Only an open that does not sample (a report) accepts a run whose
    input files or engine changed since it ran (a checkpoint replaced at its path, vLLM
    upgraded), with a note: it reads the recorded trials, and the provenance states the inputs
    the run recorded.
    """
    # Sampling is the default: an open that forgot to say so must not accept changed inputs.
    leg = True if leg is None else leg
    try:
        opened = _open_run_dir(campaign, run_dir, leg)
    except CorruptStore:
        if not recover:
            raise
        note = _recover(campaign, run_dir)
        opened = _open_run_dir(campaign, run_dir, leg)
        opened[0].notes.insert(0, ("store_recovered", note))
    store, _, resumed = opened
    if leg or not resumed:
        record_packages(store)
    return opened


def _check_chain(store: TrialStore) -> None:
    """Verify the store's digest chain (a changed trial is refused, naming its round); a store
    written before the chain existed gets one, and a note saying so."""
    store.check_meta()
    if store.has_chain:
        store.check_applied_rounds(store.verify_chain())
        return
    built = store.build_chain()
    store.notes.append(
        (
            "digest_chain_built",
            f"{store.path}: recorded before the digest chain existed; built it from the "
            f"{built} complete round(s) as they are now (a change made before today cannot be "
            "detected; every later one is)",
        )
    )


_LIMIT_PATHS = ("config.budget", "config.policy.max_trials_per_question")
_SERVER_ADDED = re.compile(r"files\[\d+\]\.server: null -> .*", re.DOTALL)


def _record_limits(store: TrialStore, record: RunRecord, run_dir: Path) -> None:
    """A resume with other limits extends (or tightens) the campaign: keep a record of it and
    the run folder's config.yaml in step, so ``adaptive-eval report DIR`` reads the new limits."""
    limits = record.limits.record()
    before = store.get_meta("limits")
    if before == limits:
        return
    history = list(store.get_meta("extensions") or [])
    if before is not None:
        history.append({"from": before, "to": limits, "trials": store.count_trials()})
    store.set_meta(limits=limits, extensions=history)
    _write_config_copy(record, run_dir)


def _write_config_copy(record: RunRecord, run_dir: Path) -> None:
    """RUN/config.yaml: the config with absolute paths, read by ``adaptive-eval report DIR``."""
    atomic_write(run_dir / "config.yaml", record.config_yaml)


def finished_before(run_dir: Path, store: TrialStore) -> bool:
    """Whether the run in ``run_dir`` had finished (its summary.json says so) and this leg does
    not extend it (no new limits recorded at the trials it holds): resuming it samples nothing."""
    try:
        previous = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(previous, dict) or previous.get("stop_reason") is None:
        return False
    extensions = store.get_meta("extensions") or []
    extended = bool(extensions) and extensions[-1].get("trials") == store.count_trials()
    return not extended


#: Summary keys only a run can know; ``report`` carries them over.
RUN_ONLY_KEYS = ("resumed", "dispatch", "nightly")


def kept_from_run(store: TrialStore, run_dir: Path) -> dict[str, Any]:
    kept = {key: store.get_meta(key) for key in RUN_ONLY_KEYS}
    previous: dict[str, Any] = {}
    if any(value is None for value in kept.values()) and (run_dir / "summary.json").exists():
        try:
            previous = json.loads((run_dir / "summary.json").read_text())
        except (OSError, ValueError):
            previous = {}
    return {
        key: value if value is not None else previous[key]
        for key, value in kept.items()
        if value is not None or key in previous
    }


#: What a run writes in its folder (and nothing else: a folder holding other files is not one).
RUN_FILES = (
    *("summary.json", "config.yaml", "events.jsonl", "report.md", "report.html"),
    *(TrialStore.FILENAME, "lock", "ray.log", "error.log", "recovery"),
    *("posterior.npz", "alert.json", "alert.md"),  # a nightly run's
    *("forecast.json", "pilot.json"),  # a forecast's, and a pilot's
)


def check_out_folder(run_dir: Path, field: str = "--out") -> None:
    """Refuse a folder that holds files but no run: the run's files would be mixed in among
    someone else's (and a later ``--keep`` or clean-up would not tell them apart)."""
    if not run_dir.is_dir() or (run_dir / TrialStore.FILENAME).exists():
        return
    foreign = foreign_entries(run_dir, RUN_FILES)
    if foreign:
        raise InputError(
            f"holds files that are not a run's ({first_few(foreign)}); give a new or empty "
            "folder (a run writes its store, reports and logs there)",
            source=str(run_dir),
            field=field,
        )


def _open_run_dir(
    campaign: Campaign, run_dir: Path, leg: bool = True
) -> tuple[TrialStore, str, bool]:
    settings = campaign.run.settings
    if run_dir.exists() and not run_dir.is_dir():
        raise InputError("exists and is not a directory", source=str(run_dir))
    run_dir.mkdir(parents=True, exist_ok=True)
    outputs = earlier_outputs(run_dir)
    if outputs and not (run_dir / TrialStore.FILENAME).exists():
        raise StoreError(
            f"holds {', '.join(outputs)} of an earlier campaign but its trial store "
            f"{TrialStore.FILENAME} is missing; restore it, or use a new --out directory",
            source=str(run_dir),
        )
    store = TrialStore(run_dir, fsync=settings.output.fsync)
    identity = campaign.run.identity
    try:
        stored = store.get_meta("fingerprint")
    except StoreError:
        store.close()
        raise
    if stored is None and outputs:
        store.close()
        raise StoreError(
            f"holds {', '.join(outputs)} of an earlier campaign but its trial store "
            f"{TrialStore.FILENAME} is empty; restore it, or use a new --out directory",
            source=str(run_dir),
        )
    if stored is None:
        campaign_id = f"{settings.name}-{uuid.uuid4().hex[:8]}"
        store.set_meta(
            fingerprint=campaign.run.fingerprint,
            identity=identity,
            campaign_id=campaign_id,
            models=list(campaign.names),
            questions=list(campaign.question_ids),
            limits=settings.run_record.limits.record(),
        )
        _write_config_copy(settings.run_record, run_dir)
        return store, campaign_id, False
    recorded = store.get_meta("identity")
    changes = identity_changes(recorded, identity, leg)
    if stored != campaign.run.fingerprint and not changes:
        # A server's card reported now or then (never lost to a /models that failed once).
        _, kept, _ = reconcile_servers(recorded, identity)
        store.set_meta(fingerprint=fingerprint_of(kept), identity=kept)
    elif (
        stored != campaign.run.fingerprint
        and not leg
        and all(c.startswith("files") for c in changes)
    ):
        listed = "; ".join(changes[:MAX_CHANGES_SHOWN])
        store.notes.append(
            (
                "inputs_changed",
                f"the run's input files or engine changed since it ran ({listed}); this report "
                "reads the trials it recorded and states the inputs it recorded",
            )
        )
    elif stored != campaign.run.fingerprint:
        store.close()
        shown = changes[:MAX_CHANGES_SHOWN]
        if len(changes) > len(shown):
            shown.append(f"and {len(changes) - len(shown)} more")
        raise InputError(
            "holds a different campaign; refusing to resume it with this config. Changed: "
            + "; ".join(shown)
            + ". Use a new --out directory, or restore the config "
            "(execution and output settings may change freely)",
            source=str(run_dir),
        )
    try:
        store.check_ranges(campaign.num_models, campaign.num_questions, campaign.num_categories)
        _check_chain(store)
    except StoreError:
        store.close()
        raise
    _record_limits(store, settings.run_record, run_dir)
    return store, str(store.get_meta("campaign_id")), True


def _recover(campaign: Campaign, run_dir: Path) -> str:
    """Rebuild the run's store from its damaged file's verified rounds (the same campaign
    only); what was kept and lost, for the console."""
    from adaptive_eval.store.recovery import recover, salvage

    path = run_dir / TrialStore.FILENAME
    found = salvage(path)
    stored = found.meta.get("identity")
    if not isinstance(stored, dict) or identity_changes(stored, campaign.run.identity):
        raise StoreError(
            "is damaged and its recorded campaign cannot be read or is another one; restore "
            "trials.sqlite from a backup, or start afresh with a new --out",
            source=str(path),
        )
    recover(run_dir, campaign.run.settings.output.fsync, found)
    return f"{path}: the store was damaged; {found.describe()}. The damaged file is kept beside it"


def identity_changes(stored: Any, identity: dict[str, Any], leg: bool = True) -> list[str]:
    """What differs between a stored identity and this campaign's, less what may change
    (``leg``: on a run or resume; a report states the identity the run recorded)."""
    # An OpenAI-compatible server's card that could not be read then or now is not a change;
    # another model served under the name is, said in words.
    stored, identity, served = reconcile_servers(stored, identity)
    # A run recorded before credentials left the identity still holds them: not a change.
    named = tuple(line.split(" ", 1)[0] + " " for line in served)  # "files[0].server: "
    changes = served + [
        c for c in differences(without_secrets(stored), identity) if not c.startswith(named)
    ]
    # Runs recorded before the limits left the identity still hold them there: not a change.
    # Runs recorded before an OpenAI-compatible server's report joined the identity lack it:
    # what that server served then is unknown, so a resume takes its report now (the library,
    # which shares trials across runs, resamples such a model instead).
    return [
        c
        for c in changes
        if not c.startswith(_LIMIT_PATHS) and not (leg and _SERVER_ADDED.fullmatch(c))
    ]
