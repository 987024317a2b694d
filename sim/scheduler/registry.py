"""Scheduler registry: batching modes by name, extensible without editing servesim.

A researcher's policy::

    from sim.scheduler import ChunkedPrefillScheduler, register_scheduler

    class ShortestPromptFirst(ChunkedPrefillScheduler):
        ...

    register_scheduler("spf", ShortestPromptFirst)

then ``scheduler: spf`` in a config (or ``--scheduler spf``). Packages can also
register through the ``servesim.schedulers`` entry-point group
(``name = "module:Class"``), loaded on the first lookup of a name not registered.
"""

from __future__ import annotations

from sim.errors import ConfigError
from sim.scheduler.base import Scheduler, SchedulerLimits
from sim.scheduler.chunked import ChunkedPrefillScheduler
from sim.scheduler.continuous import ContinuousBatchingScheduler
from sim.scheduler.mixed import MixedBatchingScheduler
from sim.scheduler.prefill_first import (MixedChunkPrefillFirstScheduler, PrefillFirstScheduler,
                                         WholePrefillFirstScheduler)
from sim.scheduler.static import StaticBatchingScheduler

_REGISTRY: dict[str, type[Scheduler]] = {
    "static": StaticBatchingScheduler,
    "continuous": ContinuousBatchingScheduler,
    "chunked": ChunkedPrefillScheduler,
    "mixed": MixedBatchingScheduler,
    "prefill_first": PrefillFirstScheduler,
    "prefill_first_whole": WholePrefillFirstScheduler,
    "prefill_first_mixed": MixedChunkPrefillFirstScheduler,
}
#: the built-in batching modes (the engine presets run them): not replaced by a registration
_BUILTIN = frozenset(_REGISTRY)
_entry_points_loaded = False


def register_scheduler(name: str, cls: type[Scheduler]) -> None:
    """Register ``cls`` (a :class:`Scheduler` subclass) under ``name``; a name of
    one's own may be registered again (a notebook cell run twice), a built-in
    one not: ValueError (every run of it, presets included, would run the policy)."""
    if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
        raise TypeError(f"register_scheduler({name!r}, ...): {cls!r} is not a Scheduler subclass")
    if name in _BUILTIN and _REGISTRY[name] is not cls:
        raise ValueError(f"register_scheduler({name!r}, {cls.__name__}): {name!r} is a built-in batching mode (the "
                         f"engine presets run it); register the policy under a name of its own, e.g. "
                         f"{cls.__name__.lower()!r}")
    _REGISTRY[name] = cls


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from importlib.metadata import entry_points

    for ep in entry_points(group="servesim.schedulers"):
        _REGISTRY.setdefault(ep.name, ep.load())


def list_schedulers() -> list[str]:
    _load_entry_points()
    return sorted(_REGISTRY)


def get_scheduler_class(name: str) -> type[Scheduler]:
    cls = _REGISTRY.get(name)
    if cls is not None:  # (an entry point never replaces a registered name: no scan needed)
        return cls
    _load_entry_points()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(
            f"scheduler: unknown batching mode {name!r}; valid values: {', '.join(list_schedulers())}"
        ) from None


def make_scheduler(name: str, limits: SchedulerLimits, kv) -> Scheduler:
    return get_scheduler_class(name)(limits, kv)
