"""GPU hardware profiles and their efficiency forms."""
