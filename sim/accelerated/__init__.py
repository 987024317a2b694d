"""Accelerated stepping: merged decode runs and spans, bit-identical to the
reference engine (:mod:`sim.engine.simulation`), chosen by the runner at
construction (:func:`sim.runner.make_simulation`). Policies never inherit it:
:mod:`sim.accelerated.policies` names the policies it serves."""

from sim.accelerated.spans import AcceleratedStepping

__all__ = ["AcceleratedStepping"]
