"""Fit the built-in workloads' parameters to the real traces in ../shared/traces.

    python workloads/fit_builtin.py            # prints the numbers quoted in workloads/*.yaml

Lengths: a lognormal clipped to the data's [min, max]. (μ, σ) minimise the squared
relative errors of the clipped model's mean, median and p90 against the data's, plus
((model mass at max − data share ≥ 0.99·max)/0.05)² so clipping does not pile
requests on the cap (analytic, no sampling). Mean first because it sets the load;
the low tail (short requests, cheap) is not fitted. The YAML's ``mean`` is the
unclipped distribution's mean exp(μ + σ²/2).
Arrivals (Azure code): rate = (rows − 1)/span; Gamma burstiness = 1/CV² of the gaps.
Conversations (Mooncake): sessions are chains of requests whose hash_ids extend an
earlier request's beyond the shared block 0 (see fit_conversation).
Needs numpy, scipy, pandas; reads only ../shared/traces.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TRACES = Path(ROOT.parent / "shared" / "traces")
AZURE = TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
MOONCAKE = TRACES / "mooncake_fast25" / "conversation_trace.jsonl"
SHAREGPT = TRACES / "etalon" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
ARXIV = TRACES / "vidur" / "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"


def clipped_stats(mu: float, sigma: float, lo: float, hi: float) -> dict[str, float]:
    """Mean and p10/p50/p90/p99 of clip(LogNormal(mu, sigma), lo, hi)."""
    from scipy.stats import norm

    a, b = math.log(lo), math.log(hi)
    mid = math.exp(mu + sigma ** 2 / 2) * (norm.cdf((b - mu - sigma ** 2) / sigma)
                                            - norm.cdf((a - mu - sigma ** 2) / sigma))
    mean = lo * norm.cdf((a - mu) / sigma) + hi * norm.sf((b - mu) / sigma) + mid
    q = {f"p{int(p * 100)}": float(np.clip(math.exp(mu + sigma * norm.ppf(p)), lo, hi))
         for p in (0.10, 0.50, 0.90, 0.99)}
    return {"mean": mean, **q}


def data_stats(x: np.ndarray) -> dict[str, float]:
    return {"mean": float(x.mean()), **{f"p{p}": float(np.percentile(x, p)) for p in (10, 50, 90, 99)}}


def fit_lognormal(x: np.ndarray, label: str) -> dict[str, float]:
    """Clipped-lognormal fit, see the module docstring; prints data vs model."""
    from scipy.optimize import minimize
    from scipy.stats import norm

    x = np.asarray(x, dtype=np.float64)
    lo, hi = float(x.min()), float(x.max())
    d = data_stats(x)
    at_max = float((x >= 0.99 * hi).mean())  # the data's share at the cap

    def loss(p: np.ndarray) -> float:
        mu, s = float(p[0]), abs(float(p[1])) + 1e-3
        m = clipped_stats(mu, s, lo, hi)
        rel = sum(((m[k] - d[k]) / d[k]) ** 2 for k in ("mean", "p50", "p90"))
        return rel + ((norm.sf((math.log(hi) - mu) / s) - at_max) / 0.05) ** 2

    res = minimize(loss, [math.log(d["p50"]), 0.8], method="Nelder-Mead", options={"xatol": 1e-6, "fatol": 1e-10})
    mu, sigma = float(res.x[0]), abs(float(res.x[1])) + 1e-3
    m = clipped_stats(mu, sigma, lo, hi)
    mean = math.exp(mu + sigma ** 2 / 2)
    print(f"  {label}: n={len(x)} data mean {d['mean']:.1f} p10 {d['p10']:.0f} median {d['p50']:.0f} "
          f"p90 {d['p90']:.0f} p99 {d['p99']:.0f} min {lo:.0f} max {hi:.0f}, {100 * at_max:.1f} % at the max")
    print(f"  {label}: fit  {{dist: lognormal, mean: {mean:.0f}, sigma: {sigma:.3f}, min: {lo:.0f}, max: {hi:.0f}}}"
          f" -> clipped mean {m['mean']:.1f} p10 {m['p10']:.0f} median {m['p50']:.0f} p90 {m['p90']:.0f} "
          f"p99 {m['p99']:.0f}, {100 * norm.sf((math.log(hi) - mu) / sigma):.1f} % at the max")
    return {"mean": mean, "sigma": sigma, "min": lo, "max": hi}


def fit_table(path: Path, name: str) -> None:
    import pandas as pd

    df = pd.read_csv(path)
    print(f"{name}: {path.relative_to(TRACES.parent)}")
    fit_lognormal(df["num_prefill_tokens"].to_numpy(), "input")
    fit_lognormal(df["num_decode_tokens"].to_numpy(), "output")


def fit_code() -> None:
    import pandas as pd

    df = pd.read_csv(AZURE)
    t = pd.to_datetime(df["TIMESTAMP"], format="ISO8601")
    s = (t - t.iloc[0]).dt.total_seconds().to_numpy()
    gaps = np.diff(s)
    rate = (len(s) - 1) / s[-1]
    cv = gaps.std() / gaps.mean()
    short = gaps[gaps <= 60.0]
    cv_short = short.std() / short.mean()
    print(f"code: {AZURE.relative_to(TRACES.parent)}")
    print(f"  arrivals: {len(s)} rows over {s[-1]:.1f} s -> rate {rate:.3f} req/s; gap CV {cv:.2f} -> "
          f"burstiness 1/CV^2 = {1 / cv ** 2:.5f}")
    print(f"  (without the {int((gaps > 60).sum())} idle gaps > 60 s: CV {cv_short:.2f} -> "
          f"burstiness {1 / cv_short ** 2:.4f}; busiest second {np.bincount(s.astype(int)).max()} requests)")
    fit_lognormal(df["ContextTokens"].to_numpy(), "input")
    fit_lognormal(df["GeneratedTokens"].to_numpy(), "output")


def fit_conversation() -> None:
    rows = [json.loads(line) for line in MOONCAKE.read_text().splitlines() if line.strip()]
    ts = np.array([r["timestamp"] for r in rows]) / 1000.0
    inp = np.array([r["input_length"] for r in rows])
    out = np.array([r["output_length"] for r in rows])
    print(f"conversation: {MOONCAKE.relative_to(TRACES.parent)}")
    first_ids = {r["hash_ids"][0] for r in rows}
    print(f"  block 0 is the first block of {sum(r['hash_ids'][0] == 0 for r in rows)} / {len(rows)} requests "
          f"(distinct first blocks: {len(first_ids)}) -> one shared 512-token system prompt")
    # Parent = the request that first held the deepest block this request shares
    # (beyond block 0): its earlier turn. Sessions = chains of parents.
    owner: dict[int, int] = {}
    parent = np.full(len(rows), -1)
    for j, r in enumerate(rows):
        h = r["hash_ids"]
        k = 0
        while k < len(h) and h[k] in owner:
            k += 1
        if k >= 2:
            parent[j] = owner[h[k - 1]]
        for x in h:
            owner.setdefault(x, j)
    root = np.arange(len(rows))
    for j in range(len(rows)):
        if parent[j] >= 0:
            root[j] = root[parent[j]]
    sizes = np.bincount(root)
    sizes = sizes[sizes > 0]
    multi = sizes[sizes > 1]
    child = parent >= 0
    gap = ts[child] - ts[parent[child]]
    new = inp[child] - inp[parent[child]] - out[parent[child]]
    print(f"  sessions {len(sizes)}: multi-turn fraction {len(multi) / len(sizes):.3f}; turns of multi-turn "
          f"sessions mean {multi.mean():.2f} median {np.median(multi):.0f} max {multi.max()}")
    print(f"  next-turn send gap (s): median {np.median(gap):.0f} mean {gap.mean():.0f} p10 {np.percentile(gap, 10):.0f} "
          f"p90 {np.percentile(gap, 90):.0f}")
    print(f"  new tokens per later turn (prompt - previous prompt - previous output): median {np.median(new):.0f} "
          f"mean {new.mean():.0f}; {100 * (new <= 0).mean():.1f} % <= 0 (fit on the positive ones)")
    fit_lognormal(inp[~child] - 512, "first-turn input minus the 512-token system prompt")
    fit_lognormal(new[new > 0], "new message of a later turn")
    fit_lognormal(out, "output")
    refs = sum(len(r["hash_ids"]) for r in rows)
    print(f"  trace: mean input {inp.mean():.0f}, infinite-cache block hit rate {1 - len(owner) / refs:.3f}, "
          f"rate {(len(rows) - 1) / ts[-1]:.3f} req/s")


def check_conversation_yaml() -> None:
    """Our generator with workloads/conversation.yaml: mean prompt and key hit rate."""
    from sim.workload import WorkloadConfig, generate_requests, load_workload_dict

    cfg = WorkloadConfig.from_dict(load_workload_dict("conversation") | {"num_requests": 12000})
    specs = generate_requests(cfg, seed=0)
    seen: set = set()
    hits = refs = 0
    for p, keys in zip(specs.num_prompt_tokens.tolist(), specs.prefix_keys or []):
        blocks = -(-p // specs.prefix_chunk_tokens)
        k = (keys or ())[:blocks]
        refs += blocks
        hits += sum(1 for x in k if x in seen)
        seen.update(k)
    print(f"  workloads/conversation.yaml (12,000 requests, seed 0): mean input {specs.num_prompt_tokens.mean():.0f}, "
          f"mean output {specs.output_len.mean():.0f}, infinite-cache chunk hit rate {hits / refs:.3f}")


def main() -> None:
    if not TRACES.is_dir():
        sys.exit(f"no traces at {TRACES}")
    fit_table(SHAREGPT, "chat")
    fit_code()
    fit_conversation()
    if (ROOT / "workloads" / "conversation.yaml").is_file():
        check_conversation_yaml()
    fit_table(ARXIV, "summarization")


if __name__ == "__main__":
    main()
