"""Which variant of a comparison wins on which metric, and by how much
(``report.md``'s "What wins"): one sentence per metric, then a tally."""

from __future__ import annotations

import numpy as np

from sim.compare.diagnosis import _ms, _ratio  # the report's number formats
from sim.compare.variant_data import VariantData

MAX_REJECTED_TO_RANK = 0.05  # rejected share above which a variant's latencies are not ranked
WIN_METRICS = (
    ("request_throughput", "Request throughput", True, "req/s"),
    ("output_throughput", "Output throughput", True, "tok/s"),
    ("request_goodput", "Goodput", True, "req/s"),
    ("median_ttft_ms", "p50 TTFT", False, "ms"),
    ("p99_ttft_ms", "p99 TTFT", False, "ms"),
    ("p99_itl_ms", "p99 ITL", False, "ms"),
    ("p99_tpot_ms", "p99 TPOT", False, "ms"),
    ("p99_e2el_ms", "p99 E2EL", False, "ms"),
)
TIE = 1.02


def _val(x, unit: str) -> str:
    if unit == "ms":
        return _ms(x)
    return f"{x:,.2f} {unit}" if x < 100 else f"{x:,.0f} {unit}"


def compare_winners(variants: dict[str, VariantData]) -> list[str]:
    """Sentences, one per metric, naming the winner with its value and how many
    times better it is than each other variant; ties within 2 % are said so;
    then an overall tally. Empty for fewer than two variants."""
    return _ranking(variants)[0]


def ranked_by_wins(variants: dict[str, VariantData]) -> list[tuple[str, int, int]]:
    """(variant, metrics won outright by :func:`compare_winners`, metrics led: first or
    within 2 % of the first), most leads first, then most outright wins; equals keep
    the comparison's order. Leads rank first: a variant within 2 % of the best is as
    good as it there, so two near-equal leaders share their metrics rather than
    hand the ranking to a variant that wins fewer ones outright."""
    _, wins, leads = _ranking(variants)
    return [(n, wins[n], leads[n]) for n in _by_leads(wins, leads)]


def _by_leads(wins: dict[str, int], leads: dict[str, int]) -> list[str]:
    """The variants by metrics led, then won outright (equals: the comparison's order)."""
    return sorted(wins, key=lambda n: (-leads[n], -wins[n]))


def launch_choice(ranked: list[tuple[str, int, int]], problems: dict[str, list[str]]
                  ) -> tuple[str | None, str | None]:
    """The variant whose launch command the comparison writes, and why when that is not
    plain: the first of ``ranked`` (:func:`ranked_by_wins`: most metrics led, then won)
    that its engine can run as simulated (no launch ``problems``), else the top one. The
    note names the variants ranked above it that cannot run as simulated, a tie on wins
    that leads broke, or a tie."""
    if not ranked:
        return None, None
    score = {n: (ld, w) for n, w, ld in ranked}  # (leads, outright wins): the ranking's order
    order = [n for n, _, _ in ranked]
    winner = next((n for n in order if not problems.get(n)), order[0])
    more = [n for n in order if score[n] > score[winner]]
    level = [n for n in order if score[n] == score[winner] and n != winner]
    fewer = [n for n in order if score[n][0] == score[winner][0] and score[n][1] < score[winner][1]]
    ld, w = score[winner]
    led = f"each lead {ld} metric(s) (first or within 2 % of the first)"
    if more:
        return winner, (f"{winner} is the variant ranked first (report.md, What wins) that its engine can run as "
                        f"simulated; {', '.join(more)} ranked higher but {problems[more[0]][0]}")
    if level:
        first = level[0]
        why = (f"{first} ranks as high but {problems[first][0]}" if order.index(first) < order.index(winner)
               and problems.get(first) else f"{winner} comes first in the comparison's order")
        return winner, (f"a tie: {winner} and {', '.join(level)} {led} and win as many outright (report.md, "
                        f"What wins); {why}")
    if fewer:
        return winner, (f"{winner} and {', '.join(fewer)} {led}; {winner} wins more of them outright ({w}, "
                        "against " + ", ".join(f"{n} {score[n][1]}" for n in fewer) + "; report.md, What wins)")
    return winner, None


