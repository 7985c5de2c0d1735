"""Where the declarations are found: built-ins, plugins and judge files.

Built-in metrics are the :class:`~ragjury.metrics.Metric` objects at the top level of the
modules in :mod:`ragjury.agents` (a new module there is a new metric, with nothing else to
change); plugins are packages that name their metrics under the entry-point group
``ragjury.metrics``; judge files (``--judge FILE``) are read by
:mod:`ragjury.agents.custom_judge`. :class:`Registry` holds the ones a run may use.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType

from ragjury._json import JSONData, json_object
from ragjury.errors import ConfigurationError
from ragjury.metrics.declaration import FRACTION, Metric, Scale

ENTRY_POINT_GROUP = "ragjury.metrics"
AGENTS = "ragjury.agents"
"""The package whose modules declare the built-in metrics."""


def _declared_in(module: ModuleType) -> list[Metric]:
    return [value for value in vars(module).values() if isinstance(value, Metric)]


@functools.cache
def builtin_metrics() -> tuple[Metric, ...]:
    """Every metric declared in a module of :mod:`ragjury.agents`, in listing order."""
    # found, not imported by name: the agents import this package, not the other way
    spec = importlib.util.find_spec(AGENTS)
    assert spec is not None
    assert spec.submodule_search_locations is not None
    found: dict[str, Metric] = {}
    for info in sorted(pkgutil.iter_modules(spec.submodule_search_locations), key=lambda m: m.name):
        module = importlib.import_module(f"{AGENTS}.{info.name}")
        for metric in _declared_in(module):
            found.setdefault(metric.name, metric)
    return tuple(sorted(found.values(), key=lambda m: (m.order, m.name)))


def _as_metrics(value: object, source: str) -> list[Metric]:
    if callable(value) and not isinstance(value, Metric):
        value = value()
    if isinstance(value, Metric):
        return [value]
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        items = list(value)
        if items and all(isinstance(item, Metric) for item in items):
            return items
    raise ConfigurationError(
        f"metric plugin {source} gave {type(value).__name__}, not a ragjury.metrics.Metric "
        "(or a list of them, or a function returning them); fix the plugin or uninstall it"
    )


@functools.cache
def plugin_metrics() -> tuple[Metric, ...]:
    """The metrics of installed plugins (entry-point group ``ragjury.metrics``)."""
    found: list[Metric] = []
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        source = f"{point.name!r} ({point.value}, package {_dist(point)})"
        try:
            loaded = point.load()
        except Exception as exc:  # a broken plugin is named, whatever it raised
            raise ConfigurationError(
                f"metric plugin {source} failed to load: {type(exc).__name__}: {exc}; fix or "
                "uninstall that package"
            ) from exc
        for metric in _as_metrics(loaded, source):
            origin = metric.origin if metric.origin != "builtin" else f"plugin {point.name}"
            found.append(_with_origin(metric, origin))
    return tuple(found)


def _dist(point: EntryPoint) -> str:
    return point.dist.name if point.dist is not None else "unknown"


def _with_origin(metric: Metric, origin: str) -> Metric:
    from dataclasses import replace

    return metric if metric.origin == origin else replace(metric, origin=origin)


class Registry:
    """The metrics a run may use, by name, in listing order."""

    def __init__(self, metrics: Iterable[Metric]) -> None:
        self._metrics: dict[str, Metric] = {}
        for metric in metrics:
            known = self._metrics.get(metric.name)
            if known is not None:
                raise ConfigurationError(
                    f"metric {metric.name!r} of {metric.origin} clashes with the {known.origin} "
                    f"metric of that name; give it another name"
                )
            self._metrics[metric.name] = metric
        ordered = sorted(self._metrics.values(), key=lambda m: (m.order, m.name))
        self._metrics = {m.name: m for m in ordered}

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._metrics.values())

    def __len__(self) -> int:
        return len(self._metrics)

    def __contains__(self, name: object) -> bool:
        return name in self._metrics

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._metrics)

    @property
    def groups(self) -> dict[str, tuple[str, ...]]:
        """Names that stand for several metrics (``rag_triad``) and what they stand for."""
        found: dict[str, list[str]] = {}
        for metric in self:
            for group in metric.groups:
                found.setdefault(group, []).append(metric.name)
        return {group: tuple(names) for group, names in found.items()}

    def __getitem__(self, name: str) -> Metric:
        try:
            return self._metrics[name]
        except KeyError:
            raise ConfigurationError(self.unknown(name)) from None

    def get(self, name: str) -> Metric | None:
        return self._metrics.get(name)

    def unknown(self, name: str, flag: str = "--metrics") -> str:
        return (
            f"{flag}: unknown metric {name!r}; the metrics are {', '.join(self.names)} "
            "(`ragjury metrics` describes each; add your own with --judge FILE)"
        )

    def with_judges(self, judges: Sequence[Metric]) -> Registry:
        return Registry([*self, *judges]) if judges else self

    def expand(self, requested: Sequence[str], flag: str = "--metrics") -> tuple[str, ...]:
        """Requested names (groups standing for theirs), checked, without repeats."""
        groups = self.groups
        expanded: list[str] = []
        for name in requested:
            if name in groups:
                expanded.extend(groups[name])
            elif name in self._metrics:
                expanded.append(name)
            else:
                raise ConfigurationError(self.unknown(name, flag))
        return tuple(dict.fromkeys(expanded))

    def choose(self, filled: AbstractSet[str], requested: Sequence[str] | None) -> tuple[str, ...]:
        """The metrics of a run: as requested, or those each declaration chooses by default
        for what the samples fill."""
        if requested:
            return self.expand(requested)
        return tuple(m.name for m in self if m.by_default is not None and m.by_default(filled))

    def check_thresholds(self, thresholds: Mapping[str, float]) -> None:
        """Each pass mark names a metric that has one, and lies on that metric's scale."""
        for name, value in thresholds.items():
            flag = f"--threshold {name}={value:g}"
            metric = self.get(name)
            if metric is None:
                raise ConfigurationError(self.unknown(name, "--threshold"))
            if metric.threshold is None:
                raise ConfigurationError(
                    f"{flag}: {name} has no pass mark to set (its pass rule: {metric.rule()})"
                )
            if not metric.scale.contains(value):
                raise ConfigurationError(
                    f"{flag}: {name} scores run {metric.scale.describe()}; give a pass mark on "
                    f"that scale, e.g. {name}={metric.scale.example()}"
                )

    def prompt_names(self, metrics: Iterable[str] | None = None) -> tuple[str, ...]:
        """The prompts the metrics' agents render (every metric's when None)."""
        chosen = self if metrics is None else [self[m] for m in metrics if m in self]
        return tuple(dict.fromkeys(name for metric in chosen for name in metric.prompts))

    def roles(self, metrics: Iterable[str] | None = None) -> tuple[str, ...]:
        chosen = self if metrics is None else [self[m] for m in metrics]
        return tuple(dict.fromkeys(role for metric in chosen for role in metric.agents))

    def llm_roles(self) -> frozenset[str]:
        return frozenset(role for metric in self if metric.llm for role in metric.agents)

    def needs_llm(self, metrics: Iterable[str]) -> bool:
        return any(self[m].llm for m in metrics)


def registry(judges: Sequence[Metric] = ()) -> Registry:
    """The built-in metrics, those of installed plugins, and ``judges`` (from judge files)."""
    return _installed().with_judges(judges)


@functools.cache
def _installed() -> Registry:
    return Registry([*builtin_metrics(), *plugin_metrics()])


def scale_of(name: str, declared: JSONData = None) -> Scale:
    """A metric's scale: its declaration's; for a metric not installed here (a judge file
    of the run), the declaration a run's summary kept (``summary["declarations"]``)."""
    metric = registry().get(name)
    if metric is not None:
        return metric.scale
    scale = json_object(json_object(declared).get(name)).get("scale")
    if isinstance(scale, Mapping):
        return Scale.from_dict(scale)
    return FRACTION
