"""Exception types. CLI catches :class:`ServesimError` and prints its message
(no traceback as the user interface)."""


class ServesimError(Exception):
    """Base class for errors shown to the user as a one-line message."""


class ConfigError(ServesimError, ValueError):
    """A config value, file or key is invalid. The message names the file,
    the key and the offending value, and lists valid values where there is a
    fixed set."""


class InfeasibleError(ServesimError):
    """The deployment cannot run at all (the weights do not fit, no block
    budget can hold one ``max_model_len`` sequence, ...)."""


class Interrupted(Exception):
    """A long job stopped by SIGTERM or Ctrl-C (SIGINT). The CLI prints its message
    as one line and exits with status 128 + ``signum`` (143, 130), no traceback."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum


def require_file(path, what: str):
    """``path`` as a ``Path`` if it is a readable file; else a ConfigError that
    says whether nothing is there or a folder is (``what`` names the option or key)."""
    from pathlib import Path

    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{what}: {p} is a folder; give a file")
    if p.exists() and not p.is_file():
        raise ConfigError(f"{what}: {p} is not a regular file")
    if not p.is_file():
        raise ConfigError(f"{what}: file not found: {p}")
    return p
