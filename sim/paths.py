"""Where the repository's data folders are.

servesim is installed editable (``pip install -e .``) from its checkout, so the
built-in hardware profiles and workloads are read from the checkout's
``hardware_profiles/`` and ``workloads/``. ``SERVESIM_HOME`` overrides the root.
"""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    env = os.environ.get("SERVESIM_HOME")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent


def hardware_profiles_dir() -> Path:
    return repo_root() / "hardware_profiles"


def workloads_dir() -> Path:
    return repo_root() / "workloads"


def shared_dir() -> Path:
    """``../shared`` beside the checkout (read-only project data); may not exist."""
    return Path(os.environ.get("SERVESIM_SHARED", repo_root().parent / "shared"))
