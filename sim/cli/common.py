"""What the ``servesim`` subcommands share (no typer app here, so that the
command modules and :mod:`sim.cli.main` import it without a cycle)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from sim.errors import ConfigError, Interrupted

#: the workload ``servesim compare`` runs when none is given
DEFAULT_COMPARE_WORKLOAD = "code"


def workload_help(default: str) -> str:
    """The ``--workload`` option's help: the built-in names (``workloads/*.yaml``, read
    without importing the workload package) and the default."""
    from sim.paths import workloads_dir

    names = ", ".join(sorted(p.stem for p in workloads_dir().glob("*.yaml")))
    return f"Built-in workload ({names}) or a workload YAML path (default: '{default}')."


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


class _Stop(BaseException):
    """Raised by the signal handler of :func:`stop_on_signals`: a BaseException, so the
    ``except Exception`` that records a broken sweep point as failed does not catch it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def stop_on_signals(message: Callable[[str], str]) -> Iterator[None]:
    """SIGTERM or Ctrl-C inside the block unwinds it (``finally`` clauses run: a
    sweep writes its tables, a process pool stops its workers) and raises
    :class:`Interrupted` with ``message(signal name)``; ``main`` prints it as one line.
    A second signal during that clean-up acts as it would without this handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)

    def handler(signum, frame) -> None:
        restore()
        raise _Stop(signum)

    for s in old:
        signal.signal(s, handler)
    try:
        yield
    except _Stop as e:
        raise Interrupted(message(signal.Signals(e.signum).name), e.signum) from None
    except KeyboardInterrupt:
        raise Interrupted(message("SIGINT"), signal.SIGINT) from None
    finally:
        restore()
