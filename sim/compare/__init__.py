"""``servesim compare``: variants on one request stream, report, figures, diagnosis."""
