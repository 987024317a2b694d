"""``servesim compare``: glue between the CLI options, the variant runner
(:mod:`sim.compare.variants`) and the report (:mod:`sim.compare.report`)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from sim.config import build_config
from sim.results.metrics import parse_goodput


def _names_workload(config) -> bool:
    """Whether a config file has workload keys (``workload:`` or ``workload.*``)."""
    from sim.config import read_yaml

    return any(str(k) == "workload" or str(k).startswith("workload.") for k in read_yaml(config))


def run_compare(*, config, schedulers, variant_args, variants_file, model, hardware, workload, set_args, seed,
                goodput, out: Path, workers, quiet: bool) -> Path:
    from sim.cli.common import DEFAULT_COMPARE_WORKLOAD, ensure_out_dir
    from sim.compare.variants import run_variants, variants_from_args
    from sim.results.output import json_safe, write_results
    from sim.compare.report import write_compare_report
    from sim.cli.tables import print_compare_table
    from sim.results.warnings import comparison_warnings
    from sim.compare.variant_data import VariantData

    if workers is not None and workers < 1:
        from sim.errors import ConfigError

        raise ConfigError(f"--workers must be >= 1, got {workers}")
    slos = parse_goodput(goodput)
    ensure_out_dir(out)
    has_trace = any(s.startswith("workload.trace=") for s in (set_args or []))
    # (the default workload unless a trace or the config file names one)
    wl = workload if workload is not None else (None if (has_trace or (config and _names_workload(config)))
                                                else DEFAULT_COMPARE_WORKLOAD)
    overrides = {k: v for k, v in {"model": model, "hardware": hardware, "seed": seed}.items() if v is not None}
    base = build_config(config, overrides, set_args, wl)
    vs = variants_from_args(schedulers, variant_args, variants_file, engine=base.engine)

    bar = None
    if not quiet and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(vs), unit="variant", desc="simulating variants", file=sys.stderr)
    try:
        results = run_variants(base, vs, goodput=slos, workers=workers,
                               on_done=(lambda name: bar.update(1)) if bar else None)
    finally:
        if bar:
            bar.close()

    out = Path(out)
    _remove_stale_variants(out, set(results))
    variants = {}
    for name, (summary, result) in results.items():
        write_results(out / name, summary, result)
        from sim.results.output import requests_frame, steps_frame

        variants[name] = VariantData(name, summary, requests_frame(result), steps_frame(result), result.itl)
    first = next(iter(results.values()))[0]
    cfg = first["config"]
    context = {
        "model": cfg["model"], "hardware": cfg["hardware"],
        "workload": first.get("workload_source", ""),
        "command": "servesim " + shlex.join(sys.argv[1:]),
    }
    context = {k: v for k, v in context.items() if v not in (None, "")}
    title = f"Policy comparison: {cfg['model']} on {cfg['hardware']}"
    from sim.compare.winners import launch_choice, ranked_by_wins
    from sim.launch import launch_command, write_launch

    # the variant ranked first (metrics won, then led) that its engine can run as simulated; else the
    # top one, its launch command saying what does not match
    ranked = ranked_by_wins(variants)
    launches = {n: launch_command(results[n][0]["config"], _pools(results[n][0]["config"])) for n, _, _ in ranked}
    winner, note = launch_choice(ranked, {n: lc.problems for n, lc in launches.items()})
    launch = (winner, launches[winner]) if winner is not None else None
    if launch is not None and note:
        launch[1].notes.insert(0, note)
    if launch is not None:
        write_launch(out, launch[1])
    else:
        for f in ("launch.sh", "extra-llm-api-options.yaml"):
            (out / f).unlink(missing_ok=True)
    report = write_compare_report(out, variants, title=title, context=context, launch=launch)
    (out / "variants.json").write_text(json.dumps(json_safe({n: s["config"] for n, (s, _) in results.items()}),
                                                   indent=2) + "\n")
    print_compare_table({n: s for n, (s, _) in results.items()})
    for w in comparison_warnings({n: s for n, (s, _) in results.items()}):
        print(f"warning: {w}", file=sys.stderr)
    if launch is not None:
        print(f"launch command of the winner, {launch[0]} ({launch[1].engine}; {out}/launch.sh):")
        print(launch[1].text().rstrip("\n"))
    print(f"report: {report} (one page with the figures: {report.with_suffix('.html')})")
    if all(not s["completed"] for s, _ in results.values()):  # nothing served in any variant
        from sim.errors import InfeasibleError

        raise InfeasibleError("every request was rejected in every variant (each variant's requests.csv: "
                              "status, reason); the report above compares nothing")
    return report


RUN_FILES = ("summary.json", "requests.csv", "steps.csv")  # what write_results puts in a variant folder


def _remove_stale_variants(out: Path, names: set[str]) -> None:
    """A comparison written into a folder that holds an earlier one: remove the
    earlier variants this one does not have (listed in its ``variants.json``),
    so the folder never mixes two comparisons. Only the files a comparison
    writes are removed; a folder that holds anything else is left, with a note."""
    manifest = out / "variants.json"
    try:
        old = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(old, dict):
        return
    for name in sorted(set(old) - names):
        folder = out / str(name)
        if not folder.is_dir() or folder.resolve().parent != out.resolve():
            continue
        for f in RUN_FILES:
            (folder / f).unlink(missing_ok=True)
        try:
            folder.rmdir()
            print(f"removed {folder}/ (a variant of the comparison previously written here)", file=sys.stderr)
        except OSError:
            print(f"note: {folder}/ is from an earlier comparison and holds other files; left in place",
                  file=sys.stderr)


def _pools(cfg: dict):
    """A disaggregated variant's pools, each its resolved engine config (the
    per-pool launch commands, :func:`sim.launch.launch_command`); None otherwise."""
    if not cfg.get("disaggregation"):
        return None
    from sim.config import SimConfig
    from sim.engine.deployment import build_deployment

    dep = build_deployment(SimConfig.model_validate(cfg))
    return {p: getattr(dep.disagg, p).cfg.model_dump(mode="json") for p in ("prefill", "decode")}
