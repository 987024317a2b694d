"""Where servesim's data folders are.

The built-in hardware profiles and workloads are edited in the checkout's
top-level ``hardware_profiles/`` and ``workloads/``; a wheel (``pip install .``,
``pipx install``) ships the same files inside the package, as
``sim/data/hardware_profiles/`` and ``sim/data/workloads/`` (``pyproject.toml``,
``force-include``). :func:`hardware_profiles_dir` and :func:`workloads_dir`
return the packaged folder when there is one (found with
:mod:`importlib.resources`), else the checkout's, so a checkout (``pip install
-e .`` or ``PYTHONPATH``) and an installed wheel behave the same.
``SERVESIM_HOME`` overrides the root: its ``hardware_profiles/`` and
``workloads/`` are used.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path


def repo_root() -> Path:
    """The checkout (or ``SERVESIM_HOME``); in an installed wheel, the folder
    holding the ``sim`` package (which has no data folders of its own)."""
    env = os.environ.get("SERVESIM_HOME")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent


def _data_dir(name: str) -> Path:
    if not os.environ.get("SERVESIM_HOME"):
        packaged = files("sim") / "data" / name
        if packaged.is_dir():
            return Path(str(packaged))  # a folder on disk: the package is never imported from a zip
    return repo_root() / name


def hardware_profiles_dir() -> Path:
    return _data_dir("hardware_profiles")


def workloads_dir() -> Path:
    return _data_dir("workloads")


def shared_dir() -> Path:
    """``../shared`` beside the checkout (read-only project data); may not exist."""
    return Path(os.environ.get("SERVESIM_SHARED", repo_root().parent / "shared"))
