"""Byte-identity sweep (issue 49): every output of the CPU workflows, normalised, and a digest.

    python benchmarks/identity_sweep.py --out /tmp/identity-a      # about 4-6 min on 2 cores
    python benchmarks/identity_sweep.py --compare /tmp/identity-a /tmp/identity-b

Runs, with fixed seeds, on the CPU only (simulated and replay backends), one step after the
other in a fresh temporary folder:

* ``demo``: ``make demo``'s command, ``adaptive-eval run configs/demo.yaml --out DIR`` (Ray);
* ``compare``: ``adaptive-eval compare configs/compare.yaml --candidate LLM_10`` plain (exit 3),
  with ``--settle-all`` (exit 3), and ``--candidate LLM_9 --margin 0.05`` (exit 3), inline;
* ``nightly``: ``adaptive-eval nightly`` over 7 nights (2026-01-01 ... 07) of three incumbents
  and a checkpoint whose scenario changes (0.70, same, 0.74, same, 0.30: an alert, 0.70 again:
  news and the library's old cells, same), inline;
* ``forecast``: ``forecast configs/demo.yaml --pilot 4 --out DIR`` then ``run`` on DIR (the
  run that reuses the pilot and reports against the forecast), and ``forecast configs/demo.yaml
  --from <the demo's run> --json``, inline;
* ``variants`` (what a campaign's typed variants change): ``nightly`` over 3 nights with
  ``policy.pair_rules: [betting]`` (each night bets on the last), ``forecast configs/compare.yaml
  --candidate LLM_10 --pilot 4 --out DIR`` then ``compare`` in DIR (the pilot's minimum kept),
  ``run configs/demo.yaml --set budget.trials=5000`` and ``forecast`` of it ``--from`` the
  demo's run, inline;
* ``inspect``: ``inspect_ai.eval`` of ``replay_task`` (the replay provider: recorded outcomes
  with a token usage, no model, offline) on 3 synthetic models x 20 samples x 16 epochs under
  ``adaptive_stopping``, then ``adaptive-eval report LOG_DIR --out DIR``;
* ``sequential``: ``benchmarks/sequential.py --replicates 8 --jobs 1`` on two campaigns and
  three designs; ``verdicts``: ``benchmarks/verdicts.py --replicates 20 --jobs 1`` on four cases.

Collected (``--out DIR``), each normalised, with ``DIR/digest.json`` = {relative path: sha256}:
every command's stdout, stderr and exit code (``console/``); every run folder's ``summary.json``,
``report.md``, ``report.html``, ``events.jsonl``, ``config.yaml``, ``forecast.json``,
``pilot.json``; nightly's ``nights.jsonl``, ``summary.md``, ``alert.json``, ``alert.md`` and
every night's run folder; the benchmarks' JSON and markdown; the Inspect log's
``early_stopping`` record and the report's ``campaign/campaign.yaml``; every ``.npz`` written
(``posterior.npz``, ``trials.npz``: dtype, shape and sha256 per array); a dump of every
``trials.sqlite`` (``store.json``: the ``meta`` table, the ``trials`` rows, ``rounds`` with the
sha256 of each plan, ``events``, ``digests``) and of nightly's ``library.sqlite``
(``library.json``: cells, trials, models). Left out: ``ray.log`` (Ray's own messages: pids,
times, actor ids), ``.lock`` (pid and host), the Inspect ``.eval`` logs themselves (Inspect's
random ids and times; their early-stopping record is kept), the ``-wal``/``-shm`` files.

JSON (files, JSON values of the store's ``meta`` table, and ``--json`` output on the console)
is parsed and dumped again with sorted keys; the value of each of these keys becomes
"<masked>" wherever it occurs:

* times: ``ts``, ``at``, ``recorded_at``, ``planned_at``, ``sealed_at``, ``written_utc``,
  ``started``, ``started_utc``, ``finished_utc``, ``created``, ``elapsed_s``, ``seconds``,
  ``wall_s``, ``wall_s_to_go``, ``latency_s``, ``took_s``, ``bridge_s``,
  ``bridge_ms_per_sample``, ``bridge_overhead_ms_per_call``, ``worker_utilisation``, and any
  key ending in ``_wall_s`` or ``_utc``; ``wall_s`` is also the wall-time forecast of
  ``forecast.json`` / ``forecast --json`` (priced at the evidence's measured seconds per trial);
* ``first_result`` (the store's meta: when the first batch came back and, under Ray, how many
  trials it held: whichever worker answered first);
* the live forecast, whose forecasts are made whenever its process is free (how many, at which
  round and with how many simulations, and whether one finishes at all in a short run, depends
  on the machine's load): the ``live_forecast`` key is dropped wherever it stands (summary.json,
  the store's meta); ``live_forecast`` events are dropped from events.jsonl, and so are
  ``policy_warmup`` and ``slow_policy`` (logged when a decision phase took longer than its
  threshold: the machine's load again);
* the environment: ``packages``, ``packages_later``, ``report_build``, ``hostname``, ``host``,
  ``pid``.

A trial's ``worker`` in the store keeps its name with digits replaced by ``N`` (under Ray, which
actor drew a batch is scheduling). Masked in every string and text file, by exact value or
regular expression: the temporary folder (``<TMP>``), the repository's folder (``<REPO>``), this
machine's hostname (``<HOST>``), the campaign ids read from the runs' summary.json and
events.jsonl (``name-`` + 8 random hex digits: ``<CAMPAIGN_ID>``), ISO date-times (``<TIME>``; a
night's date, 2026-01-0N, is an input and stays), durations ("took 2 s", "(3s)", "4.1 s wall",
"about 4 min (3-5)"), Inspect's version banner, the console's ``wall time:`` forecast line, the
name Inspect gives the bridge's hook (it names the distribution it finds the module in: the
checkout's path), and its timed ``progress:`` lines (printed every few seconds; the final
``progress: done ...`` line is kept). report.md and report.html: the "Live forecast over the
run" section (and the page's live-forecast figure) is removed, the forecast table's "wall time
(s)" row, the "Packages the run used" and "This report was written by" lines are masked, and
matplotlib's SVG ids (``p``/``m``/``image`` + 10 hex digits: a random salt per process) become
``<ID>``. Nothing else is masked: trials, seeds, decisions, scores, z, boundaries, exit codes,
plans, digest chains and the sha256s of inputs must match byte for byte.

``--only demo,compare,...`` runs some steps (``forecast`` needs ``demo``: ``--from`` reads its
run); ``--keep`` keeps the temporary work folder. The sweep stops at nothing: a command that
fails is recorded with its exit code and output, and the comparison shows it.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
ENTRY = (
    "import sys; sys.argv[0] = 'adaptive-eval'; "
    "from adaptive_eval.command_line.supervise import entry; entry()"
)
MASK = "<masked>"

TIME_KEYS = {
    "ts",
    "at",
    "recorded_at",
    "planned_at",
    "sealed_at",
    "written_utc",
    "started",
    "started_utc",
    "finished_utc",
    "created",
    "elapsed_s",
    "seconds",
    "wall_s",
    "wall_s_to_go",
    "latency_s",
    "bridge_s",
    "bridge_ms_per_sample",
    "worker_utilisation",
    "took_s",
    "bridge_overhead_ms_per_call",
    "first_result",
}
ENV_KEYS = {"packages", "packages_later", "report_build", "hostname", "host", "pid"}
RUN_KEYS = {"live_forecast"}
#: Events that exist or not by timing: a live forecast (made when its process was free) and a
#: decision phase slower than its threshold (``policy_warmup``, ``slow_policy``).
TIMED_EVENTS = {"live_forecast", "policy_warmup", "slow_policy"}
MASKED_KEYS = TIME_KEYS | ENV_KEYS | RUN_KEYS
COPIED = (
    "summary.json",
    "report.md",
    "report.html",
    "events.jsonl",
    "config.yaml",
    "forecast.json",
    "pilot.json",
    "nights.jsonl",
    "summary.md",
    "alert.json",
    "alert.md",
    "sequential.json",
    "sequential.md",
    "campaign.yaml",
)


class Sweep:
    """One sweep: a temporary work folder, the commands' outputs and the collected files."""

    def __init__(self, work: Path, out: Path) -> None:
        self.work = work
        self.out = out
        self.exit_codes: dict[str, int] = {}
        self.campaign_ids: set[str] = set()
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
            "PYTHONHASHSEED": "0",
            "CUDA_VISIBLE_DEVICES": "",
            "INSPECT_DISPLAY": "none",
            "COLUMNS": "100",
        }

    def command(self, name: str, argv: list[str], cwd: Path | None = None) -> int:
        """Run ``argv`` (``adaptive-eval`` when it starts with a command name, else a Python
        script), keep its stdout, stderr and exit code under ``console/NAME``."""
        full = [PYTHON, "-c", ENTRY, *argv] if not argv[0].endswith(".py") else [PYTHON, *argv]
        started = time.perf_counter()
        done = subprocess.run(
            full,
            cwd=cwd or self.work,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        print(f"  {name}: exit {done.returncode} ({time.perf_counter() - started:.1f} s)")
        self.exit_codes[name] = done.returncode
        raw = self.work / "console"
        raw.mkdir(exist_ok=True)
        (raw / f"{name}.stdout").write_text(done.stdout)
        (raw / f"{name}.stderr").write_text(done.stderr)
        return done.returncode

    def ids_from(self, folder: Path) -> None:
        """The campaign ids of every run folder under ``folder`` (random: masked everywhere)."""
        for summary in folder.rglob("summary.json"):
            with summary.open() as f:
                data = json.load(f)
            if isinstance(data, dict) and isinstance(data.get("campaign_id"), str):
                self.campaign_ids.add(data["campaign_id"])
        for events in folder.rglob("events.jsonl"):
            for line in events.read_text().splitlines():
                campaign = json.loads(line).get("campaign")
                if isinstance(campaign, str):
                    self.campaign_ids.add(campaign)

    # -- masking -------------------------------------------------------------------------------

    def mask_text(self, text: str) -> str:
        for campaign_id in sorted(self.campaign_ids, key=len, reverse=True):
            text = text.replace(campaign_id, "<CAMPAIGN_ID>")
        text = text.replace(str(self.work.resolve()), "<TMP>").replace(str(self.work), "<TMP>")
        text = text.replace(str(REPO), "<REPO>")
        text = re.sub(r"\binspect_ai v\d[\w.+]*", "inspect_ai <VERSION>", text)
        # Inspect names a hook by the distribution it finds the module in (the checkout's path).
        text = re.sub(r"^(\s+)\S+: (adaptive_eval\.inspect:)", r"\1<HOOK>: \2", text, flags=re.M)
        host = socket.gethostname()
        text = re.sub(rf"\b{re.escape(host)}\b", "<HOST>", text) if len(host) > 2 else text
        # Date-times of the run (a night's date, 2026-01-0N, is an input and stays).
        text = re.sub(
            r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?", "<TIME>", text
        )
        # Durations.
        text = re.sub(r"\btook \d+(?:\.\d+)? ?(?:s|ms|min|h)\b", "took <DURATION>", text)
        text = re.sub(r"\(\d+(?:\.\d+)? ?s\)", "(<DURATION>)", text)
        text = re.sub(r"\b\d+(?:\.\d+)? ?s (wall|CPU)\b", r"<DURATION> \1", text)
        text = re.sub(
            r"\babout \d+(?:\.\d+)? (?:s|min|h)\b(?: \(\d+-\d+\))?", "about <DURATION>", text
        )
        return text

    def mask_json(self, value: Any, key: str | None = None) -> Any:
        if key is not None and (key in MASKED_KEYS or key.endswith(("_wall_s", "_utc"))):
            return MASK
        if isinstance(value, dict):
            # A live forecast is made when its process is free: whether a run has one at all
            # depends on the machine's load, so the key is dropped, not only its value.
            return {
                str(k): self.mask_json(v, str(k)) for k, v in value.items() if k not in RUN_KEYS
            }
        if isinstance(value, list):
            return [self.mask_json(v) for v in value]
        if isinstance(value, str):
            return self.mask_text(value)
        return value

    def mask_console(self, text: str) -> str:
        try:  # --json output
            data = json.loads(text)
        except ValueError:
            pass
        else:
            return json.dumps(self.mask_json(data), indent=1, sort_keys=True) + "\n"
        text = re.sub(r"^(\s*wall time:\s+).*$", r"\1<masked>", text, flags=re.M)
        lines = [
            line
            for line in text.splitlines()
            if not (line.startswith("progress:") and not line.startswith("progress: done"))
        ]
        return self.mask_text("\n".join(lines) + "\n")

    def mask_report_md(self, text: str) -> str:
        # The live forecast's section (present only where one was made in time): removed.
        text = re.sub(r"## Live forecast over the run\n.*?(?=\n## |\Z)", "", text, flags=re.S)
        text = re.sub(r"\n{3,}", "\n\n", text)
        text = re.sub(
            r"^\| wall time \(s\) \|.*$", "| wall time (s) | <masked> |", text, flags=re.M
        )
        text = re.sub(r"^.*Packages the run used:.*$", "<masked: packages>", text, flags=re.M)
        text = re.sub(r"^.*This report was written by.*$", "<masked: packages>", text, flags=re.M)
        return self.mask_text(text)

    def mask_report_html(self, text: str) -> str:
        text = re.sub(
            r"<h2>Live forecast over the run</h2>.*?(?=<figure |<h2>)", "", text, flags=re.S
        )
        text = re.sub(r"<figure id='live-forecast'>.*?</figure>", "", text, flags=re.S)
        text = re.sub(
            r"<tr><td>wall time \(s\)</td>.*?</tr>", "<tr><td>wall time (s)</td><masked></tr>", text
        )
        # matplotlib's SVG ids (clip paths, markers, images) hash a random salt (no svg.hashsalt).
        text = re.sub(r"(url\(#|id=\"|href=\"#)([A-Za-z]+)[0-9a-f]{10}\b", r"\1\2<ID>", text)
        text = re.sub(r"Packages the run used:[^<]*", "Packages the run used: <masked>", text)
        text = re.sub(
            r"This report was written by[^<]*", "This report was written by <masked>", text
        )
        return self.mask_text(text)

    # -- collection ----------------------------------------------------------------------------

    def write(self, relative: str, text: str) -> None:
        path = self.out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def collect_file(self, source: Path, relative: str) -> None:
        text = source.read_text()
        name = source.name
        if name.endswith(".json"):
            data = self.mask_json(json.loads(text))
            text = json.dumps(data, indent=1, sort_keys=True) + "\n"
        elif name.endswith(".jsonl"):
            rows = [
                self.mask_json(row)
                for row in map(json.loads, filter(str.strip, text.splitlines()))
                if row.get("event") not in TIMED_EVENTS
            ]
            text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
        elif name == "report.md":
            text = self.mask_report_md(text)
        elif name == "report.html":
            text = self.mask_report_html(text)
        else:
            text = self.mask_text(text)
        self.write(relative, text)

    def collect_run(self, folder: Path, relative: str) -> None:
        """Every output file under a run (or history) folder, and its store's dump."""
        for source in sorted(folder.rglob("*")):
            if source.is_file() and source.name in COPIED:
                self.collect_file(source, f"{relative}/{source.relative_to(folder)}")
        for store in sorted(folder.rglob("trials.sqlite")):
            dump = self.dump_store(store)
            where = store.parent.relative_to(folder)
            self.write(f"{relative}/{where}/store.json", json.dumps(dump, indent=0) + "\n")
        for library in sorted(folder.rglob("library.sqlite")):
            where = library.parent.relative_to(folder)
            text = json.dumps(self.dump_library(library), indent=0) + "\n"
            self.write(f"{relative}/{where}/library.json", text)
        for npz in sorted(folder.rglob("*.npz")):
            where = npz.relative_to(folder)
            text = json.dumps(_arrays(npz), indent=1, sort_keys=True) + "\n"
            self.write(f"{relative}/{where}.json", text)

    def dump_library(self, path: Path) -> dict[str, Any]:
        """The trial library: cells, trials (the run that added one by its masked id), models;
        the times they were added or seen masked."""
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            cells = [
                [cell, self.mask_text(description)]
                for cell, description in conn.execute(
                    "SELECT cell, description FROM cells ORDER BY cell"
                )
            ]
            trials = [
                [*row[:-1], self.mask_text(row[-1])]
                for row in conn.execute(
                    "SELECT cell, trial, seed, category, tokens, prompt_tokens, gpu_s, answer, "
                    "reason, origin FROM trials ORDER BY cell, trial"
                )
            ]
            models = [
                list(row) for row in conn.execute("SELECT name, identity FROM models ORDER BY name")
            ]
        finally:
            conn.close()
        return {"cells": cells, "trials": trials, "models": models}

    def dump_store(self, path: Path) -> dict[str, Any]:
        """The store's tables, times and the drawing worker masked; plans by their sha256."""
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            meta = {
                key: self.mask_json(_json_or_text(value), key)
                for key, value in conn.execute("SELECT key, value FROM meta ORDER BY key")
                if key not in RUN_KEYS
            }
            trials = [
                list(row)
                for row in conn.execute(
                    "SELECT model, question, trial, round, batch_id, seed, category, tokens, "
                    "prompt_tokens, gpu_s, worker, answer, reason FROM trials "
                    "ORDER BY model, question, trial"
                )
            ]
            for row in trials:  # which actor drew the batch: Ray's scheduling
                if isinstance(row[10], str) and row[10] not in ("library", "inline"):
                    row[10] = re.sub(r"\d+", "N", row[10])
            rounds = [
                [r, shape, hashlib.sha256(plan).hexdigest()]
                for r, shape, plan in conn.execute(
                    "SELECT round, shape, plan FROM rounds ORDER BY round"
                )
            ]
            events = [
                [r, kind, self.mask_json(json.loads(payload))]
                for r, kind, payload in conn.execute(
                    "SELECT round, kind, payload FROM events ORDER BY seq"
                )
            ]
            digests = [
                list(row)
                for row in conn.execute("SELECT round, digest, trials FROM digests ORDER BY round")
            ]
        finally:
            conn.close()
        return {
            "meta": meta,
            "trials": trials,
            "rounds": rounds,
            "events": events,
            "digests": digests,
        }

    def collect_console(self) -> None:
        for source in sorted((self.work / "console").iterdir()):
            self.write(f"console/{source.name}", self.mask_console(source.read_text()))
        self.write("console/exit_codes.json", json.dumps(self.exit_codes, indent=1) + "\n")


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


def _arrays(path: Path) -> dict[str, list[Any]]:
    """An npz by its arrays: dtype, shape and the sha256 of the bytes of each."""
    import numpy as np

    with np.load(path) as data:
        return {
            key: [str(data[key].dtype), list(data[key].shape), _sha(data[key])]
            for key in data.files
        }


def _sha(array: Any) -> str:
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


# -- the steps ---------------------------------------------------------------------------------


def step_demo(s: Sweep) -> None:
    s.command("demo", ["run", str(REPO / "configs/demo.yaml"), "--out", str(s.work / "demo")])


INLINE = ["--set", "execution.dispatch=inline"]


def step_compare(s: Sweep) -> None:
    config = str(REPO / "configs/compare.yaml")
    base = ["compare", config, *INLINE]
    s.command("compare-plain", [*base, "--candidate", "LLM_10", "--out", str(s.work / "cmp")])
    s.command(
        "compare-settle-all",
        [*base, "--candidate", "LLM_10", "--settle-all", "--out", str(s.work / "cmp-all")],
    )
    s.command(
        "compare-margin",
        [*base, "--candidate", "LLM_9", "--margin", "0.05", "--out", str(s.work / "cmp-margin")],
    )


def _scenario(path: Path, scores: list[float], seed: int, names: list[str]) -> None:
    """A binary simulated scenario (tests/helpers.py's mimic_success), 12 questions."""
    import numpy as np

    rng = np.random.default_rng(seed)
    raw = np.clip(rng.beta(4, 4, size=(len(scores), 12)), 0.02, 0.98)
    success = np.clip(raw - raw.mean(axis=1, keepdims=True) + np.array(scores)[:, None], 0.01, 0.99)
    np.savez(
        path,
        probs=np.stack([1 - success, success], axis=2),
        models=np.array(names),
        tokens_mean=np.full(success.shape, 100.0),
    )


NIGHTS = [0.70, 0.70, 0.74, 0.74, 0.30, 0.70, 0.70]


def step_nightly(s: Sweep) -> None:
    import yaml

    folder = s.work / "nightly"
    folder.mkdir()
    _scenario(folder / "incumbents.npz", [0.3, 0.5, 0.85], 1, ["small", "medium", "large"])
    config = {
        "name": "nightly",
        "seed": 3,
        "models": [
            {"backend": "simulated", "path": "incumbents.npz"},
            {"backend": "simulated", "path": "ckpt.npz"},
        ],
        "rubric": {"weights": [0, 1]},
        "policy": {"rope": 0.03, "max_trials_per_question": 60, "round_trials": 96},
        "baseline": {"fixed_n": 20},
        "execution": {"workers": 1, "batch_size": 32, "dispatch": "inline"},
    }
    (folder / "nightly.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    for day, score in enumerate(NIGHTS, start=1):
        _scenario(folder / "ckpt.npz", [score], 2, ["ckpt"])
        s.command(
            f"nightly-{day}",
            [
                "nightly",
                str(folder / "nightly.yaml"),
                "--history",
                str(folder / "history"),
                "--night",
                f"2026-01-0{day}",
            ],
        )


def step_variants(s: Sweep) -> None:
    """What a campaign's typed variants change: nightly's ``betting`` rules on last night's run
    (three nights), a compare run after its pilot (``forecast --pilot --candidate``, then
    ``compare`` in the folder: the pilot's minimum kept), a budgeted run and a forecast of it
    from the demo's trials (its paths without the budget, the budget applied after)."""
    import yaml

    folder = s.work / "nightly"
    config = yaml.safe_load((folder / "nightly.yaml").read_text())
    config["policy"]["pair_rules"] = ["betting"]
    (folder / "betting.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    for day, score in enumerate(NIGHTS[:3], start=1):
        _scenario(folder / "ckpt.npz", [score], 2, ["ckpt"])
        s.command(
            f"betting-{day}",
            [
                "nightly",
                str(folder / "betting.yaml"),
                "--history",
                str(folder / "betting-history"),
                "--night",
                f"2026-02-0{day}",
            ],
        )
    compare = [str(REPO / "configs/compare.yaml"), "--candidate", "LLM_10", *INLINE]
    piloted = ["--out", str(s.work / "cmp-pilot")]
    s.command("compare-pilot", ["forecast", *compare, "--pilot", "4", *piloted])
    s.command("compare-pilot-run", ["compare", *compare, *piloted])
    demo = [str(REPO / "configs/demo.yaml"), *INLINE, "--set", "budget.trials=5000"]
    s.command("budget-run", ["run", *demo, "--out", str(s.work / "budget")])
    s.command("budget-forecast", ["forecast", *demo, "--from", str(s.work / "demo"), "--json"])


def step_forecast(s: Sweep) -> None:
    config = str(REPO / "configs/demo.yaml")
    pilot = str(s.work / "forecast-pilot")
    s.command("forecast-pilot", ["forecast", config, "--pilot", "4", "--out", pilot, *INLINE])
    s.command("forecast-pilot-run", ["run", config, "--out", pilot, *INLINE])
    s.command("forecast-from", ["forecast", config, "--from", str(s.work / "demo"), "--json"])


INSPECT = """
import json, sys
from pathlib import Path
import numpy as np
from inspect_ai import eval as inspect_eval
from adaptive_eval.inspect import adaptive_stopping
from adaptive_eval.inspect.replay import replay_task

folder = Path(sys.argv[1])
rng = np.random.default_rng(0)
names = ["weak", "middle", "strong"]
scores = np.array([0.35, 0.5, 0.75])
outcomes = (rng.random((3, 20, 16)) < scores[:, None, None]).astype(np.int8)
path = folder / "replay.npz"
np.savez(path, outcomes=outcomes, models=np.array(names),
         questions=np.array([f"q{i}" for i in range(20)]))
models = [f"replay/{n}" for n in names]
stopping = adaptive_stopping("identity-inspect", models=models)
logs = inspect_eval(replay_task(path, early_stopping=stopping), model=models,
                    model_args={"path": str(path)}, log_dir=str(folder / "logs"),
                    display="none", max_samples=20)
bad = [log.error for log in logs if log.status != "success"]
if bad:
    raise SystemExit(f"eval failed: {bad[0]}")
for log in logs:
    print(log.eval.model, log.status, len(log.samples or []), "samples logged")
meta = logs[0].results.early_stopping.metadata
(folder / "early_stopping.json").write_text(json.dumps(meta, sort_keys=True, default=str))
print(meta["stop"]["detail"])
"""


def step_inspect(s: Sweep) -> None:
    folder = s.work / "inspect"
    folder.mkdir()
    script = folder / "inspect_example.py"
    script.write_text(INSPECT)
    s.command("inspect-eval", [str(script), str(folder)])
    s.command("inspect-report", ["report", str(folder / "logs"), "--out", str(folder / "report")])


def step_benchmarks(s: Sweep) -> None:
    s.command(
        "sequential",
        [
            str(REPO / "benchmarks/sequential.py"),
            "--replicates",
            "8",
            "--jobs",
            "1",
            "--only",
            "gap 0.05 (2 models),checkpoint vs 2 incumbents",
            "--designs",
            "group_sequential+track_and_stop;anytime+track_and_stop;naive_z+pairwise futility=0",
            "--out",
            str(s.work / "sequential"),
        ],
    )
    s.command(
        "verdicts",
        [
            str(REPO / "benchmarks/verdicts.py"),
            "--replicates",
            "20",
            "--jobs",
            "1",
            "--cases",
            "gate at -margin, M=10, rates ~0.6;ranking tie, 2 models, M=10;"
            "equivalence at the rope, M=30",
            "--out",
            str(s.work / "verdicts.json"),
        ],
    )


STEPS: dict[str, Callable[[Sweep], None]] = {
    "demo": step_demo,
    "compare": step_compare,
    "nightly": step_nightly,
    "forecast": step_forecast,  # after demo: --from reads its run
    "variants": step_variants,  # after nightly (its config and scenario) and demo
    "inspect": step_inspect,
    "benchmarks": step_benchmarks,
}


def collect(s: Sweep) -> None:
    """Every step's outputs, normalised, into the sweep's ``out`` folder."""
    work = s.work
    s.ids_from(work)
    for folder in ("demo", "cmp", "cmp-all", "cmp-margin", "forecast-pilot", "cmp-pilot", "budget"):
        if (work / folder).is_dir():
            s.collect_run(work / folder, folder)
    if (work / "nightly" / "history").is_dir():
        s.collect_run(work / "nightly" / "history", "nightly")
    if (work / "nightly" / "betting-history").is_dir():
        s.collect_run(work / "nightly" / "betting-history", "nightly-betting")
    if (work / "inspect").is_dir():
        s.collect_file(work / "inspect" / "early_stopping.json", "inspect/early_stopping.json")
        s.collect_run(work / "inspect" / "report", "inspect/report")
    if (work / "sequential").is_dir():
        s.collect_run(work / "sequential", "sequential")
    if (work / "verdicts.json").is_file():
        s.collect_file(work / "verdicts.json", "verdicts/verdicts.json")
    s.collect_console()


def sweep(out: Path, only: list[str] | None, keep: bool) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="identity-sweep-"))
    s = Sweep(work, out)
    started = time.perf_counter()
    try:
        for name, step in STEPS.items():
            if only and name not in only:
                continue
            print(f"{name}:", flush=True)
            step(s)
        collect(s)
    finally:
        if keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    digest = {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != "digest.json"
    }
    (out / "digest.json").write_text(json.dumps(digest, indent=1, sort_keys=True) + "\n")
    print(
        f"{len(digest)} files, digest {out / 'digest.json'}; {time.perf_counter() - started:.0f} s"
    )


def compare(a: Path, b: Path, lines: int) -> int:
    for folder in (a, b):
        if not (folder / "digest.json").is_file():
            print(f"{folder}: no digest.json (not a finished sweep)", file=sys.stderr)
            return 2
    da = json.loads((a / "digest.json").read_text())
    db = json.loads((b / "digest.json").read_text())
    differ = 0
    for path in sorted(set(da) | set(db)):
        if path not in da or path not in db:
            print(f"only in {a if path in da else b}: {path}")
            differ += 1
            continue
        if da[path] == db[path]:
            continue
        differ += 1
        print(f"differs: {path}")
        diff = difflib.unified_diff(
            (a / path).read_text().splitlines(),
            (b / path).read_text().splitlines(),
            str(a / path),
            str(b / path),
            lineterm="",
            n=1,
        )
        for k, line in enumerate(diff):
            if k >= lines:
                print("  ...")
                break
            print("  " + line[:300])
    print(f"{len(set(da) | set(db))} files: {differ} differ" if differ else "identical")
    return 1 if differ else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", type=Path, help="run the sweep; normalised files here")
    group.add_argument("--compare", nargs=2, type=Path, metavar=("DIR_A", "DIR_B"))
    parser.add_argument("--only", help=f"comma-separated steps of {','.join(STEPS)}")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work folder")
    parser.add_argument("--lines", type=int, default=20, help="diff lines shown per file")
    args = parser.parse_args()
    if args.compare:
        first, second = args.compare
        sys.exit(compare(first, second, args.lines))
    sweep(args.out, args.only.split(",") if args.only else None, args.keep)


if __name__ == "__main__":
    main()
