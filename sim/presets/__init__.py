"""Serving-engine presets: per-engine defaults, rules and fitted values."""
