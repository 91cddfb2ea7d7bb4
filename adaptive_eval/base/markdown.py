"""Names and paths from the user's files, placed in markdown (report.md, the nightly alerts) so
that they show as typed and nothing in them acts: a model called ``<script>`` is text, a ``|``
does not split a table cell, a ``*`` does not start emphasis.
"""

from __future__ import annotations

import html
import re

_ACTIVE = re.compile(r"([\\`*_\[\]|~])")


def text(value: object) -> str:
    """``value`` as markdown text: ``<`` and ``&`` as entities (no tag or entity can start),
    markdown's active characters escaped; ``>`` stays as typed (``a>b``, it read ``a&gt;b`` in
    the .md files), escaped only where it would start a quote.

    >>> text("<script>a_b|c</script>")
    '&lt;script>a\\\\_b\\\\|c&lt;/script>'
    >>> text("> quoted"), text("a > b")
    ('\\\\> quoted', 'a > b')
    """
    escaped = _ACTIVE.sub(r"\\\1", html.escape(str(value), quote=False).replace("&gt;", ">"))
    return "\\" + escaped if escaped.startswith(">") else escaped


def code(value: object) -> str:
    """``value`` as a code span, shown verbatim: fenced by more backticks than any run of them
    inside it (markdown and HTML are not interpreted in a code span).

    >>> code("a`b")
    '``a`b``'
    """
    body = str(value)
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"
