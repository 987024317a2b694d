"""Per-request and per-step records, metrics and result files."""
