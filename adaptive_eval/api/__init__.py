"""The Python front door: a campaign from Python values, run, compared, forecast and read back
as typed values, in a notebook or a script, without writing a config file.

    from adaptive_eval import api

    values = {
        "name": "notebook",
        "models": [{"backend": "simulated", "path": "scenarios/llm_mimics.npz"}],
        "rubric": {"weights": [0, 1]},
        "policy": {"max_trials_per_question": 80},
        "execution": {"dispatch": "inline"},
    }
    summary = api.run(values, "runs/notebook")  # a typed Summary (summary.json)
    print(summary.stop_reason, [model.name for model in summary.models])

Each function takes the campaign as the same values a YAML config holds (a mapping), as a
:class:`~adaptive_eval.config.schema.CampaignConfig`, or built (:func:`campaign`, or a typed
variant of a built one: ``api.campaign(values).with_min_trials(8)``); it checks the values in
the one pass the YAML user's config goes through, and calls the workflow the command of the same
name calls: the run folder, its outputs and its resume are the command's, byte for byte.
Relative paths resolve against the current folder. Bad input raises
:class:`~adaptive_eval.base.errors.InputError` (its ``field`` names the field, its message the
value) before anything samples, the same one line the command prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.summary_schema import Summary
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.config.schema import CampaignConfig, parse_config
from adaptive_eval.forecast.campaign import Forecast

__all__ = [
    "CampaignConfig",
    "InputError",
    "campaign",
    "compare",
    "config",
    "forecast",
    "read",
    "run",
]

#: What an error names as the config's source when the campaign came from Python values.
SOURCE = "<python>"

#: A campaign as Python values: what a YAML config holds, or the typed config itself.
#: A built :class:`~adaptive_eval.campaign.campaign.Campaign` (``campaign(values)``, or a typed
#: variant of one: ``.with_min_trials(8)``, ``.without_budget()``) is taken as it is.
Values = Mapping[str, Any] | CampaignConfig | Campaign


def config(values: Values) -> CampaignConfig:
    """``values`` checked as a YAML config is (every field, one line naming each bad one)."""
    if isinstance(values, Campaign):
        raise InputError(
            "is a built campaign: its config was read when it was built; give the values",
            source=SOURCE,
        )
    if isinstance(values, CampaignConfig):
        return values
    if not isinstance(values, Mapping):
        raise InputError(
            f"a campaign is a mapping of config values or a CampaignConfig, got "
            f"{type(values).__name__}",
            source=SOURCE,
        )
    return parse_config(dict(values), source=SOURCE)


def campaign(values: Values) -> Campaign:
    """The campaign ``values`` describe, every input checked and its plug-ins built (what
    ``adaptive-eval validate`` checks); nothing is sampled. Its ``decision`` is what decides
    (:class:`~adaptive_eval.decide.spec.DecisionSpec`), its ``run`` how it runs."""
    from adaptive_eval.campaign.build import build_campaign

    if isinstance(values, Campaign):
        return values
    return build_campaign(config(values))


def run(values: Values, out: str | Path, *, console: IO[str] | None = None) -> Summary:
    """Run (or resume) the campaign in the run folder ``out`` to its stop, as ``adaptive-eval
    run`` does; the summary it wrote. ``console`` receives the progress lines (default none)."""
    from adaptive_eval.workflows.run import run_campaign

    built = campaign(values)
    return run_campaign(built, Path(out), console=console, quiet=console is None)


def compare(
    values: Values,
    candidate: str,
    out: str | Path,
    *,
    margin: float | None = None,
    settle_all: bool | None = None,
    console: IO[str] | None = None,
) -> Summary:
    """Compare ``candidate`` against the campaign's other models, as ``adaptive-eval compare``
    does; the verdicts are the summary's ``comparison`` (its ``exit_code`` is the command's)."""
    from adaptive_eval.workflows.compare import run_compare

    return run_compare(
        campaign(values),
        candidate,
        Path(out),
        margin=margin,
        settle_all=settle_all,
        console=console,
        quiet=console is None,
    )


def forecast(
    values: Values,
    *,
    from_dir: str | Path | None = None,
    pilot: int | str | None = None,
    out: str | Path | None = None,
    simulations: int | None = None,
    seed: int = 0,
    candidate: str | None = None,
    margin: float | None = None,
) -> Forecast:
    """What the campaign will cost and decide, as ``adaptive-eval forecast`` says: from a
    finished run (``from_dir``), from a pilot sampled into ``out`` (``pilot``: trials per
    question, or ``"auto"``), or from the campaign's own prior."""
    from adaptive_eval.forecast.pilot import AUTO_START
    from adaptive_eval.workflows.forecast import ForecastRequest, run_forecast

    auto = pilot == "auto"
    if pilot is not None and not auto and (isinstance(pilot, bool) or not isinstance(pilot, int)):
        raise InputError(f"is trials per question or 'auto', got {pilot!r}", field="pilot")
    request = ForecastRequest(
        from_dir=None if from_dir is None else Path(from_dir),
        pilot=AUTO_START if auto else pilot,  # type: ignore[arg-type]  # checked above
        auto=auto,
        out=None if out is None else Path(out),
        simulations=simulations,
        seed=seed,
        candidate=candidate,
        margin=margin,
    )
    return run_forecast(campaign(values), request)


def read(out: str | Path) -> Summary:
    """The summary a run folder holds (its summary.json, checked against the schema)."""
    from adaptive_eval.workflows.nightly import read_past_summary

    return read_past_summary(Path(out))
