"""All SQL lives in ``adaptive_eval/store/`` (issue 27): no other module writes an SQL statement,
runs one on a connection or opens an SQLite database. The source is read with ``ast``, so
nothing is executed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "adaptive_eval"
STORE = PACKAGE / "store"

#: Modules outside the store that may import ``sqlite3``, and why: they catch ``sqlite3.Error``
#: to word a failure and sit where importing the store would be wrong (``storage`` lies beneath
#: it; ``cli`` keeps its start-up imports light).
ERROR_TYPE_ONLY = frozenset({"adaptive_eval/base/files.py", "adaptive_eval/command_line/cli.py"})

#: SQL statements as the project writes them (upper-case keywords).
SQL = re.compile(
    r"\bSELECT\b[\s\S]*?\bFROM\b"
    r"|\bINSERT\s+(?:OR\s+[A-Z]+\s+)?INTO\b"
    r"|\bUPDATE\s+\w+\s+SET\b"
    r"|\bDELETE\s+FROM\b"
    r"|\b(?:CREATE|DROP|ALTER)\s+(?:TABLE|INDEX|VIEW|TRIGGER)\b"
    r"|\bPRAGMA\s+\w+"
    r"|\b(?:BEGIN|COMMIT|ROLLBACK)(?:\s+IMMEDIATE|\s+EXCLUSIVE)?\s*$"
)
#: Methods of a connection or cursor that run SQL.
RUNS_SQL = frozenset({"execute", "executemany", "executescript"})


def _is_text(node: ast.expr) -> bool:
    """Whether ``node`` builds a string: a literal, an f-string or a sum of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return _is_text(node.left) or _is_text(node.right)
    return False


def sql_in(source: str, name: str = "<source>") -> list[str]:
    """Where ``source`` holds SQL: ``line: what`` for each string literal that is a statement,
    each ``.execute(...)``-style call (with a string or a prepared query), each
    ``sqlite3.connect`` and each ``import sqlite3``."""
    found: list[str] = []
    tree = ast.parse(source, filename=name)
    # An f-string is read whole (its fields as "?"), not as the pieces around its fields.
    pieces = {
        id(part)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for part in node.values
    }
    for node in ast.walk(tree):
        text = None
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in pieces
        ):
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(
                part.value if isinstance(part, ast.Constant) else "?" for part in node.values
            )
        if text is not None and (match := SQL.search(text)):
            found.append(f"{node.lineno}: SQL in a string ({match.group(0)[:40]!r})")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method = node.func.attr
            target = node.func.value
            if method in RUNS_SQL and method != "execute":
                found.append(f"{node.lineno}: .{method}(...)")
            elif method == "execute" and node.args and _is_text(node.args[0]):
                found.append(f"{node.lineno}: .execute() of a query")
            elif method == "connect" and isinstance(target, ast.Name) and target.id == "sqlite3":
                found.append(f"{node.lineno}: sqlite3.connect(...)")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            if "sqlite3" in names:
                found.append(f"{node.lineno}: imports sqlite3")
    return found


def test_no_module_outside_the_store_writes_or_runs_sql() -> None:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(STORE):
            continue
        where = str(path.relative_to(ROOT))
        for problem in sql_in(path.read_text(), where):
            if where in ERROR_TYPE_ONLY and problem.endswith("imports sqlite3"):
                continue
            problems.append(f"{where}:{problem}")
    assert problems == [], "SQL outside adaptive_eval/store/ (move it into a store method):\n" + (
        "\n".join(problems)
    )


def test_the_store_itself_is_where_the_sql_is() -> None:
    """The guard would pass vacuously if it found nothing anywhere: the store's own modules
    must trip it."""
    tripped = {path.name for path in STORE.glob("*.py") if sql_in(path.read_text(), str(path))}
    assert {"file.py", "ledger.py", "queries.py", "chain.py", "recovery.py"} <= tripped
    assert {"library.py", "file_hashes.py"} <= tripped


def test_each_kind_of_sql_is_found() -> None:
    samples = {
        'rows = store.conn.execute("SELECT model FROM trials").fetchall()': 2,
        'q = f"SELECT {cols} FROM trials WHERE round = ?"': 1,
        "conn.executemany(query, rows)": 1,
        'x = "INSERT OR IGNORE INTO cells(cell) VALUES (?)"': 1,
        'x = "UPDATE trials SET category = 1"': 1,
        'x = "DELETE FROM meta WHERE key = ?"': 1,
        'x = "CREATE TABLE IF NOT EXISTS t (a)"': 1,
        'x = "PRAGMA journal_mode=WAL"': 1,
        'conn.execute("BEGIN IMMEDIATE")': 2,
        "import sqlite3": 1,
        'c = sqlite3.connect("x.sqlite")': 1,
    }
    for source, count in samples.items():
        assert len(sql_in(source)) == count, (source, sql_in(source))


def test_words_and_other_executes_are_not_sql() -> None:
    clean = [
        '"""Select the rows from the store; the update is deleted from the list."""',
        "runner.execute(campaign, run_dir, args)",
        '"""Runs `execute` on a campaign; commit the result."""',
        'label = "selected from the top models"',
    ]
    for source in clean:
        assert sql_in(source) == [], source
