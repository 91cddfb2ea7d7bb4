"""Checks made before the first trial, beyond the config's schema and its input files.

:func:`adaptive_eval.campaign.build_campaign` checks the config and every file it names;
:func:`check_before_sampling` adds what only matters once a campaign is to run: the trial library
(a file that is not one, a folder that cannot hold one) and credentials a run folder's copy of the
config no longer holds. ``validate`` and ``run`` (``compare``, ``nightly``) both call it, so a
campaign ``validate`` accepts does not fail after sampling has begun.
"""

from __future__ import annotations

from adaptive_eval.campaign import Campaign
from adaptive_eval.config import CampaignConfig
from adaptive_eval.dispatch.launch import launcher
from adaptive_eval.errors import InputError
from adaptive_eval.redact import REDACTED, redacted_fields
from adaptive_eval.storage import is_read_only, nearest_existing
from adaptive_eval.store import SQLiteError
from adaptive_eval.store.library import LIBRARY_TABLES, library_path, table_names


def check_before_sampling(campaign: Campaign) -> None:
    config = campaign.config
    _check_credentials(config)
    launcher(config.execution.dispatch, source=config.source)  # a registered dispatch mode
    if config.library is not None:
        _check_library(config)


def _check_credentials(config: CampaignConfig) -> None:
    """A config copied from a run folder has its credentials redacted: sending the marker as
    an API key would fail every request, after the run has started."""
    found = redacted_fields(config.model_dump(mode="json"))
    if found:
        raise InputError(
            f"holds {REDACTED!r}: a credential removed when this config was copied into a run "
            "folder; give the real value (for the openai backend, better options.api_key_env)",
            source=config.source,
            field=found[0],
        )


def _check_library(config: CampaignConfig) -> None:
    assert config.library is not None
    path = library_path(config.resolve_path(config.library))

    def refuse(message: str) -> InputError:
        return InputError(f"{path}: {message}", source=config.source, field="library")

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
