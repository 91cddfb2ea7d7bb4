"""One registry class for every kind of plug-in: backends, graders, rubric schemata, pair rules,
stopping rules and allocators.

A plug-in is registered under a name with the decorator :meth:`Registry.register`, on a class or
on a factory function. Its parameters are written once, with their constraints:

* a dataclass registered directly: its ``__init__`` fields are the parameters, typed with
  ``typing.Annotated[int, pydantic.Field(ge=1)]``, ``Literal[...]`` and the like. A field
  ``name`` is no parameter: the registry sets it to the name the class was built under (one
  class may serve two names); ``register(name, internal=(...))`` keeps other fields out too;
* a function (or another class): its keyword parameters, annotated the same way. A factory that
  does real work beyond checks (a backend reads files, a grader builds objects) is registered
  this way.

From them the registry derives a pydantic model of the parameters (:meth:`Registry.params_model`,
cached): unknown keys are refused (``extra="forbid"``), values are strict (``true`` is no
integer, ``2.5`` no count; an integer is a valid float, a YAML list a valid sequence) and finite
(no ``.nan``, no ``.inf``). A bad value is one :class:`InputError` naming the plug-in, the
parameter, what it must be and the value given, e.g.
``pair rule 'group_sequential': horizons must be an integer in [1, 8], got 0``. Rules between
fields go in the dataclass's ``__post_init__`` (a ``ValueError``) or in the factory.

Every built instance records its resolved name and parameters, defaults included
(:meth:`Registry.resolved`). An entry may also declare traits, read by name without building it
(:meth:`Registry.traits`): a backend's :class:`BackendTraits` say what the rest of the house
asks of it (engine, packages, export kind), so a new backend is one file.

Built-in plug-ins register themselves when their module is imported; third-party ones (and the
top-level ``policies`` package) are found through the entry-point group :data:`ENTRY_POINT_GROUP`,
loaded the first time a name is looked up. The core never imports ``policies`` directly.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import importlib
import inspect
import sys
import types
import typing
import weakref
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import entry_points
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from adaptive_eval.base.errors import InputError

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

#: Entry-point group read for every kind; each entry point names a module to import.
ENTRY_POINT_GROUP = "adaptive_eval.policies"
_BUILTIN_MODULES = ("adaptive_eval.backends",)

#: How every parameter model validates.
PARAMS_CONFIG = ConfigDict(
    extra="forbid", strict=True, allow_inf_nan=False, arbitrary_types_allowed=True
)


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What one instance was built from: its kind, registered name and every parameter, the
    defaults included."""

    kind: str
    name: str
    items: tuple[tuple[str, Any], ...]

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.items)


@dataclasses.dataclass(frozen=True)
class _Params:
    """A plug-in's derived parameter model: which model field carries which parameter, and
    whether the factory takes a ``name``."""

    model: type[BaseModel]
    keys: dict[str, str]  # parameter name -> model field name
    takes_name: bool
    open: bool  # the factory takes **kwargs: unknown keys pass through


