"""``servesim validate``: simulate measured benchmark rows and score the predictions."""
