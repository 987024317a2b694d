"""The ``servesim`` command (also ``python -m sim``): the top layer; it may import anything."""
