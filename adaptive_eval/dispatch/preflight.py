"""Checks made before the first trial, beyond the config's schema and its input files.

:func:`adaptive_eval.campaign.build.build_campaign` checks the config and every file it names;
:func:`check_before_sampling` adds what only matters once a campaign is to run: the trial library
(a file that is not one, a folder that cannot hold one) and credentials a run folder's copy of the
config no longer holds. ``validate`` and ``run`` (``compare``, ``nightly``) both call it, so a
campaign ``validate`` accepts does not fail after sampling has begun.
"""

from __future__ import annotations

from pathlib import Path

from adaptive_eval.base.errors import BackendError, InputError
from adaptive_eval.base.files import is_read_only, nearest_existing
from adaptive_eval.base.redact import REDACTED
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.config.settings import CampaignSettings
from adaptive_eval.dispatch.launch import launcher
from adaptive_eval.store import SQLiteError
from adaptive_eval.store.library import LIBRARY_TABLES, library_path, table_names


def check_before_sampling(campaign: Campaign) -> None:
    settings = campaign.run.settings
    _check_credentials(settings)
    launcher(settings.execution.dispatch, source=settings.source)  # a registered dispatch mode
    if settings.library is not None:
        _check_library(settings.library, settings.source)


def check_services(campaign: Campaign) -> None:
    """Every server the campaign's workers will call answers (before Ray or any worker
    starts): one line naming it otherwise, instead of minutes of retries after the start."""
    for plan in campaign.run.plans:
        problem = plan.reachable() if plan.reachable is not None else None
        if problem:
            raise BackendError(problem)


def _check_credentials(settings: CampaignSettings) -> None:
    """A config copied from a run folder has its credentials redacted: sending the marker as
    an API key would fail every request, after the run has started."""
    if settings.redacted:
        raise InputError(
            f"holds {REDACTED!r}: a credential removed when this config was copied into a run "
            "folder; give the real value (for the openai backend, better options.api_key_env)",
            source=settings.source,
            field=settings.redacted[0],
        )


def _check_library(named: Path, source: str) -> None:
    path = library_path(named)

    def refuse(message: str) -> InputError:
        return InputError(f"{path}: {message}", source=source, field="library")

    if path.exists():
        if not path.is_file():
            raise refuse("is not a file; give a library file or a folder to hold one")
        try:
            tables = table_names(path)
        except SQLiteError as error:
            raise refuse(f"is not a trial library (not an SQLite file: {error})") from None
        if tables and not tables >= LIBRARY_TABLES:
            raise refuse(
                f"is an SQLite file but not a trial library (tables: {', '.join(sorted(tables))})"
            )
        folder = path.parent
    else:
        folder = nearest_existing(path.parent)
        if not folder.is_dir():
            raise refuse(f"cannot be created: {folder} is not a folder")
    if is_read_only(folder):
        raise refuse(f"cannot be written: {folder} is read-only (the run adds its trials there)")


__all__ = ["check_before_sampling"]
