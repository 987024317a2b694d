#!/usr/bin/env bash
# Regenerates reports/disagg-validation/: servesim validate on ../shared/silicon/disagg_dev.csv
# (each row under its campaign's harness) and coverage.md: why each row is or is not
# simulated, per campaign.
#
# Each row runs its harness's own number of requests: 10 per client for both the
# `aic` (db-dump) and the `inferencemax` (nightly) harness (sim/validate/harness.py),
# as the benchmarks did. QUICK=1 runs 2 per client instead (about 5x faster): a biased
# quick look, not the report's numbers -- with 2·C requests the measured window is
# dominated by the cold start of C requests at once (TTFT over-predicted), see README.
# Extra arguments go to `servesim validate` (e.g. --workers 2).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
shared="${SHARED:-$repo/../shared}"
cd "$repo"
quick=()
if [[ "${QUICK:-0}" == "1" ]]; then
    echo "QUICK=1: 2 requests per client instead of the harness's 10 (biased; not the report's numbers)" >&2
    quick=(--requests-per-client 2)
fi
PYTHONPATH="$repo" python3 -m sim validate "$shared/silicon/disagg_dev.csv" --out "$here/run" --quiet \
    ${quick[@]+"${quick[@]}"} "$@"
PYTHONPATH="$repo" python3 - "$here/run/predictions.csv" "$here/coverage.md" <<'PY'
import re, sys, pandas as pd
p = pd.read_csv(sys.argv[1])
p["kind"] = p["campaign"].map(lambda c: "nightly (2026-*)" if str(c).startswith("2026-") else str(c))
def why(r):
    if r["status"] == "ok":
        return "simulated"
    s = re.sub(r"https?://\S+", "", str(r["reason"]))
    s = re.sub(r"matches .*", "matches", s)
    s = re.sub(r"match .*", "match (ambiguous)", s)
    s = re.sub(r"= \d+(\.\d+)?", "> 1", s)
    s = re.sub(r"\(ep \d+\)", "", s)
    return f"{r['status']}: " + s.split(" (the ")[0].split(": /")[0][:140]
p["why"] = p.apply(why, axis=1)
t = p.groupby(["kind", "why"]).size().rename("rows").reset_index()
lines = ["# disagg_dev.csv: which rows are simulated, and why not", "",
         "| rows of | outcome | rows |", "|---|---|---|"]
lines += [f"| {r.kind} | {r.why} | {r.rows} |" for r in t.itertuples()]
tot = p.groupby("kind").apply(lambda g: f"{(g.status == 'ok').sum()} of {len(g)}")
lines += ["", "Simulated: " + "; ".join(f"{k}: {v}" for k, v in tot.items()) +
          f"; all: {(p.status == 'ok').sum()} of {len(p)}.", ""]
open(sys.argv[2], "w").write("\n".join(lines))
PY
echo "report: $here/README.md (coverage: $here/coverage.md, run: $here/run/)"
