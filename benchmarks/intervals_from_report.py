"""Prediction intervals and their coverage from a written validation report, without simulating.

    python benchmarks/intervals_from_report.py                 # print coverage and bounds
    python benchmarks/intervals_from_report.py --write         # also rewrite sim/data/prediction_intervals.yaml

``benchmarks/validate_silicon.py`` writes every row's held-out predictions
(``predictions.csv``: columns ``<scheme>_ttft_ms`` / ``_tpot_ms``) and each
fold's per-engine fits (``fitted_params.json``: ``source`` "fitted" or a pooled
fallback). That is all ``sim.validate.crossval.conformal_intervals`` reads,
so the intervals and their leave-one-group-out coverage can be recomputed here
from a report in seconds after a change to the interval method (not after a
change to the simulator: that needs ``validate_silicon.py``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SCHEMES = ("model", "system", "campaign")


def load_report(report: Path) -> tuple[list[dict], dict, list[str]]:
    """(rows, cross_validate-shaped result, schemes) from ``predictions.csv`` and ``fitted_params.json``."""
    from sim.validate.crossval import folds

    rows = list(csv.DictReader((report / "predictions.csv").open()))
    if not rows:
        raise SystemExit(f"{report / 'predictions.csv'}: no rows")
    schemes = [s for s in SCHEMES if f"{s}_ttft_ms" in rows[0]]
    if not schemes:
        raise SystemExit(f"{report / 'predictions.csv'}: no held-out columns ({', '.join(SCHEMES)}_ttft_ms)")
    for r in rows:
        r["campaign"] = r.get("campaign") or None  # an empty cell: the engine and version (crossval.campaign_of)
    params = {(f["scheme"], f["group"]): f["params"]
              for f in json.loads((report / "fitted_params.json").read_text())["folds"]}
    held = {s: [{"status": "ok", "pred_ttft_ms": float(r[f"{s}_ttft_ms"]), "pred_tpot_ms": float(r[f"{s}_tpot_ms"])}
                if r.get("status") == "ok" and r[f"{s}_ttft_ms"] and r[f"{s}_tpot_ms"] else {"status": "error"}
                for r in rows] for s in schemes}
    fl = [{"scheme": s, "group": g, "rows": idx, "params": params.get((s, g), {})}
          for s in schemes for g, idx in folds(rows, s).items()]
    return rows, {"held_out": held, "folds": fl}, schemes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", default=str(ROOT / "reports" / "validation"), help="a validate_silicon.py --out")
    ap.add_argument("--write", action="store_true", help="rewrite sim/data/prediction_intervals.yaml")
    args = ap.parse_args()
    from validate_silicon import write_intervals

    rows, res, schemes = load_report(Path(args.report))
    iv = write_intervals(rows, res, schemes, write=args.write)
    for eng, ms in iv["engines"].items():
        print(eng, "; ".join(f"{m.upper()} x{math.exp(q['lo']):.2f} .. x{math.exp(q['hi']):.2f} "
                             f"({q['n']} residuals, {q.get('groups', '?')} groups)" for m, q in ms.items()))
    cov = lambda c: ", ".join(f"{m.upper()} {100 * v['share']:.1f} % of {v['n']}"  # noqa: E731
                              for m, v in c.items() if v["share"] is not None)
    print("coverage from the rows outside each group:", cov(iv["coverage_other_groups"]))
    for s, c in iv["coverage_by_scheme"].items():
        print(f"  leave one {s} out: {cov(c)}")


if __name__ == "__main__":
    main()
