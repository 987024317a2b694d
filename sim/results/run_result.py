"""What one simulation run returns: the per-request and per-step columns, the
ITL samples and the run's counters (built by :class:`sim.engine.simulation.Simulation`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class RunResult:
    """``requests`` / ``steps``: columns by name (``sim.results.metrics.REQUEST_COLUMNS`` /
    ``STEP_COLUMNS``); ``itl``: (gaps s, weights); ``rejected_reasons``: request id -> reason."""

    requests: dict[str, np.ndarray]
    steps: dict[str, np.ndarray]
    itl: tuple[np.ndarray, np.ndarray]
    rejected_reasons: dict[int, str]
    num_events: int
    num_steps: int
    sim_time_s: float
    kv_reserved_unused_fraction: float
