"""A config file's YAML, read hardened: the safe loader, refusing what PyYAML would take silently
or choke on.

A key given twice in one mapping, a document whose aliases expand past
:data:`MAX_YAML_NODES` (a "billion laughs"), one nested deeper than :data:`MAX_YAML_DEPTH`, a file
over :data:`~adaptive_eval.inputs.bounded.MAX_CONFIG_BYTES` or not UTF-8, an integer written with
more than :data:`~adaptive_eval.inputs.bounded.MAX_INT_DIGITS` digits: each is an
:class:`~adaptive_eval.base.errors.InputError` naming the file and the position (and the field,
for an integer). YAML 1.2 numbers (``1e-3``) are numbers. :mod:`adaptive_eval.config.schema`
validates what this reads.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from adaptive_eval.base.errors import InputError, printable
from adaptive_eval.base.redact import is_secret_key
from adaptive_eval.inputs.bounded import (
    MAX_CONFIG_BYTES,
    MAX_INT_DIGITS,
    int_digits,
    read_bytes,
    shown_number,
)

#: The most nodes a config may expand to once its aliases are followed. A config is a few
#: hundred nodes; nine levels of nine aliases (a "billion laughs") expand to 10^9.
MAX_YAML_NODES = 100_000


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader that refuses a key given twice in one mapping (PyYAML keeps the
    last one silently, so ``seed: 1`` then ``seed: 2`` ran with seed 2), and a document whose
    aliases expand it past :data:`MAX_YAML_NODES` (a 26-line alias bomb took 504 MB and printed
    a 28 MB error line)."""

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        _check_integers(node)
        return self.construct_document(node)


def _check_expansion(root: yaml.Node) -> None:
    """Count the nodes ``root`` stands for with every alias expanded, without expanding any:
    an aliased node is one object, counted once and multiplied by its uses."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise yaml.composer.ComposerError(
                None, None, "an alias refers to a node that holds it (a cycle)", node.start_mark
            )
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(item) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        open_nodes.discard(key)
        if total > MAX_YAML_NODES:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"the document expands to more than {MAX_YAML_NODES:,} values once its "
                "aliases are followed (aliases of aliases); write the values out",
                node.start_mark,
            )
        sizes[key] = total
        return total

    size(root)


class _LongInteger(Exception):
    """An integer scalar too long to be a config's value, found before it is constructed: Python
    refuses to convert more than 4,300 digits (a ValueError from inside PyYAML, "unexpected
    error"), and a hexadecimal one converts, to fail wherever it is printed."""

    def __init__(self, path: tuple[str | int, ...], text: str, mark: yaml.Mark) -> None:
        super().__init__(text)
        self.path = path
        self.text = text
        self.mark = mark


def _check_integers(root: yaml.Node) -> None:
    """Refuse a scalar resolved (or tagged) as an integer with more than
    :data:`MAX_INT_DIGITS` digits, naming its field from the composed nodes (each node once,
    however many aliases share it)."""
    stack: list[tuple[yaml.Node, tuple[str | int, ...]]] = [(root, ())]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            if node.tag == "tag:yaml.org,2002:int" and int_digits(node.value) > MAX_INT_DIGITS:
                raise _LongInteger(path, node.value, node.start_mark)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*path, i)) for i, item in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = printable(key.value)[:60] if isinstance(key, yaml.ScalarNode) else "?"
                stack.append((key, path))
                stack.append((value, (*path, name)))


def _long_integer(error: _LongInteger, text: str, source: str) -> InputError:
    """One line naming the field, the integer (shortened; not shown under ``headers`` or a
    credential's key) and where it is."""
    field = "".join(
        f"[{part}]" if isinstance(part, int) else f".{part}" if index else part
        for index, part in enumerate(error.path)
    )
    mark = error.mark
    where = f"line {mark.line + 1}, column {mark.column + 1}" if "\n" in text.strip() else ""
    secret = any(
        isinstance(part, str) and (part.lower() == "headers" or is_secret_key(part))
        for part in error.path
    )
    if secret:
        value = f" (at {where})" if where else ""
    else:
        value = f": {shown_number(error.text)}" + (f" at {where}" if where else "")
    return InputError(
        f"an integer of {int_digits(error.text):,} digits, more than the {MAX_INT_DIGITS} a "
        f"number in a config may have{value}",
        source=source,
        field=field or None,
    )


def _unique_keys(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            first = seen.get(key)
        except TypeError:
            continue  # an unhashable key: construct_mapping says so
        if first is not None:
            problem = f"duplicate key {key!r} (first on line {first + 1})"
            raise yaml.constructor.ConstructorError(None, None, problem, key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_keys)
# YAML 1.2 numbers: PyYAML (YAML 1.1) reads 1e-3 and 1.0e9 as strings, which the schema would
# then refuse as text; every other YAML tool reads them as numbers.
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


#: The deepest a config may nest (collections in collections, flow or block). A config is under
#: ten levels; PyYAML composes and constructs recursively, so 500 levels ended in a
#: RecursionError (rc 1).
MAX_YAML_DEPTH = 64


def _check_depth(text: str) -> None:
    """Refuse a document nested deeper than :data:`MAX_YAML_DEPTH`, from its tokens (PyYAML's
    scanner is iterative; its composer is not)."""
    opening = (
        yaml.BlockMappingStartToken,
        yaml.BlockSequenceStartToken,
        yaml.FlowMappingStartToken,
        yaml.FlowSequenceStartToken,
    )
    closing = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)
    depth = 0
    for token in yaml.scan(text, Loader=_StrictLoader):
        if isinstance(token, opening):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise yaml.scanner.ScannerError(
                    None,
                    None,
                    f"nested more than {MAX_YAML_DEPTH} levels deep (a config needs a few)",
                    token.start_mark,
                )
        elif isinstance(token, closing):
            depth -= 1


def load_yaml(text: str, source: str) -> Any:
    """Parse YAML safely, duplicate keys refused; an error is one line naming the position."""
    try:
        _check_depth(text)
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except _LongInteger as error:
        raise _long_integer(error, text, source) from None
    except RecursionError:
        raise InputError(
            f"invalid YAML: nested too deep to read (at most {MAX_YAML_DEPTH} levels)",
            source=source,
        ) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        context = getattr(error, "context", None)
        detail = " ".join(f"{context + ': ' if context else ''}{problem}".split())
        raise InputError(f"invalid YAML{where}: {detail}", source=source) from None


def read_yaml(path: str | Path, source: str) -> Any:
    """The config file at ``path`` parsed as by :func:`load_yaml` (at most
    :data:`~adaptive_eval.inputs.bounded.MAX_CONFIG_BYTES`, UTF-8)."""
    raw = read_bytes(path, limit=MAX_CONFIG_BYTES, what="config", source=source)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise InputError(
            f"line {line}: not valid UTF-8 (byte 0x{raw[error.start]:02x}); save the config "
            "as UTF-8",
            source=source,
        ) from None
    return load_yaml(text, source)
