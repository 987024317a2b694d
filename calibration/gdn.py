"""Fit and score Gated DeltaNet layers against the GDN kernel tables.

A ``*_gdn`` table times the causal conv1d and the gated-delta-rule kernels of
one layer separately (``kernel_source``), per ``phase`` (context: ``batch_size``
sequences of ``seq_len`` new tokens; generation: one new token each), for
Qwen3.5 shapes (``num_k_heads``, ``num_v_heads`` per rank, head dims 128, conv
width 4). A row here is one such layer call: both kernels summed. The cost
model's prediction is :class:`~sim.cost_model.layer_kinds.GatedDeltaNet`'s
``step_s`` for one layer of a model with those heads (Qwen3.5-397B-A17B's
config from ``../shared/models`` with the heads replaced). The fit
(:func:`fit_gdn`) fits the ``fitted_v1`` ``gdn`` section with the same terms
(``layer_kinds.gdn_layer_s``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from calibration.fit import fit_log_params
from calibration.tables import read_csv_table
from sim.cost_model.layer_kinds import GatedDeltaNet, gdn_layer_s
from sim.errors import ConfigError
from sim.hardware.efficiency import GdnParams
from sim.hardware.profile import HardwareProfile
from sim.model_spec import get_model
from sim.paths import shared_dir

GDN_MODEL = "Qwen--Qwen3.5-397B-A17B_config.json"
HEAD_DIM, CONV = 128, 4
KEYS = ["phase", "batch_size", "seq_len", "d_model", "num_k_heads", "num_v_heads", "model_name"]
PARAMS = ("decode_compute_efficiency", "decode_memory_efficiency", "prefill_compute_efficiency",
          "prefill_memory_efficiency", "launch_s", "seq_s", "decode_launch_s", "cta_token_s")
_BOUNDS = {"launch_s": (1e-8, 1e-3), "seq_s": (1e-12, 1e-4), "decode_launch_s": (1e-8, 1e-3),
           "cta_token_s": (1e-12, 1e-5)}


def read_gdn_layers(path: str | Path) -> pd.DataFrame:
    """One row per layer call: the table's kernels summed (calls missing a kernel dropped)."""
    df = read_csv_table(path)
    missing = [c for c in KEYS + ["kernel_source", "latency"] if c not in df.columns]
    if missing:
        raise ConfigError(f"{path}: missing column(s) {', '.join(missing)}")
    g = df.groupby(KEYS, as_index=False).agg(latency=("latency", "sum"), kernels=("kernel_source", "nunique"))
    g = g[g["kernels"] == 2].reset_index(drop=True)
    g["latency_s"] = g["latency"] * 1e-3
    # the kernels timed: a context row of one token ran the prefill kernels
    # (causal_conv1d_fn + chunked delta rule, an 11.6 us floor on H100) ...
    g["decode"] = g["phase"] == "generation"
    # ... but vLLM serves a one-token query with the decode kernels (its GDN backend
    # splits decodes from prefills by query length alone, ``split_decodes_and_prefills``
    # in vllm/v1/attention/backends/gdn_attn.py), and so does the step model
    g["served_decode"] = g["decode"] | (g["seq_len"] == 1)
    return g


def _base():
    return get_model(str(shared_dir() / "models" / GDN_MODEL))


def layer_models(rows: pd.DataFrame):
    """(num_k_heads, num_v_heads) -> the model spec with those GDN heads."""
    base = _base()
    return {(k, v): replace(base, linear_num_key_heads=int(k), linear_num_value_heads=int(v),
                            linear_key_head_dim=HEAD_DIM, linear_value_head_dim=HEAD_DIM,
                            linear_conv_kernel_dim=CONV)
            for k, v in rows[["num_k_heads", "num_v_heads"]].drop_duplicates().itertuples(index=False)}


def inputs(rows: pd.DataFrame, hw: HardwareProfile) -> dict[str, np.ndarray]:
    """Per row: FLOPs, bytes and sequences of one layer (GatedDeltaNet's terms)."""
    flops, nbytes = np.zeros(len(rows)), np.zeros(len(rows))
    for (k, v), m in layer_models(rows).items():
        g = GatedDeltaNet(m, hw, 1, 1)
        sel = ((rows["num_k_heads"] == k) & (rows["num_v_heads"] == v)).to_numpy()
        b = rows["batch_size"].to_numpy(float)[sel]
        n = rows["seq_len"].to_numpy(float)[sel]
        dec = rows["decode"].to_numpy(bool)[sel]
        flops[sel] = np.where(dec, b * g.flops_dec, b * n * g.flops_pre)
        nbytes[sel] = np.where(dec, b * (2.0 * g.state + g.act_per_tok), b * 2.0 * g.state + b * n * g.act_per_tok)
    return {"flops": flops, "nbytes": nbytes, "seqs": rows["batch_size"].to_numpy(float),
            "decode": rows["decode"].to_numpy(bool), "tokens": rows["seq_len"].to_numpy(float),
            "v_heads": rows["num_v_heads"].to_numpy(float)}


def step_model_predict(rows: pd.DataFrame, hw: HardwareProfile) -> np.ndarray:
    """Each row as the simulator times it: ``GatedDeltaNet.step_s`` of one layer."""
    out = np.zeros(len(rows))
    for (k, v), m in layer_models(rows).items():
        g = GatedDeltaNet(m, hw, 1, 1)
        for i, r in enumerate(rows.itertuples(index=False)):
            if r.num_k_heads == k and r.num_v_heads == v:
                b = int(r.batch_size)
                new = 1 if r.served_decode else int(r.seq_len)
                out[i] = g.step_s(np.full(b, new), np.zeros(b, dtype=int))
    return out


def predict(p: GdnParams, a: dict, hw: HardwareProfile) -> np.ndarray:
    return gdn_layer_s(p, hw, a["flops"], a["nbytes"], a["seqs"], a["decode"], a["tokens"], a["v_heads"])


def fit_gdn(rows: pd.DataFrame, hw: HardwareProfile, a: dict | None = None) -> GdnParams:
    """Least squares on log time (soft-L1 after a plain pass, as ``calibration.fit``)."""
    a = a if a is not None else inputs(rows, hw)
    # efficiencies up to 1.5 (the profile's bound): vLLM's decode kernel moves fewer
    # state bytes than the fp32 state ModelSpec counts (see reports/calibration/README.md)
    return fit_log_params(GdnParams, PARAMS, lambda p: predict(p, a, hw), rows["latency_s"].to_numpy(float),
                          [0.3, 0.6, 0.3, 0.6, 3e-6, 1e-8, 3e-6, 1e-8], [_BOUNDS.get(n, (0.005, 1.5)) for n in PARAMS])


def holdout_models(rows: pd.DataFrame, seed: int = 0, frac: float = 0.3) -> np.ndarray:
    """True for rows of a seeded ``frac`` of the models (whole shapes held out)."""
    names = np.sort(rows["model_name"].unique())
    n_out = min(max(1, int(round(frac * len(names)))), len(names) - 1)
    held = set(np.random.default_rng(seed).permutation(names)[:n_out].tolist())
    return rows["model_name"].isin(held).to_numpy()
