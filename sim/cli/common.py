"""What the ``servesim`` subcommands share (no typer app here, so that the
command modules and :mod:`sim.cli.main` import it without a cycle)."""

from __future__ import annotations

import os
from pathlib import Path

from sim.errors import ConfigError

#: the workload ``servesim compare`` runs when none is given
DEFAULT_COMPARE_WORKLOAD = "code"


def ensure_out_dir(out: Path, option: str = "--out") -> Path:
    """Create the output folder before any simulation runs, so a bad ``--out``
    (empty, an existing file, an unwritable place) fails at once, naming the option."""
    if not str(out).strip() or str(out) == ".":
        raise ConfigError(f"{option} {str(out)!r}: give a folder of its own for the results (the current "
                          f"folder would be written into), e.g. {option} runs/mine")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"{option} {out}: a file of that name exists; give a folder") from None
    except OSError as e:
        raise ConfigError(f"{option} {out}: cannot create the folder ({e.strerror or e})") from None
    if not os.access(out, os.W_OK):
        raise ConfigError(f"{option} {out}: the folder is not writable")
    return out