class Registry(Generic[T]):
    """A named collection of plug-ins of one kind, each built from validated parameters.

    ``label_errors``: an :class:`InputError` the factory itself raises is re-raised naming the
    plug-in (graders); otherwise it passes through as raised (backends name their own fields).
    ``traits``: what a kind's entries declare besides their factory (backends: a
    :class:`BackendTraits`), the value an entry registered without any has; read by name with
    :meth:`traits`.
    """

    def __init__(self, kind: str, *, label_errors: bool = False, traits: Any = None) -> None:
        self.kind = kind
        self.label_errors = label_errors
        self._factories: dict[str, Callable[..., T]] = {}
        self._internal: dict[str, frozenset[str]] = {}
        self._default_traits = traits
        self._traits: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"Registry({self.kind!r})"

    def register(
        self, name: str, *, internal: tuple[str, ...] = (), traits: Any = None
    ) -> Callable[[F], F]:
        """Register a class or a factory under ``name``; ``internal`` names dataclass fields
        (or factory parameters) that are no user parameters and keep their defaults;
        ``traits``: what it declares besides (the kind's default when None)."""

        def decorate(factory: F) -> F:
            known = self._factories.get(name)
            if known is not None and known is not factory:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._factories[name] = factory
            self._internal[name] = frozenset(internal)
            self._traits[name] = self._default_traits if traits is None else traits
            return factory

        return decorate

    def unregister(self, name: str) -> None:
        """Forget ``name`` (tests that register a plug-in of their own)."""
        self._factories.pop(name, None)
        self._internal.pop(name, None)
        self._traits.pop(name, None)

    def names(self) -> list[str]:
        load_plugins()
        return sorted(self._factories)

    def __contains__(self, name: object) -> bool:
        load_plugins()
        return name in self._factories

    def traits(self, name: object) -> Any:
        """What ``name`` declared when it registered; the kind's default for a name that is not
        (or no longer) registered, such as an old run's."""
        load_plugins()
        found = self._traits.get(name) if isinstance(name, str) else None
        return self._default_traits if found is None else found

    def declared(self) -> list[Any]:
        """Every entry's traits, in registration order."""
        load_plugins()
        return list(self._traits.values())

    def label(self, name: str) -> str:
        return f"{self.kind} {name!r}"

    def factory(
        self, name: str, *, source: str | None = None, field: str | None = None
    ) -> Callable[..., T]:
        load_plugins()
        if name not in self._factories:
            known = ", ".join(sorted(self._factories)) or "none"
            raise InputError(
                f"unknown {self.kind} {name!r} (known: {known})", source=source, field=field
            )
        return self._factories[name]

    def _params(self, name: str) -> _Params:
        return _derive(self.factory(name), self._internal[name])

    def params_model(self, name: str) -> type[BaseModel]:
        """The pydantic model of ``name``'s parameters (derived once, cached)."""
        return self._params(name).model

    def parameters(self, name: str) -> list[str]:
        """The parameters ``name`` takes, in declaration order."""
        return list(self._params(name).keys)

    def build(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        *,
        source: str | None = None,
        field: str | None = None,
    ) -> T:
        """Validate ``params`` against the plug-in's model and build it; a bad name or parameter
        is one :class:`InputError` at ``source`` / ``field`` (``field.parameter`` where one
        parameter is to blame)."""
        factory = self.factory(name, source=source, field=field)
        derived = self._params(name)
        given = dict(params or {})
        try:
            validated = derived.model.model_validate(given)  # keyed by the parameter names
        except ValidationError as error:
            raise self._refusal(name, derived, error, given, source, field) from None
        values = {key: getattr(validated, attr) for key, attr in derived.keys.items()}
        if derived.open:
            values.update(validated.model_extra or {})
        call = dict(values, name=name) if derived.takes_name else values
        label = self.label(name)
        try:
            built: T = factory(**call)
        except InputError as error:
            if not self.label_errors:
                raise
            raise InputError(
                f"{label}: {error.message}",
                source=error.source or source,
                field=_join(field, error.field),
            ) from None
        except (TypeError, ValueError) as error:
            raise InputError(f"{label}: {error}", source=source, field=field) from error
        _record(built, Resolved(self.kind, name, tuple(values.items())))
        return built

    def resolved(self, instance: object) -> Resolved:
        """The name and parameters (defaults included) ``instance`` was built from."""
        found = _RECORDS.get(id(instance))
        if found is None or found.kind != self.kind:
            raise LookupError(f"{instance!r} was not built by the {self.kind} registry")
        return found

    def mapping(self) -> Mapping[str, T]:
        """A read-only ``name -> instance`` view, each built with its defaults (for kinds
        without parameters, such as rubric schemata)."""
        return _Built(self)

    def _refusal(
        self,
        name: str,
        derived: _Params,
        error: ValidationError,
        given: dict[str, Any],
        source: str | None,
        field: str | None,
    ) -> InputError:
        """One error for a failed validation: unknown keys first, then missing ones, then bad
        values, each naming the parameter and (for values) what it must be and the value."""
        attrs = {attr: key for key, attr in derived.keys.items()}
        found: dict[str, list[tuple[str | None, str]]] = {"extra": [], "missing": [], "value": []}
        seen: set[str | None] = set()
        for item in error.errors():
            loc = item["loc"]
            key = attrs.get(str(loc[0]), str(loc[0])) if loc else None
            if key in seen:
                continue  # a union reports each member's failure: the field's rule says it all
            seen.add(key)
            if item["type"] == "extra_forbidden":
                found["extra"].append((key, repr(key)))
            elif item["type"] == "missing":
                found["missing"].append((key, f"needs parameter {key!r}"))
            elif key is None:
                found["value"].append((None, str(item["msg"]).removeprefix("Value error, ")))
            else:
                info = derived.model.model_fields[derived.keys[key]]
                rule = describe(info.annotation, info.metadata)
                found["value"].append((key, f"{key} must be {rule}, got {_shown(given[key])}"))
        if found["extra"]:
            allowed = ", ".join(derived.keys) or "none"
            plural = "s" if len(found["extra"]) > 1 else ""
            unknown = ", ".join(part for _, part in found["extra"])
            found["extra"] = [
                (found["extra"][0][0], f"has no parameter{plural} {unknown} (allowed: {allowed})")
            ]
        parts = found["extra"] or found["missing"] or found["value"]
        text = "; ".join(part for _, part in parts)
        joiner = ": " if parts is found["value"] else " "
        return InputError(
            f"{self.label(name)}{joiner}{text}", source=source, field=_join(field, parts[0][0])
        )


