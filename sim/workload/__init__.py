"""Workloads: what requests arrive when — synthetic generators, real-trace loaders
and built-in workloads — turned into :class:`RequestSpecs` by :func:`generate_requests`.

Entry points::

    cfg = WorkloadConfig.from_dict({"name": "chat", "request_rate": 4}, source="cli")
    specs = generate_requests(cfg, seed=0, max_model_len=8192)

numpy only at import; pandas is imported inside the trace readers.
"""

from sim.workload.builtin import (builtin_workload_names, load_workload_dict, merge_workload_dicts,
                                  resolve_workload, resolve_workload_dict)
from sim.workload.config import (ColumnsConfig, ConversationConfig, EmpiricalLen, FixedLen, LengthSpec,
                                 LognormalLen, PriorityClass, SharedPrefixConfig, UniformLen, WorkloadConfig)
from sim.workload.generate import generate_requests
from sim.workload.specs import RequestSpecs
from sim.workload.synthetic import (STREAMS, arrival_times, arrival_times_until, assign_priorities, child_rng,
                                    sample_lengths)
from sim.workload.traces import TraceTable, detect_format, load_trace, read_length_column, select_rows

__all__ = [
    "WorkloadConfig", "LengthSpec", "FixedLen", "UniformLen", "LognormalLen", "EmpiricalLen",
    "ColumnsConfig", "SharedPrefixConfig", "ConversationConfig", "PriorityClass",
    "RequestSpecs", "generate_requests",
    "builtin_workload_names", "load_workload_dict", "resolve_workload", "resolve_workload_dict",
    "merge_workload_dicts",
    "STREAMS", "child_rng", "arrival_times", "arrival_times_until", "sample_lengths", "assign_priorities",
    "TraceTable", "load_trace", "detect_format", "select_rows", "read_length_column",
]
