"""Accelerated stepping: merged decode runs and spans, bit-identical to the reference engine."""
