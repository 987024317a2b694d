"""``servesim sweep`` and ``servesim plan``: grids of configs, executors, capacity planning."""