def _ranking(variants: dict[str, VariantData]) -> tuple[list[str], dict[str, int], dict[str, int]]:
    """(the report's sentences, metrics won outright, metrics led) per variant."""
    if len(variants) < 2:
        return [], {n: 0 for n in variants}, {n: 0 for n in variants}
    lines, wins, leads = [], {n: 0 for n in variants}, {n: 0 for n in variants}
    # Latencies of a variant that rejected many requests the others served cover only
    # the rest: it is not ranked on them (throughput still shows the loss). Requests
    # every variant rejected (e.g. over max_model_len) leave the comparison paired.
    rejected = {n: _rejected_ids(v) for n, v in variants.items()}
    common = set.intersection(*rejected.values()) if all(r is not None for r in rejected.values()) else set()
    rejecting = {}
    for n, v in variants.items():
        done, rej = v.summary.get("completed") or 0, v.summary.get("num_rejected") or 0
        own = rej - len(common)  # (the requests only some variants rejected)
        if done + rej and own / (done + rej) > MAX_REJECTED_TO_RANK:
            rejecting[n] = (rej, done + rej)
    for key, label, higher, unit in WIN_METRICS:
        vals = {}
        for n, v in variants.items():
            if not higher and n in rejecting:
                continue
            x = v.summary.get(key)
            if isinstance(x, (int, float)) and np.isfinite(x):
                vals[n] = float(x)
        if len(vals) < 2:
            continue
        ranked = sorted(vals, key=lambda n: -vals[n] if higher else vals[n])
        best = ranked[0]
        ties = [n for n in ranked[1:] if _better_ratio(vals[best], vals[n], higher) < TIE]
        others = []
        for n in ranked[1:]:
            r = _better_ratio(vals[best], vals[n], higher)
            how = "about the same as" if r < TIE else f"{_ratio(r)}× {'higher than' if higher else 'lower than'}"
            others.append(f"{how} {n} ({_val(vals[n], unit)})")
        head = f"{label}: {best} wins with {_val(vals[best], unit)}" if not ties else \
            f"{label}: {best} leads with {_val(vals[best], unit)}"
        lines.append(f"{head}, {', '.join(others)}.")
        if not ties:
            wins[best] += 1
        for n in (best, *ties):
            leads[n] += 1
    num_metrics = len(lines)
    if common:
        total = max((v.summary.get("completed") or 0) + (v.summary.get("num_rejected") or 0)
                    for v in variants.values())
        lines.append(f"Every variant rejected the same {len(common):,} of {total:,} requests (reasons in each "
                     "variant's requests.csv): the latencies compare the requests they all served.")
    for n, (rej, total) in rejecting.items():
        rest = "so its latencies cover only the rest" if rej < total else "so it has no latencies"
        others = f" ({rej - len(common):,} that another variant served)" if common else ""
        lines.append(f"{n} is not ranked on latency: it rejected {rej:,} of {total:,} requests{others}, {rest}.")
    tally = [n for n in _by_leads(wins, leads) if leads[n]]
    if tally:  # (leads: first or within 2 % of the first, as ranked_by_wins ranks them)
        lines.append("Overall, metrics led (first, or within 2 % of the first): " + ", ".join(
            f"{n} {leads[n]} of {num_metrics}" + (f" ({wins[n]} outright)" if wins[n] else "") for n in tally) + ".")
    per_gpu = _per_gpu_line(variants)
    if per_gpu:
        lines.append(per_gpu)
    return lines, wins, leads


def _rejected_ids(v: VariantData) -> set | None:
    """The measured requests ``v`` rejected (their ids), or None where its table does not say."""
    df = v.measured_requests()
    if "status" not in df.columns or "request_id" not in df.columns:
        return None
    return set(df.loc[df["status"] == "rejected", "request_id"].tolist())


def _per_gpu_line(variants: dict[str, VariantData]) -> str | None:
    """Where the variants run on different GPU counts (``num_gpus``), a win is not
    like for like: the output throughput per GPU, best first (not counted as a win)."""
    gpus = {n: v.summary.get("num_gpus") for n, v in variants.items()}
    tput = {n: v.summary.get("output_throughput") for n, v in variants.items()}
    ok = {n: tput[n] / g for n, g in gpus.items()
          if isinstance(g, (int, float)) and g > 0 and isinstance(tput[n], (int, float)) and np.isfinite(tput[n])}
    if len(ok) < 2 or len({gpus[n] for n in ok}) < 2:
        return None
    ranked = sorted(ok, key=lambda n: -ok[n])
    return ("The variants run on different GPU counts: output throughput per GPU at this load "
            + ", ".join(f"{n} {_val(ok[n], 'tok/s')} ({gpus[n]:g} GPUs)" for n in ranked) + ".")


def _better_ratio(best: float, other: float, higher: bool) -> float:
    """How many times better ``best`` is than ``other`` (≥ 1)."""
    a, b = (best, other) if higher else (other, best)
    if b <= 0:
        return 1.0 if a <= 0 else float("inf")
    return a / b
