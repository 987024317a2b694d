"""CPU/framework time of an engine step, outside the cost model.

Each engine step has host work besides the GPU forward pass: scheduling,
building the input tensors, launching the forward (a CUDA-graph replay for
decode batches), sampling bookkeeping, checking stop conditions and handing
outputs to the detokenizer. Two fitted parameters per engine
(``sim/presets/``):

- ``cpu_step_overhead_s`` (s): the part that does not depend on the batch;
- ``cpu_seq_overhead_s`` (s per scheduled sequence): the per-request Python
  work of scheduling and output processing;
- ``eager_step_overhead_s`` (s): extra host time of a step that carries prefill
  tokens. Decode-only batches replay a captured CUDA graph (one launch); a
  batch with prefill tokens has shapes no graph was captured for and launches
  every kernel of the forward pass from the host (TensorRT-LLM's PyTorch
  backend captures generation-only batches; SGLang's default graphs are
  decode-only too).

Engines that overlap this work with the GPU (TensorRT-LLM's overlap scheduler,
SGLang's overlap schedule, vLLM's async scheduling from 0.14) prepare step
i+1 while step i runs, so a step lasts ``max(gpu, cpu)``; the others run them
back to back, ``gpu + cpu`` (ENGINE_SEMANTICS §10.11).

The formulas use only float ``+`` and ``max``, elementwise, so a merged run
of decode steps (:meth:`StepOverheads.apply_run`) gives the same floats as
the steps one at a time (:meth:`StepOverheads.apply`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StepOverheads:
    step_s: float = 0.0
    seq_s: float = 0.0
    overlap: bool = False
    eager_s: float = 0.0

    @property
    def is_zero(self) -> bool:
        return self.step_s == 0.0 and self.seq_s == 0.0 and self.eager_s == 0.0

    def cpu_s(self, num_seqs: int, has_prefill: bool = False) -> float:
        """Host time (s) of a step over ``num_seqs`` scheduled sequences."""
        cpu = self.step_s + self.seq_s * num_seqs
        return cpu + self.eager_s if has_prefill else cpu

    def apply(self, gpu_s: float, num_seqs: int, has_prefill: bool = False) -> float:
        """Step time (s) from the GPU time of one step."""
        if self.is_zero:
            return gpu_s
        cpu = self.cpu_s(num_seqs, has_prefill)
        return max(gpu_s, cpu) if self.overlap else gpu_s + cpu

    def apply_run(self, gpu_s: np.ndarray | list[float], num_seqs: int) -> np.ndarray | list[float]:
        """Step times (s) of a run of decode-only steps of ``num_seqs`` sequences
        each (an array, or a list of floats for a list)."""
        if self.is_zero:
            return gpu_s
        cpu = self.cpu_s(num_seqs)
        if isinstance(gpu_s, list):
            return [max(t, cpu) for t in gpu_s] if self.overlap else [t + cpu for t in gpu_s]
        return np.maximum(gpu_s, cpu) if self.overlap else gpu_s + cpu
