"""servesim: a discrete-event simulator of LLM serving on GPUs.

Nothing runs at import; heavy modules (simpy, pandas, matplotlib) are imported
by the modules that need them.
"""

__version__ = "0.1.0"
