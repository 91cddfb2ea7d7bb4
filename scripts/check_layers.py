"""The import contract of the package: layers, bottom to top, and no cycles (`make check`).

    python scripts/check_layers.py          # exit 1 naming every import that breaks it

Every module of ``adaptive_eval`` and ``policies`` belongs to exactly one layer of
:data:`LAYERS` (docs/design.md draws them). A module may import modules of its own layer and of
the layers below it, never one above; and no set of modules may import each other in a circle,
counting imports made inside functions (a lazy import still ties the design together). The
imports are read from the source with ``ast``, so nothing is executed.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("adaptive_eval", "policies")

#: Bottom to top. A prefix ending in "." names a package and everything in it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        # base/ holds summary.json's contract too (pydantic only), so that what produces a
        # block of the summary (dispatch counts, compare's verdicts) returns the typed block.
        "foundation: statistics, value types, files and logs, summary.json's contract",
        ("adaptive_eval.stats.", "adaptive_eval.base."),
    ),
    (
        "config, input files and stores: the config and its plug-in registry, what is read, "
        "what is kept",
        ("adaptive_eval.config.", "adaptive_eval.inputs.", "adaptive_eval.store."),
    ),
    (
        "decisions, policies, backends and grading",
        (
            "adaptive_eval.decide.",
            "adaptive_eval.grading.",
            "adaptive_eval.backends.",
            "policies.",
        ),
    ),
    (
        "campaign, controller and dispatch",
        ("adaptive_eval.campaign.", "adaptive_eval.control.", "adaptive_eval.dispatch."),
    ),
    (
        "forecasts: the decision core run forward on simulated truths",
        ("adaptive_eval.forecast.",),
    ),
    ("the run loop", ("adaptive_eval.loop.",)),
    (
        "presentation shared by every output",
        (
            "adaptive_eval.outputs",
            "adaptive_eval.outputs.presentation",
            "adaptive_eval.outputs.headline",
        ),
    ),
    (
        "outputs: summary.json, report.md, report.html",
        (
            "adaptive_eval.outputs.summary",
            "adaptive_eval.outputs.report",
            "adaptive_eval.outputs.report_html",
            "adaptive_eval.outputs.provenance",
        ),
    ),
    ("workflows", ("adaptive_eval.workflows.", "adaptive_eval.inspect.")),
    (
        "front ends: the command line and the Python API (each calls the workflows)",
        ("adaptive_eval.command_line.", "adaptive_eval.api."),
    ),
    # Test servers and builders: above everything, so no production module can import them.
    ("test support, imported by tests and benchmarks only", ("adaptive_eval._testing.",)),
)
#: Modules that belong to no layer: the package faces (they only hand names on).
FACES = ("adaptive_eval", "policies")


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def layer_of(module: str) -> int | None:
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if prefix.endswith("."):
                if module == prefix[:-1] or module.startswith(prefix):
                    return index
            elif module == prefix:
                return index
    return None


def imports(module: str, path: Path, known: set[str]) -> Iterator[tuple[int, str]]:
    """(line, module) of every project module ``module`` imports, anywhere in its source."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import sub`` imports the module pkg.sub; ``from mod import name`` mod.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        for target in dict.fromkeys(targets):
            resolved = _resolve(target, known)
            # A package's own modules reaching names through its face is not a cycle of design.
            if resolved is None or resolved == module or module.startswith(resolved + "."):
                continue
            yield node.lineno, resolved


def _resolve(name: str, known: set[str]) -> str | None:
    """The longest known module that ``name`` is or lies in (``a.b.C`` -> ``a.b``)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def check() -> list[str]:
    found = modules()
    known = set(found)
    problems: list[str] = []
    graph: dict[str, set[str]] = {m: set() for m in found}
    for module, path in found.items():
        if module in FACES:
            continue
        here = layer_of(module)
        if here is None:
            problems.append(f"{path.relative_to(ROOT)}: {module} belongs to no layer")
            continue
        for line, target in dict.fromkeys(imports(module, path, known)):
            if target in FACES:
                continue
            graph[module].add(target)
            there = layer_of(target)
            if there is not None and there > here:
                problems.append(
                    f"{path.relative_to(ROOT)}:{line}: {module} ({LAYERS[here][0]}) imports "
                    f"{target} ({LAYERS[there][0]}), a layer above it"
                )
    problems += [f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(graph)]
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [[*component, component[0]] for component in components]


def main() -> int:
    problems = check()
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_layers: {len(problems)} problem(s); the layers are in docs/design.md")
        return 1
    print(f"check_layers: {len(modules())} modules in {len(LAYERS)} layers, no import up, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
