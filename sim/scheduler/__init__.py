"""Scheduler policies (clock-free): one module per batching mode, and a registry."""

from sim.scheduler.base import Scheduler, SchedulerLimits, SchedulerOutput
from sim.scheduler.chunked import ChunkedPrefillScheduler
from sim.scheduler.continuous import ContinuousBatchingScheduler
from sim.scheduler.mixed import MixedBatchingScheduler
from sim.scheduler.prefill_first import PrefillFirstScheduler, WholePrefillFirstScheduler
from sim.scheduler.registry import (
    get_scheduler_class,
    list_schedulers,
    make_scheduler,
    register_scheduler,
)
from sim.scheduler.static import StaticBatchingScheduler

__all__ = [
    "Scheduler", "SchedulerLimits", "SchedulerOutput", "ChunkedPrefillScheduler",
    "ContinuousBatchingScheduler", "StaticBatchingScheduler", "MixedBatchingScheduler",
    "PrefillFirstScheduler", "WholePrefillFirstScheduler", "get_scheduler_class",
    "list_schedulers", "make_scheduler", "register_scheduler",
]
