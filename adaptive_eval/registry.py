"""Name -> factory registries for plug-ins: backends, pair rules, stopping rules, allocators.

Built-in plug-ins register themselves when their module is imported; third-party ones (and the
top-level ``policies`` package) are found through the entry-point group of their kind, loaded the
first time a name is looked up. The core never imports ``policies`` directly.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import types
import typing
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from pydantic import ConfigDict, TypeAdapter, ValidationError

from adaptive_eval.errors import InputError

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

#: Entry-point group read for every kind; each entry point names a module to import.
ENTRY_POINT_GROUP = "adaptive_eval.policies"
_BUILTIN_MODULES = ("adaptive_eval.backends",)


class Registry(Generic[T]):
    """A named collection of factories for one kind of plug-in."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[..., T]] = {}

    def register(self, name: str) -> Callable[[F], F]:
        def decorate(factory: F) -> F:
            if name in self._factories and self._factories[name] is not factory:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._factories[name] = factory
            return factory

        return decorate

    def names(self) -> list[str]:
        load_plugins()
        return sorted(self._factories)

    def factory(self, name: str, *, source: str | None = None, field: str | None = None) -> Any:
        load_plugins()
        if name not in self._factories:
            known = ", ".join(sorted(self._factories)) or "none"
            raise InputError(
                f"unknown {self.kind} {name!r} (known: {known})", source=source, field=field
            )
        return self._factories[name]

    def build(
        self,
        name: str,
        params: dict[str, Any] | None = None,
        *,
        source: str | None = None,
        field: str | None = None,
    ) -> T:
        """Call the factory with ``params``, turning a bad parameter into an :class:`InputError`."""
        factory = self.factory(name, source=source, field=field)
        params = dict(params or {})
        signature = inspect.signature(factory)
        accepts_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        if not accepts_any:
            unknown = sorted(set(params) - set(signature.parameters))
            if unknown:
                allowed = ", ".join(signature.parameters) or "none"
                raise InputError(
                    f"{self.kind} {name!r} has no parameter {unknown[0]!r} (allowed: {allowed})",
                    source=source,
                    field=field,
                )
        try:
            result: T = factory(**params)
            # After the factory: its own message is the more specific one where it checks.
            _check_types(factory, params)
        except (TypeError, ValueError) as error:
            raise InputError(
                f"{self.kind} {name!r}: {error}", source=source, field=field
            ) from error
        return result


_SIMPLE = (int, float, bool, str, type(None))


def _simple(annotation: Any) -> bool:
    """Whether ``annotation`` is built from int, float, bool, str and None only."""
    args = typing.get_args(annotation)
    if args and typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return all(_simple(arg) for arg in args)
    return annotation in _SIMPLE


@functools.cache
def _param_types(factory: Callable[..., Any]) -> dict[str, TypeAdapter[Any]]:
    """Validators of a factory's plainly typed parameters: strict (``true`` is no int, 2.5 no
    int) and finite (no .nan, no .inf)."""
    try:
        hints = typing.get_type_hints(factory)
    except (NameError, TypeError):
        return {}
    strict = ConfigDict(strict=True, allow_inf_nan=False)
    return {
        name: TypeAdapter(hint, config=strict)
        for name, hint in hints.items()
        if name != "return" and _simple(hint)
    }


def _check_types(factory: Callable[..., Any], params: dict[str, Any]) -> None:
    """Refuse a parameter value of the wrong type that the factory let through (a
    ``width <= 0`` check lets .nan pass; ``n: 2.7`` would become a fractional count)."""
    for name, adapter in _param_types(factory).items():
        if name not in params:
            continue
        try:
            adapter.validate_python(params[name])
        except ValidationError as error:
            message = error.errors()[0]["msg"].lower()
            raise ValueError(f"parameter {name}: {message} (got {params[name]!r})") from None


_loaded = False


def load_plugins() -> None:
    """Import built-in plug-in modules and every module named in the entry-point group, once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        entry.load()


backends: Registry[Any] = Registry("backend")
pair_rules: Registry[Any] = Registry("pair rule")
stopping_rules: Registry[Any] = Registry("stopping rule")
allocators: Registry[Any] = Registry("allocation policy")