class _Built(Mapping[str, T]):
    def __init__(self, registry: Registry[T]) -> None:
        self._registry = registry

    def __getitem__(self, name: str) -> T:
        if name not in self._registry:
            raise KeyError(name)
        return self._registry.build(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry.names())

    def __len__(self) -> int:
        return len(self._registry.names())


def _join(field: str | None, sub: str | None) -> str | None:
    if field and sub:
        return f"{field}.{sub}"
    return field or sub


def _shown(value: Any, keep: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= keep else text[: keep - 3] + "..."


# ---- recording what each instance was built from ----------------------------------------------

#: id(instance) -> what it was built from; an entry leaves with its instance.
_RECORDS: dict[int, Resolved] = {}


def _record(instance: object, resolved: Resolved) -> None:
    key = id(instance)
    if _RECORDS.get(key) == resolved:
        return  # a shared instance (a rubric schema) built again the same way
    try:
        leave = weakref.finalize(instance, _RECORDS.pop, key, None)
    except TypeError:
        return  # not weakly referenceable: nothing recorded (resolved() says so)
    leave.atexit = False
    _RECORDS[key] = resolved


def resolved(instance: object) -> Resolved:
    """The kind, name and parameters ``instance`` was built from by any registry."""
    found = _RECORDS.get(id(instance))
    if found is None:
        raise LookupError(f"{instance!r} was not built by a registry")
    return found


# ---- deriving the parameter model -------------------------------------------------------------


def _namespace(owner: Any) -> dict[str, Any]:
    module = sys.modules.get(getattr(owner, "__module__", "") or "")
    return dict(vars(module)) if module is not None else {}


def _hints(owner: Any) -> dict[str, Any]:
    """``owner``'s annotations with their ``Annotated`` extras; a name that cannot be resolved
    (imported for type checking only) is ``Any``, the rest keep their types."""
    try:
        return typing.get_type_hints(owner, include_extras=True)
    except (NameError, TypeError, AttributeError):
        pass
    found: dict[str, Any] = {}
    layers = reversed(owner.__mro__) if isinstance(owner, type) else (owner,)
    for layer in layers:
        namespace = _namespace(layer)
        for key, text in inspect.get_annotations(layer).items():
            try:
                found[key] = eval(text, namespace) if isinstance(text, str) else text
            except Exception:
                found[key] = Any
    return found


def _model_key(name: str) -> str:
    """A model field name for parameter ``name`` (``schema`` would shadow BaseModel's)."""
    clash = name.startswith("_") or hasattr(BaseModel, name)
    return f"param_{name.lstrip('_')}" if clash else name


@functools.cache
def _derive(factory: Callable[..., Any], internal: frozenset[str]) -> _Params:
    fields: dict[str, tuple[Any, Any]] = {}
    keys: dict[str, str] = {}
    takes_name = False
    open_ = False

    def add(key: str, annotation: Any, default: Any) -> None:
        attr = _model_key(key)
        keys[key] = attr
        if attr != key:
            default = Field(default, alias=key) if default is not ... else Field(alias=key)
        fields[attr] = (annotation, default)

    if dataclasses.is_dataclass(factory) and isinstance(factory, type):
        hints = _hints(factory)
        for item in dataclasses.fields(factory):
            if not item.init:
                continue
            if item.name == "name":
                takes_name = True
                continue
            if item.name in internal:
                continue
            if item.default is not dataclasses.MISSING:
                default: Any = item.default
            elif item.default_factory is not dataclasses.MISSING:
                default = Field(default_factory=item.default_factory)
            else:
                default = ...
            add(item.name, hints.get(item.name, Any), default)
    else:
        target = factory.__init__ if isinstance(factory, type) else factory  # type: ignore[misc]
        hints = _hints(target)
        for param in inspect.signature(factory).parameters.values():
            if param.kind is param.VAR_KEYWORD:
                open_ = True
            elif param.kind is not param.VAR_POSITIONAL and param.name not in internal:
                default = ... if param.default is param.empty else param.default
                add(param.name, hints.get(param.name, Any), default)
    config = ConfigDict(**{**PARAMS_CONFIG, "extra": "allow" if open_ else "forbid"})
    model = create_model(  # type: ignore[call-overload]
        f"{getattr(factory, '__name__', 'plugin')}_params", __config__=config, **fields
    )
    return _Params(model, keys, takes_name, open_)


# ---- describing a parameter's rule in words ---------------------------------------------------


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _bounds(metadata: list[Any]) -> tuple[str, bool]:
    """The bounds in ``metadata`` as text, and whether both ends are bounded."""
    lower = upper = None
    for item in metadata:
        for attr, bracket in (("ge", "["), ("gt", "(")):
            if getattr(item, attr, None) is not None:
                lower = (bracket, getattr(item, attr))
        for attr, bracket in (("le", "]"), ("lt", ")")):
            if getattr(item, attr, None) is not None:
                upper = (bracket, getattr(item, attr))
    if lower and upper:
        return f" in {lower[0]}{_number(lower[1])}, {_number(upper[1])}{upper[0]}", True
    if lower:
        return f" {'>=' if lower[0] == '[' else '>'} {_number(lower[1])}", False
    if upper:
        return f" {'<=' if upper[0] == ']' else '<'} {_number(upper[1])}", False
    return "", False


_NOUNS = {bool: "booleans", int: "integers", float: "numbers", str: "strings"}


def describe(annotation: Any, metadata: list[Any] | None = None) -> str:
    """What a parameter typed ``annotation`` (with constraints ``metadata``) must be, in words:
    ``an integer in [1, 8]``, ``a number in [0, 0.5)``, ``one of 'obf', 'pocock'``."""
    metadata = list(metadata or [])
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Annotated:
        extra = [m for info in args[1:] for m in getattr(info, "metadata", [info])]
        return describe(args[0], metadata + extra)
    if origin in (typing.Union, types.UnionType):
        members = [arg for arg in args if arg is not type(None)]
        if len(members) == 1:
            return describe(members[0], metadata)
        return " or ".join(describe(member, metadata) for member in members)
    if origin is Literal:
        return "one of " + ", ".join(repr(arg) for arg in args)
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return "an integer" + _bounds(metadata)[0]
    if annotation is float:
        bounds, closed = _bounds(metadata)
        return ("a number" if closed else "a finite number") + bounds
    if annotation is str:
        return "a string"
    if origin in (list, tuple, collections.abc.Sequence, collections.abc.Set, set, frozenset):
        noun = _NOUNS.get(args[0]) if args else None
        return f"a list of {noun}" if noun else "a list"
    if origin in (dict, collections.abc.Mapping) or annotation in (dict, Mapping):
        return "a mapping"
    if origin is collections.abc.Callable or annotation is collections.abc.Callable:
        return "a callable"
    if isinstance(annotation, type):
        return f"a {annotation.__name__}"
    return str(annotation)


# ---- finding plug-ins -------------------------------------------------------------------------

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


@dataclasses.dataclass(frozen=True)
class BackendTraits:
    """What the rest of the house asks of a backend by its name, declared where it registers
    (``@backends.register("name", traits=BackendTraits(...))``), so a new backend is one file:

    * ``module``, ``install``: the module its workers run on, looked for (``find_spec``) before
      Ray starts, and how to install it, said when it is missing (``dispatch/cluster.py``);
    * ``packages``: distributions whose versions shape its results, recorded in every run's store
      (``loop/rundir.py``; each registered backend's, in registration order, duplicates once);
    * ``deployment``: Every Eval Ever's ``deployment_type`` of its models, and ``engine``: the
      ``inference_engine`` named there, its version read from the backend's recorded ``engine``
      file (``workflows/eee.py``);
    * ``served``: its models are served by someone else, so the provenance lists what the servers
      reported serving (``outputs/provenance.py``).

    Where its workers are placed (CPUs, GPUs) is its plan's own (``BackendPlan.actor_options``).
    A backend registered without traits, or a name no longer registered (an old run's config),
    has the defaults: nothing to check or record, deployment ``unknown``, not served.
    """

    module: str = ""
    install: str = ""
    packages: tuple[str, ...] = ()
    deployment: Literal["self_deployed", "externally_managed", "unknown"] = "unknown"
    engine: str = ""
    served: bool = False


backends: Registry[Any] = Registry("backend", traits=BackendTraits())
pair_rules: Registry[Any] = Registry("pair rule")
stopping_rules: Registry[Any] = Registry("stopping rule")
allocators: Registry[Any] = Registry("allocation policy")
