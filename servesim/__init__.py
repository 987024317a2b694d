"""servesim from Python: simulate LLM serving without a GPU.

A thin layer over the same config and runner as the ``servesim`` command
(``sim.config.build_config``, ``sim.runner.run_simulation``,
``sim.compare.variants.run_variants``): the same keys, the same defaults, the
same results, bit for bit.

>>> import servesim
>>> r = servesim.simulate(model="llama-3.1-8b", hardware="h100_sxm", engine="vllm",
...                       workload={"name": "chat", "request_rate": 4, "num_requests": 200})
>>> r.summary["median_ttft_ms"]                   # summary.json as a dict
>>> r.requests.head()                             # requests.csv as a pandas DataFrame
>>> r.steps["num_batched_tokens"].mean()          # steps.csv as a pandas DataFrame
>>> c = servesim.compare(["static", "continuous", "chunked"], workload="code")
>>> c.table[["variant", "p99_ttft_ms", "output_throughput"]]

Config keys are the README's ("Config keys"), given as keyword arguments
(``max_num_seqs=64``, ``enable_prefix_caching=True``); workload keys go in
``workload`` as a dict (``{"name": "chat", "request_rate": 8}``) or as dotted
keys (``**{"workload.request_rate": 8}``); ``workload`` may also be a built-in
name or a workload YAML path. ``config`` is a YAML config file the keyword
arguments override. A bad key or value raises :class:`ConfigError` naming it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Mapping

from sim import __version__
from sim.errors import ConfigError, InfeasibleError, ServesimError

__all__ = ["simulate", "compare", "Result", "Comparison", "ConfigError", "InfeasibleError", "ServesimError",
           "__version__"]


def _config(config, model, hardware, engine, workload, keys: dict, default_workload: str | None = None,
            api: str = "servesim.simulate()"):
    from sim.config import build_config

    overrides = {"model": model, "hardware": hardware, "engine": engine, **keys}
    wl_name = None
    if isinstance(workload, Mapping):
        for k, v in keys.items():  # one workload key given twice, differently: refused, as the command does
            sub = k.split(".", 1)[1] if k.startswith("workload.") else None
            if sub is not None and sub in workload and workload[sub] != v:
                raise ConfigError(f"{api}: {k}: given twice, {workload[sub]!r} in workload= and {v!r} as a "
                                  "keyword; give it once")
        overrides["workload"] = dict(workload)
    elif workload is not None:
        wl_name = str(workload)
    elif config is None and not any(k == "workload" or k.startswith("workload.") for k in keys):
        wl_name = default_workload
    # errors name the function and the key path (``servesim.simulate(): max_num_seqs: ...``); a config
    # file's or a workload name's error is named as the call's too
    with _named_errors(api):
        return build_config(config, {k: v for k, v in overrides.items() if v is not None}, None, wl_name, api=api)


@dataclass
class Result:
    """One simulation: ``summary`` is ``summary.json`` (a dict: ``vllm bench serve``'s
    keys, servesim's, the resolved ``config``); ``requests`` / ``steps`` are
    ``requests.csv`` / ``steps.csv`` as pandas DataFrames (built on first use)."""

    summary: dict
    run: Any = field(repr=False)  # sim.runner.RunOutput, or the RunResult of a compare variant

    @property
    def _result(self):
        return getattr(self.run, "result", self.run)

    @cached_property
    def requests(self):
        from sim.results.output import requests_frame

        return requests_frame(self._result)

    @cached_property
    def steps(self):
        from sim.results.output import steps_frame

        return steps_frame(self._result)

    @property
    def config(self) -> dict:
        """The resolved config (every key, as ``summary.json``'s ``config``)."""
        return self.summary["config"]

    def save(self, out: str | Path) -> Path:
        """Write ``summary.json``, ``requests.csv``, ``steps.csv`` into ``out`` (as ``servesim run``)."""
        from sim.results.output import write_results

        with _named_os_errors(f"Result.save({str(out)!r})"):
            return write_results(out, self.summary, self._result)

    def save_trace(self, path: str | Path) -> Path:
        """Write the engine steps as a Chrome / Perfetto trace (as ``servesim run --trace``)."""
        from sim.results.trace import write_trace

        with _named_os_errors(f"Result.save_trace({str(path)!r})"):
            return write_trace(path, self._result, self.summary)

    def __repr__(self) -> str:  # (the whole summary is ``summary``: a line here)
        s, c = self.summary, self.summary.get("config", {})
        return (f"Result({c.get('model')} on {c.get('hardware')}, {s.get('completed')} completed, "
                f"{s.get('num_rejected', 0)} rejected, mean TTFT {s.get('mean_ttft_ms', float('nan')):.1f} ms, "
                f"mean TPOT {s.get('mean_tpot_ms', float('nan')):.2f} ms)")


def simulate(model: str | None = None, hardware: str | None = None, engine: str | None = None,
             workload: str | Mapping[str, Any] | None = None, *, config: str | Path | None = None,
             goodput: Mapping[str, float] | str | list[str] | None = None, **keys: Any) -> Result:
    """Simulate one deployment on one workload (as ``servesim run``).

    ``goodput``: SLOs in ms, ``{"ttft": 500, "tpot": 50}``, ``"ttft:500 tpot:50"`` or
    ``["ttft:500", "tpot:50"]``.
    Raises :class:`ConfigError` / :class:`InfeasibleError` before simulating when the
    config is bad or cannot run (e.g. the model does not fit)."""
    from sim.runner import run_simulation

    cfg = _config(config, model, hardware, engine, workload, keys)
    slos = _goodput(goodput, "servesim.simulate()")
    with _named_errors("servesim.simulate()"):  # (the deployment's: the model does not fit, ...)
        run = run_simulation(cfg, goodput=slos)
    return Result(run.summary, run)


@dataclass
class Comparison:
    """Several variants on the identical request stream: ``results`` by variant
    name (each a :class:`Result`), ``table`` (``comparison.csv`` as a DataFrame)."""

    results: dict[str, Result]

    @cached_property
    def table(self):
        from sim.compare.report import comparison_frame

        return comparison_frame(self._variant_data())

    def _variant_data(self):
        from sim.compare.variant_data import VariantData

        return {n: VariantData(n, r.summary, r.requests, r.steps, r._result.itl) for n, r in self.results.items()}

    def report(self, out: str | Path, title: str | None = None) -> Path:
        """Write ``comparison.csv``, the figures, ``report.md`` and ``report.html``
        into ``out`` (as ``servesim compare``); returns the path of ``report.md``."""
        from sim.compare.report import write_compare_report

        if not self.results:
            raise ConfigError("Comparison.report(): the comparison holds no variant")
        first = next(iter(self.results.values())).config
        with _named_os_errors(f"Comparison.report({str(out)!r})"):
            return write_compare_report(out, self._variant_data(),
                                        title=title or f"Policy comparison: {first['model']} on {first['hardware']}")

    def __getitem__(self, name: str) -> Result:
        try:
            return self.results[name]
        except KeyError:
            raise KeyError(f"no variant {name!r}; the variants: {', '.join(map(repr, self.results))}") from None


def compare(variants: Iterable[str] | Mapping[str, Mapping[str, Any]] | None = None, *,
            model: str | None = None, hardware: str | None = None, engine: str | None = None,
            workload: str | Mapping[str, Any] | None = None, config: str | Path | None = None,
            goodput: Mapping[str, float] | str | list[str] | None = None, workers: int | None = 1,
            **keys: Any) -> Comparison:
    """Run variants of one base config on the identical request stream (as
    ``servesim compare``). ``variants``: batching modes (``["static", "chunked"]``)
    or ``{name: {key: value, ...}}``; default static, continuous and chunked (with an
    ``engine``: that engine's chunked prefill on and off).
    The base config takes the keyword arguments of :func:`simulate`; without a
    workload, the built-in ``code`` (as the command). ``workers`` > 1 runs the
    variants in processes."""
    from sim.cli.common import DEFAULT_COMPARE_WORKLOAD
    from sim.compare.variants import run_variants, variants_from_args, variants_from_mapping

    base = _config(config, model, hardware, engine, workload, keys, default_workload=DEFAULT_COMPARE_WORKLOAD,
                   api="servesim.compare()")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise ConfigError(f"servesim.compare(): workers: must be a whole number >= 1, got {workers!r}")
    if variants is None:
        vs = variants_from_args(None, None, None, engine=base.engine)
    elif isinstance(variants, Mapping):
        if not variants:
            raise ConfigError("servesim.compare(variants={}): no variant given; name at least one "
                              "(e.g. {'small': {'max_num_seqs': 64}}) or leave variants out for the defaults")
        vs = variants_from_mapping(variants, "servesim.compare(variants=...)")
    elif isinstance(variants, str):
        vs = variants_from_args(variants, None, None, schedulers_source="servesim.compare(variants=...)")
    else:
        names = list(variants)
        if not names:
            raise ConfigError("servesim.compare(variants=[]): no variant given; name batching modes "
                              "(e.g. ['chunked', 'mixed']) or leave variants out for the defaults")
        try:
            vs = variants_from_args(",".join(names), None, None, schedulers_source="servesim.compare(variants=...)")
        except ConfigError as e:  # (e.g. a name twice: the error names the argument, as the others do)
            if str(e).startswith("servesim."):
                raise
            raise ConfigError(f"servesim.compare(variants=...): {e}") from None
    slos = _goodput(goodput, "servesim.compare()")
    with _named_errors("servesim.compare()"):
        runs = run_variants(base, vs, goodput=slos, workers=workers)
    return Comparison({name: Result(summary, result) for name, (summary, result) in runs.items()})


@contextmanager
def _named_errors(api: str):
    """A :class:`ConfigError` or :class:`InfeasibleError` raised inside, named
    as the call's (``servesim.simulate(): ...``), as the config's errors are."""
    try:
        yield
    except (ConfigError, InfeasibleError) as e:
        if str(e).startswith("servesim."):  # (named already: servesim.compare(variants=...): ...)
            raise
        raise type(e)(f"{api}: {e}") from None


def _goodput(goodput, api: str) -> dict[str, float] | None:
    """The SLOs of ``goodput`` (``{"ttft": 500}`` or ``"ttft:500"``); errors name
    ``api``'s goodput argument, not the command's ``--goodput``."""
    from sim.results.metrics import parse_goodput

    listed = isinstance(goodput, (list, tuple)) and all(isinstance(g, str) for g in goodput)
    if not (goodput is None or isinstance(goodput, (str, Mapping)) or listed):
        raise ConfigError(f"{api}: goodput: expected {{metric: ms}} (e.g. {{'ttft': 500}}), a string "
                          f"'ttft:500 tpot:50' or a list of such strings, got {goodput!r}")
    try:
        if goodput is None or isinstance(goodput, str):
            return parse_goodput([goodput] if goodput else None)
        if listed:
            return parse_goodput(list(goodput))  # (as the command's --goodput, repeated)
        return parse_goodput([" ".join(f"{k}:{v}" for k, v in goodput.items())])
    except ConfigError as e:
        raise ConfigError(f"{api}: goodput: " + str(e).removeprefix("--goodput ")) from None


class _named_os_errors:
    """An OSError writing results (an existing file where a folder belongs, an
    unwritable place) as a ConfigError naming the call and the path."""

    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if isinstance(exc, OSError):
            path = f": {exc.filename}" if getattr(exc, "filename", None) else ""
            raise ConfigError(f"{self.where}: {exc.strerror or exc}{path}") from None
        return False
