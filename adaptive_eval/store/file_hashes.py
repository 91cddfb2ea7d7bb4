"""The file-hash cache's SQLite file: each file's content sha256 by its real path and stat key.

Why a file is hashed and when the cache is used is :mod:`adaptive_eval.backends.model_files`'s
business; this module only keeps the rows, and never fails a run: where the cache cannot be
opened, read or written it answers nothing and keeps nothing, and every file is read again.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path


class FileHashCache:
    """File digests by (real path, size, mtime_ns, ctime_ns, inode, device); a no-op where the
    cache file cannot be opened or written."""

    def __init__(self, path: Path) -> None:
        self.conn: sqlite3.Connection | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(path, timeout=10, isolation_level=None)
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, key TEXT NOT NULL, "
                "sha256 TEXT NOT NULL)"
            )
        except (OSError, sqlite3.Error):
            self.close()

    @staticmethod
    def key(stat: os.stat_result) -> str:
        """The stat key a digest is valid for: any write changes the change time, so a file
        rewritten with its old modification time still misses."""
        return f"{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ctime_ns}:{stat.st_ino}:{stat.st_dev}"

    def get(self, path: str, key: str) -> str | None:
        """The sha256 recorded for ``path`` under ``key``; None when there is none (or the
        cache cannot be read)."""
        if self.conn is None:
            return None
        try:
            row = self.conn.execute(
                "SELECT sha256 FROM files WHERE path = ? AND key = ?", (path, key)
            ).fetchone()
        except sqlite3.Error:
            return None
        return None if row is None else str(row[0])

    def put(self, path: str, key: str, digest: str) -> None:
        """Record ``digest`` for ``path`` under ``key``, replacing what the path had; silently
        nothing where the cache cannot be written."""
        if self.conn is None:
            return
        try:
            self.conn.execute(
                "INSERT OR REPLACE INTO files(path, key, sha256) VALUES (?, ?, ?)",
                (path, key, digest),
            )
        except sqlite3.Error:
            return

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None


__all__ = ["FileHashCache"]
