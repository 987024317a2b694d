"""Scheduler policies (clock-free): one module per batching mode, and a registry."""

from sim.scheduler.base import Scheduler, SchedulerLimits, SchedulerOutput
from sim.scheduler.chunked import ChunkedPrefillScheduler
from sim.scheduler.continuous import ContinuousBatchingScheduler
from sim.scheduler.registry import (
    get_scheduler_class,
    list_schedulers,
    make_scheduler,
    register_scheduler,
)
from sim.scheduler.static import StaticBatchingScheduler

__all__ = [
    "Scheduler", "SchedulerLimits", "SchedulerOutput", "ChunkedPrefillScheduler",
    "ContinuousBatchingScheduler", "StaticBatchingScheduler", "get_scheduler_class",
    "list_schedulers", "make_scheduler", "register_scheduler",
]
