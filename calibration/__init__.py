"""Calibration: read measured kernel tables (or measure live with torch) and
check / fit the cost model's parameters. Only this package imports torch, and
only in the modules that run kernels."""
