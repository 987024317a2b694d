"""Held-out accuracy of the fitted cost model on the measured kernel tables.

    python benchmarks/calibration_accuracy.py            # writes reports/calibration/

For H100 and A100 (``../shared/kernels``), every kernel family is fitted with
``calibration.fit`` on 70 % of its shapes and scored on the other 30 % (whole
shapes held out, seeded: (n, k) pairs for GEMMs, (heads, KV heads, head_dim)
for attention, message sizes for all-reduce), per size band; the targets are
checked; the split is repeated with more seeds to show the spread. Transfer:
H100's fitted parameters (the shipped ``h100_sxm`` profile) with A100 datasheet
peaks, scored on A100's held-out shapes, against A100's own fit. Also scored:
the hand-set ``scalar`` form the fitted one replaces (compute 0.65, memory
0.85, launch 5 us on H100; 0.55/0.70/6 us on A100). Writes
``reports/calibration/README.md`` and one fit-vs-measured PNG per table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibration.check_tables import _preset_moe_shapes, _preset_shapes  # noqa: E402
from calibration.datasets import family_rows, holdout_mask  # noqa: E402
from calibration.fit import Device, ape, fit_any, predict  # noqa: E402
from calibration.plots import plot_fit  # noqa: E402
from sim.cost_model import all_reduce_time_s, attention_uniform_time_s, gemm_time_s  # noqa: E402
from sim.cost_model.operators import moe_layer_time_s  # noqa: E402
from sim.hardware.profile import _validate, get_hardware  # noqa: E402
from sim.paths import shared_dir  # noqa: E402

GPUS = ("h100_sxm", "a100_sxm")
TARGETS = {"gemm.bf16": (10.0, 20.0), "context_attention": (15.0, 20.0),
           "generation_attention": (15.0, 20.0),
           # issue 20: fused MoE tables, the formats vLLM serves (balanced routing)
           "moe.bf16": (10.0, 15.0), "moe.fp8": (10.0, 15.0), "moe.fp8_block": (10.0, 15.0),
           "moe.mxfp4": (10.0, 15.0), "mla_module": (10.0, 15.0), "gdn": (10.0, 15.0)}  # (median APE %, MAPE %) on held-out shapes
#: fused-MoE fits use a seeded subsample of this many training rows (the full fit of
#: moe.bf16 takes > 10 minutes on 2 shared cores; a 2,500-row subsample moved its
#: held-out median APE by ~1 point in a trial)
MOE_FIT_ROWS = 2000
SCALAR = {"h100_sxm": (0.65, 0.85, 5e-6, 0.65, 9.5e-6), "a100_sxm": (0.55, 0.70, 6e-6, 0.6, 14.5e-6)}


def kind_of(family: str) -> str:
    return family.split(".")[0] if family.startswith(("gemm", "moe")) else family


def bands(family: str, rows: pd.DataFrame) -> dict[str, np.ndarray]:
    """Size bands (as check_tables) plus the shapes of the built-in models."""
    out = {"all": np.ones(len(rows), dtype=bool)}
    kind = kind_of(family)
    if kind == "gemm":
        m = rows["m"].to_numpy()
        out["small m (<= 128)"], out["large m (> 128)"] = m <= 128, m > 128
        gemms, _ = _preset_shapes()
        out["model shapes"] = np.array([(n, k) in gemms for n, k in zip(rows["n"], rows["k"])])
    elif kind in ("context_attention", "generation_attention"):
        length = rows["isl" if kind == "context_attention" else "step"].to_numpy()
        out["short (<= 1024)"], out["long (> 1024)"] = length <= 1024, length > 1024
        _, attns = _preset_shapes()
        out["model shapes"] = np.array([t in attns for t in zip(
            rows["num_heads"], rows["num_key_value_heads"], rows["head_dim"])])
    elif kind == "moe":
        t = rows["num_tokens"].to_numpy()
        out["tokens <= 128"], out["tokens > 128"] = t <= 128, t > 128
        out["EP > 1"] = rows["moe_ep_size"].to_numpy() > 1
        moe_shapes = _preset_moe_shapes()
        out["model shapes"] = np.array([tuple(x) in moe_shapes for x in rows[
            ["hidden_size", "inter_size", "topk", "num_experts"]].itertuples(index=False, name=None)])
    else:
        b = rows["message_bytes"].to_numpy()
        out["small (<= 1 MiB)"], out["large (> 1 MiB)"] = b <= 1 << 20, b > 1 << 20
        for p in sorted(rows["num_gpus"].unique()):
            out[f"{p} GPUs"] = rows["num_gpus"].to_numpy() == p
    return out


def scalar_predict(gpu: str, family: str, rows: pd.DataFrame) -> np.ndarray | None:
    """The replaced hand-set scalar form's prediction (None for fp8 families on A100);
    for fused MoE (``moe.*``), the model before the ``moe`` section: grouped GEMMs
    of the shipped profile's fitted GEMM family."""
    if kind_of(family) == "moe":
        base = get_hardware(gpu)
        hw = base.model_copy(update={"efficiency": base.efficiency.model_copy(update={"moe": {}})})
        return moe_layer_time_s(hw, rows["num_tokens"].to_numpy(), rows["hidden_size"].to_numpy(),
                                (rows["inter_size"] / rows["moe_tp_size"]).to_numpy(),
                                rows["num_experts"].to_numpy(), rows["topk"].to_numpy(),
                                family.split(".")[1].split("@")[0],
                                rows["moe_ep_size"].to_numpy().astype(float))
    ce, me, launch, are, lat = SCALAR[gpu]
    data = get_hardware(gpu).model_dump()
    data["efficiency"] = {"form": "scalar", "compute_efficiency": ce, "memory_efficiency": me,
                          "launch_overhead_s": launch, "step_overhead_s": 0.0,
                          "all_reduce_efficiency": are}
    data["interconnect"]["latency_s"] = lat
    hw = _validate(data, f"<scalar {gpu}>")
    kind = kind_of(family)
    if kind == "gemm":
        q = family.split(".")[1].split("@")[0]
        return gemm_time_s(hw, rows["m"].to_numpy(), rows["n"].to_numpy(), rows["k"].to_numpy(), q)
    if kind == "all_reduce":
        return all_reduce_time_s(hw, rows["message_bytes"].to_numpy(), rows["num_gpus"].to_numpy())
    ctx = kind == "context_attention"
    return attention_uniform_time_s(hw, rows["batch_size"].to_numpy(),
                                    rows["isl"].to_numpy() if ctx else 1,
                                    0 if ctx else rows["step"].to_numpy(), rows["num_heads"].to_numpy(),
                                    rows["num_key_value_heads"].to_numpy(), rows["head_dim"].to_numpy())


def score(err: np.ndarray, mask: np.ndarray) -> tuple[int, float, float]:
    e = err[mask]
    return (int(mask.sum()), float(np.median(e)) if len(e) else np.nan, float(e.mean()) if len(e) else np.nan)


def evaluate(gpu: str, seeds: list[int], plots: Path) -> tuple[list[dict], dict]:
    """Rows of the report for one GPU, and the seed-0 fits (family -> params)."""
    dev = Device.of(get_hardware(gpu))
    fams = family_rows(shared_dir() / "kernels" / gpu)
    out, fits = [], {}
    for fam, fr in fams.items():
        if fam.startswith("gemm.fp8") and dev.peak_fp8 is None:
            continue
        rows, y = fr.rows, fr.rows["latency_s"].to_numpy()
        bmask = bands(fam, rows)
        scalar = scalar_predict(gpu, fam, rows)
        spread = []
        # spread only where targets apply (and not for MoE: minutes per fit on 2 cores)
        for seed in seeds if fam in TARGETS and not fam.startswith("moe") else seeds[:1]:
            held = holdout_mask(rows, kind_of(fam), 0.3, seed)
            t0 = time.perf_counter()
            train = rows[~held]
            if fam.startswith("moe") and len(train) > MOE_FIT_ROWS:  # seeded subsample: minutes -> seconds
                train = train.sample(MOE_FIT_ROWS, random_state=seed)
            fit = fit_any(fam, train, dev, fp8=fits.get("gemm.fp8"))
            err = ape(predict(fam, fit.params, rows, dev), y)
            spread.append(score(err, held)[1:])
            if seed != seeds[0]:
                continue
            fits[fam] = fit.params
            pred = predict(fam, fit.params, rows, dev)
            for band, m in bmask.items():
                n_h, med_h, mape_h = score(err, held & m)
                if n_h == 0:
                    continue
                _, med_t, mape_t = score(err, ~held & m)
                s_err = ape(scalar, y) if scalar is not None else None
                out.append({"gpu": gpu, "family": fam, "band": band, "n_held": n_h,
                            "median_held": med_h, "mape_held": mape_h, "median_fit": med_t,
                            "mape_fit": mape_t, "fit_s": time.perf_counter() - t0,
                            "scalar_median": np.median(s_err[held & m]) if s_err is not None else np.nan,
                            "scalar_mape": s_err[held & m].mean() if s_err is not None else np.nan})
            n_all, med_all, mape_all = score(err, held)
            plot_fit(plots / f"{gpu}_{fam.replace('.', '_').replace('@', '_')}.png",
                     f"{gpu} {fam}: held-out median APE {med_all:.1f} %, MAPE {mape_all:.1f} % "
                     f"(n={n_all})", y, pred, held)
        for r in out:
            if r["gpu"] == gpu and r["family"] == fam and r["band"] == "all":
                meds, mapes = zip(*spread)
                if len(spread) > 1:
                    r["seed_median_range"] = (min(meds), max(meds))
                    r["seed_mape_range"] = (min(mapes), max(mapes))
        print(f"{gpu} {fam}: done", file=sys.stderr)
    return out, fits


def evaluate_mla(gpu: str, plots: Path) -> tuple[list[dict], dict]:
    """vLLM's whole MLA module tables (``calibration.mla``): the ``mla`` section fitted
    on 70 % of the head counts (TP shardings of DeepSeek-V3), scored on the others;
    the comparison column is the profile without the section (before)."""
    from calibration.mla import (fit_mla, holdout_heads, inputs, predict as mla_predict,  # noqa: PLC0415
                                 read_module_tables, step_model_predict)
    kernels = shared_dir() / "kernels" / gpu
    if not any(kernels.glob("vllm-*_mla_*_module.csv*")):
        return [], {}
    hw = get_hardware(gpu)
    before = hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update={"mla": None})})
    rows = read_module_tables(kernels)
    y = rows["latency_s"].to_numpy()
    t0 = time.perf_counter()
    a = inputs(rows, before)
    held = holdout_heads(rows, 0)
    p = fit_mla(rows[~held], before, {k: v[~held] for k, v in a.items()})
    err = ape(mla_predict(p, a, before), y)
    s_err = ape(step_model_predict(rows, before), y)  # the simulator before the mla section
    dec = rows["decode"].to_numpy(bool)
    masks = {"all": np.ones(len(rows), bool), "decode (generation module)": dec,
             "prefill (context module)": ~dec}
    for k in sorted(rows["kernel_source"].unique()):
        masks[f"kernel {k}"] = (rows["kernel_source"] == k).to_numpy()
    for g in sorted(rows["gemm_type"].unique()):
        masks[f"gemm {g}"] = (rows["gemm_type"] == g).to_numpy()
    out = banded_rows(gpu, "mla_module", masks, err, s_err, held, time.perf_counter() - t0)
    plot_fit(plots / f"{gpu}_mla_module.png", f"{gpu} MLA module: held-out median APE "
             f"{score(err, held)[1]:.1f} %, MAPE {score(err, held)[2]:.1f} %", y, mla_predict(p, a, before), held)
    print(f"{gpu} mla_module: done", file=sys.stderr)
    return out, {"mla": p}


def banded_rows(gpu: str, family: str, masks: dict, err, s_err, held, fit_s: float) -> list[dict]:
    """One report row per band (mask) with held-out rows: the fit's held-out and
    fitted APE scores, and the model before the family (``s_err``) on the held-out rows."""
    out = []
    for band, m in masks.items():
        n_h, med_h, mape_h = score(err, held & m)
        if n_h == 0:
            continue
        _, med_t, mape_t = score(err, ~held & m)
        out.append({"gpu": gpu, "family": family, "band": band, "n_held": n_h, "median_held": med_h,
                    "mape_held": mape_h, "median_fit": med_t, "mape_fit": mape_t, "fit_s": fit_s,
                    "scalar_median": np.median(s_err[held & m]), "scalar_mape": s_err[held & m].mean()})
    return out


def evaluate_gdn(gpu: str, plots: Path) -> tuple[list[dict], dict]:
    """vLLM's Gated DeltaNet table (``calibration.gdn``, conv1d + delta rule summed per
    layer call): the ``gdn`` section fitted on 70 % of the Qwen3.5 models' shapes,
    scored on the others; the comparison column is the profile without it (before)."""
    from calibration.gdn import (fit_gdn, holdout_models, inputs, predict as gdn_predict,  # noqa: PLC0415
                                 read_gdn_layers, step_model_predict)
    paths = sorted((shared_dir() / "kernels" / gpu).glob("vllm-*_gdn.csv*"))
    if not paths:
        return [], {}
    hw = get_hardware(gpu)
    before = hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update={"gdn": None})})
    rows = read_gdn_layers(paths[0])
    y = rows["latency_s"].to_numpy()
    t0 = time.perf_counter()
    a = inputs(rows, before)
    held = holdout_models(rows, 0)
    p = fit_gdn(rows[~held], before, {k: v[~held] for k, v in a.items()})
    err = ape(gdn_predict(p, a, before), y)
    s_err = ape(step_model_predict(rows, before), y)
    dec = rows["decode"].to_numpy(bool)
    masks = {"all": np.ones(len(rows), bool), "decode (one new token)": dec, "prefill": ~dec}
    out = banded_rows(gpu, "gdn", masks, err, s_err, held, time.perf_counter() - t0)
    plot_fit(plots / f"{gpu}_gdn.png", f"{gpu} GDN: held-out median APE {score(err, held)[1]:.1f} %, "
             f"MAPE {score(err, held)[2]:.1f} %", y, gdn_predict(p, a, before), held)
    print(f"{gpu} gdn: done", file=sys.stderr)
    return out, {"gdn": p}


def transfer(plots: Path) -> list[dict]:
    """H100's shipped parameters with A100 datasheet numbers on A100's held-out shapes."""
    h100, a100 = get_hardware("h100_sxm").efficiency, Device.of(get_hardware("a100_sxm"))
    params = {"gemm.bf16": h100.gemm["bf16"], "context_attention": h100.context_attention,
              "generation_attention": h100.generation_attention, "all_reduce": h100.all_reduce}
    fams = family_rows(shared_dir() / "kernels" / "a100_sxm")
    out = []
    for fam, p in params.items():
        rows, y = fams[fam].rows, fams[fam].rows["latency_s"].to_numpy()
        held = holdout_mask(rows, kind_of(fam), 0.3, 0)
        own = fit_any(fam, rows[~held], a100).params
        e_t = ape(predict(fam, p, rows, a100), y)
        e_o = ape(predict(fam, own, rows, a100), y)
        for band, m in bands(fam, rows).items():
            if (held & m).any():
                out.append({"family": fam, "band": band, "n": int((held & m).sum()),
                            "median_transfer": np.median(e_t[held & m]), "mape_transfer": e_t[held & m].mean(),
                            "median_own": np.median(e_o[held & m]), "mape_own": e_o[held & m].mean()})
        plot_fit(plots / f"transfer_h100_to_a100_{fam.replace('.', '_')}.png",
                 f"A100 {fam}, held-out shapes: H100 parameters (green) vs A100's own fit (orange)",
                 y[held], predict(fam, own, rows, a100)[held], np.ones(int(held.sum()), dtype=bool),
                 extra=("H100 parameters, A100 peaks", predict(fam, p, rows, a100)[held]),
                 labels=("", "A100's own fit"))
    return out


#: the block-fp8 GEMM floor and the new MoE / MLA / GDN sections: what the tables show
#: (numbers from this branch's fits of vLLM 0.24's H100 tables; DeepSeek-V3 step times
#: from CostModel on the transferred h200_sxm profile, not fitted to silicon rows)
NOTES = """## Block-fp8 GEMMs: a per-call host floor, not kernel time

vLLM 0.24's `fp8_block` GEMM table measures at least 55-175 us per call even at m = 1 (FlashInfer 55, DeepGemm 77, Cutlass 151 us minimum), 5-30x the per-tensor `fp8` CUTLASS GEMM on the same (m, n, k) (4.6 us minimum). Joined shape by shape with the per-tensor table, the block kernels are `max(F, s x fp8 time)` with s ~ 0.95-1.0 (median APE 3-6 %: FlashInfer 2.8 %, DeepGemm 6.4 %, Cutlass 3.6 %), not `F + s x fp8 time` (median APE 20-49 %): DeepGemm's excess over fp8 falls from 71 us (m <= 256) to 45 us (m 257-2048) to 5 us (m > 2048). A fixed cost that is hidden once the kernel runs longer is host-side (Python dispatch, scale-tensor preparation, JIT-cache lookup) overlapping the device work, which a one-call-at-a-time eager benchmark exposes and a CUDA-graph-replayed decode step does not pay. Modelled so: `GemmParams.host_s` (`fitted.gemm_measured_s` = max(host_s, device time), what `calibration.fit` and `check_tables` compare to the eager tables); the step model uses the device time only. The block family is the per-tensor fp8 family's device formulas with 3 parameters refitted (peak compute and memory efficiency, host_s): host_s 92 us (DeepGemm, the family), 61 us (FlashInfer), 182 us (Cutlass); held-out median / MAPE: DeepGemm 5.7 / 8.1 % (was 8.7 / 11.0 % with 14 parameters), FlashInfer 3.4 / 5.1 %, Cutlass 3.7 / 5.8 %. (The fp8 fit the block fit starts from was fitted on the fp8 table's shapes, which include the block table's held-out (n, k): a shape leak between families, not within.)

DeepSeek-V3 (fp8_block checkpoint) on H200, TP 8, decode at 1,536 cached tokens, step time (no CPU overheads) vs the measured TPOT of `../shared/silicon/moe_agg_dev.csv` (SGLang 0.5.9, TP 8, 1024/1024; not used for fitting):

| batch | before (main) | block-fp8 host floor only | + fused-MoE, MLA sections (this profile) | measured TPOT |
|---:|---:|---:|---:|---:|
| 4 | 41.3 ms | 12.8 ms | 16.2 ms | 10.3 ms |
| 8 | 42.0 ms | 15.4 ms | 18.7 ms | 12.5 ms |
| 16 | 44.0 ms | 19.8 ms | 23.0 ms | 16.6 ms |
| 32 | 47.7 ms | 26.1 ms | 29.2 ms | 23.3 ms |

Before, qkv_proj + o_proj took 15.8 ms of the 42 ms at batch 8 (the floor x 5 fp8_block GEMMs x 61 layers); after, 2.0 ms. The MLA section adds 3.4 ms at batch 8 over the attention-limit model: its fixed terms (2 x 15.8 us launch + 46.5 us per layer) are as the whole-module benchmark measured them; if that benchmark ran eagerly, like the GEMM tables, part of them is host time a graph-replayed decode does not pay (not separable from the module tables: their rows never run long enough to hide a floor). With `quantization=fp8` DeepSeek-V3 goes from 10.7 to 14.1 ms at batch 4 on H200, the MLA section alone: per-tensor fp8 experts keep the grouped-GEMM path (the only per-tensor fp8 fused-MoE kernel in the table is ModelOpt's FlashInfer CUTLASS one, not what vLLM runs for `fp8`; it is scored as `moe.fp8@...`, not installed).

## Fused MoE, MLA, GDN: what the new sections are

- `moe.<format>` (`MoeParams`, `fitted.moe_fitted_s`): one fused-MoE layer per rank as a roofline over the touched local experts' weights and 6 m h I FLOPs (rows padded per expert to vLLM's 16-row block while T <= E, else 64) and the intermediate caches' bytes ((5 I + 2 h) x 2 B per row) of every routed row of the batch where the kernel's caches span it (`whole_batch_rows`: vLLM's Triton fused_moe with an expert_map writes zeros for other ranks' experts' rows and runs silu_and_mul / moe_sum over all T top_k rows; the gpt-oss OAI Triton kernel (MXFP4), whose time falls as 1/EP at large T, only the rank's; chosen from the table by `fit.fit_moe`), + `expert_s` per touched expert + `row_s` per routed row of the batch + `ep_s` where EP > 1 (the EP path's fixed cost: 68 us vs 38-48 us floors for MXFP4) + launch. The tables' `balanced` rows deal the T top_k rows evenly over min(E, T top_k) experts, at least one expert and one row on the measured rank (the time grows with T until T top_k = E and is flat after; at T = 1 and EP 128 a rank reads one whole expert): fitted and scored with that routing (`fitted.moe_touched_rows`, `balanced`); served steps use uniform random routing (or `workload_distribution`), costed on the most loaded EP rank (`sim/cost_model/moe.py`); the power-law rows are scored in `check_tables` with aiconfigurator's power-law routing, see [moe_routing.md](moe_routing.md). Non-gated experts: the table's NVIDIA Nemotron-3 layers (2688 x 1856 / 128 experts top-6; 512 experts top-22) use squared-ReLU experts with no gate (w1 [E, I, h], vLLM `RELU2_NO_MUL`; the collector's model list says so): 2 h I weights and 4 m h I FLOPs per expert, not 3 and 6 (`calibration.tables.NON_GATED_MOE_SHAPES`, `gated` in `fitted.moe_fitted_s`); read as gated their weight-bound rows streamed 4.5-4.6 TB/s, above H100's 3.35 TB/s, and were over-predicted 1.4-1.5x at every sharding. Unaligned w2: where the rank's intermediate size I / TP is no multiple of 16 (2816 x 704 at TP 8-32, 2048 x 768 at TP 32, 2688 x 1856 at TP 8-32: 88, 44, 22, 24, 232, 116, 58) Triton cannot prove 16-byte aligned rows for the w2 GEMM (K = I / TP is its row stride) and loads element-wise: TP 8 is up to 1.9x slower than TP 4 on the same layer; modelled as m_tiled h (`unaligned_w2_out_s` + `unaligned_w2_mac_s` I) added to the layer (3.5 ps per output element + 0.021 ps per multiply-accumulate on H100 bf16), where the model was 1.3-2.2x too fast. Row blocks: vLLM's Triton fused_moe pads each expert's rows to 16 while T <= E, else 64 (its default config); the gpt-oss MXFP4 kernel (vLLM `OAITritonExperts`, OpenAI triton_kernels `matmul_ogs`) sizes the block from the tokens per expert r (next_pow2(2 r) in [16, 64] while r <= 64, else next_pow2(r) in [16, 128]), so at T = 48-512 it pads 4-16 rows where the fused_moe rule padded 64 (`MoeParams.block_m_rule`, set from the table's kernel: `calibration.fit.moe_block_m_rule`); with it moe.mxfp4 went from 10.9 / 12.0 to the numbers above. What still misses (bf16): EP >= 32 is under-predicted 10-30 % at large T (the time grows with the batch faster than the whole-batch caches' bytes at the fitted bandwidth; a separate rate for the other ranks' rows fitted 0.74 of HBM and moved the held-out median by 0.1 point, so it is not in the form), and the top-1/top-2 layers at T > 4096 by ~20 %; the unaligned rows keep a ~15 % scatter from the kernel's block-size configs switching with T (non-monotonic in T).
- `moe_engines.trtllm` (`calibration.engine_moe`): TensorRT-LLM runs its own fused MoE (`moe_torch_flow_cutlass` in `trtllm-1.3.0rc20_moe`; on Hopper gpt-oss its Triton path, `moe_torch_flow`), not vLLM's Triton `fused_moe` that `moe.*` is fitted to: on its balanced rows the vLLM fits are 1.1-1.5x too slow (fp8_block: held-out-shape MAPE / median APE 80.2 / 32.9 %, bf16 58.6 / 28.6 %, mxfp4 28.8 / 27.7 %). The same `MoeParams` form fitted to TensorRT-LLM's table (a seeded 6,000 rows per format, 30 % of the layer shapes held out): fp8_block 20.2 / 15.7 %, bf16 19.6 / 16.9 %, fp8 22.7 / 13.2 %, mxfp4 13.2 / 10.9 %. `CostModel(engine=...)` and `ParallelMoe(engine=...)` take the engine's families over the default (`FittedEfficiency.moe_for`); formats its table lacks (int4_wo) keep vLLM's. What misses: DeepSeek-V3's layer at moe_tp 8 (I / TP = 256) at 1-8 tokens (balanced, EP 1), where TensorRT-LLM's Hopper CUTLASS fp8_block kernel takes 115-205 us and its fit gives 0.37-0.83x of that (vLLM's 0.49-0.79x); on Blackwell TensorRT-LLM runs other kernels again (gpt-oss: TRTLLM-Gen MXFP4 x MXFP8, nvidia.github.io/TensorRT-LLM deployment-guide-for-gpt-oss-on-trtllm), so the B200 / GB200 entries are this H100 fit transferred, as the other `moe` families. The MoE tables were timed as CUDA-graph replays (aiconfigurator `collector/helper.py::benchmark_with_power` captures the call in a graph and replays it; eager only where capture fails), so their fixed terms are device time a graph-replayed decode pays too, unlike the block-fp8 GEMM host floor above.
- `mla` (`MlaParams`, `layer_kinds.mla_layer_s`): fitted to vLLM's whole-module tables (DeepSeek-V3 at 1-128 heads per rank) with the projections kept at the GEMM families; prefill_compute_efficiency sits at its bound 1.0 and prefill_memory_efficiency ~0.17 (the expanded K/V path costs more than its bytes at HBM speed).
- `moe.int4_wo` (Marlin): the table has one layer shape, so nothing is held out; in-sample median / MAPE 11.6 / 15.2 %. Live: `calibrate --device cuda` fits `moe.bf16` from `bench_moe`'s `torch_moe.csv` (the MoE table format, torch grouped GEMM); the live MLA benchmark times the attention kernel alone, not the module format `mla` is fitted to, and is not fitted.
- `gdn` (`GdnParams`, `layer_kinds.gdn_layer_s`): conv1d + gated delta rule per layer; the recurrent state in float32 (Qwen3.5's `mamba_ssm_dtype`), as the table shows: large-batch decode streams the float32 state at 2.9-3.0 TB/s (89 % of HBM; the batch-512 x 64-head row takes 1.44 ms), and rows whose state fits H100's 50 MB L2 (the benchmark re-reads the same state) reach 3.5 TB/s; with a bfloat16 state the large rows would run at 45 % of HBM. Decode runs its own kernels (`causal_conv1d_update` + Triton `fused_recurrent_gated_delta_rule_packed_decode`, 1.9 + 4.4 us floors) and prefill FlashInfer's chunked kernel (2.3 + 11.6 us): separate fixed costs (`decode_launch_s`, `launch_s`); the chunked kernel walks each (sequence, value head)'s chunks in order on one CTA, so a prefill of fewer (sequence, head) pairs than SMs is bound by `cta_token_s` per token of the longest sequence (x waves over the SMs). The table's one-token context rows time the prefill kernels and are fitted so; the simulator serves a one-token query with the decode kernels, as vLLM's GDN backend does (split by query length). What misses: decode rows whose state fits in L2 (up to 1.3x over-predicted; a served step's other layers evict the state, so not modelled) and prefill at 32-96 (sequence, head) pairs (0.8x).
"""


def _fmt(x: float) -> str:
    return "–" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.1f}"


def write_report(path: Path, rows: list[dict], trans: list[dict], fits: dict, seeds: list[int],
                 wall: float) -> None:
    df = pd.DataFrame(rows)
    lines = ["# Calibration accuracy: the fitted cost model on held-out kernel shapes", "",
             "Regenerate (about 10-20 minutes on 2 shared cores; needs `../shared/kernels` and `../shared/models`):", "",
             "    python benchmarks/calibration_accuracy.py", "",
             "Each kernel family is fitted (`calibration.fit`, least squares on log time) on 70 % of its "
             "shapes and scored on the held-out 30 % — whole (n, k) pairs for GEMMs, whole (heads, KV heads, "
             "head_dim) combinations for attention, whole message sizes for all-reduce (seed "
             f"{seeds[0]}; the seed spread column repeats the split with seeds {', '.join(map(str, seeds))}). "
             "APE = |predicted − measured| / measured. Attention rows are the plain ones "
             "(`window_size` 0, KV cache bf16; H100 kernel `vllm_flash_attn_fa3`, A100 `vllm_flash_attn`). "
             "`scalar` is the hand-set form this replaces, on the same held-out rows; for the fused-MoE "
             "(`moe.*`) and MLA module (`mla_module`) rows that column is instead the model *before* their "
             "`fitted_v1` sections (the same for `gdn`; experts as grouped GEMMs of the fitted GEMM family; MLA at the attention "
             "families' limits), i.e. before vs after. MoE: vLLM 0.24's fused-MoE table, balanced routing, "
             "held out by whole model layer shapes (hidden, expert intermediate, top-k, experts) at every TP/EP "
             "sharding; `moe.<format>` is the kernel vLLM serves on Hopper (Triton for bf16 and fp8_block, "
             "FlashInfer CUTLASS for per-tensor fp8 (the only one measured), Marlin for int4, the gpt-oss Triton "
             "kernel for MXFP4), `@kernel` the others. MLA: vLLM's whole-module tables (DeepSeek-V3 at TP 1-128 "
             "as 128/heads), held out by head count (seed 0: 4 and 16 heads). GDN: vLLM's table, conv1d + gated "
             "delta rule summed per layer call, held out by whole Qwen3.5 model (seed 0: 27B and 35B-A3B). Block "
             "fp8 GEMMs: see the section below.", "",
             "Live torch-kernel measurements on an H200 (CUDA-graph timing) and how the transferred `h200_sxm` profile scores on them: [`h200_live/README.md`](h200_live/README.md).", "",
             "## Targets (held-out shapes, all sizes)", "",
             "| GPU | table | held-out rows | median APE % | MAPE % | target (median / MAPE) | met | "
             "seed spread median / MAPE % | scalar form median / MAPE % |",
             "|---|---|---|---|---|---|---|---|---|"]
    for _, r in df[df["band"] == "all"].iterrows():
        tgt = TARGETS.get(r["family"])
        met = "–" if tgt is None else ("yes" if r["median_held"] <= tgt[0] and r["mape_held"] <= tgt[1] else "**no**")
        sm, sp = r.get("seed_median_range"), r.get("seed_mape_range")
        spread = f"{sm[0]:.1f}–{sm[1]:.1f} / {sp[0]:.1f}–{sp[1]:.1f}" if isinstance(sm, tuple) else "–"
        lines.append(f"| {r['gpu']} | {r['family']} | {r['n_held']:,} | {r['median_held']:.1f} | "
                     f"{r['mape_held']:.1f} | {'≤ %g / ≤ %g' % tgt if tgt else 'report'} | {met} | {spread} | "
                     f"{_fmt(r['scalar_median'])} / {_fmt(r['scalar_mape'])} |")
    lines += ["", NOTES, "## Per size band (held-out shapes; fitted rows for comparison)", "",
              "| GPU | table | band | held-out rows | median APE % | MAPE % | fitted rows median / MAPE % |",
              "|---|---|---|---|---|---|---|"]
    for _, r in df.iterrows():
        lines.append(f"| {r['gpu']} | {r['family']} | {r['band']} | {r['n_held']:,} | {r['median_held']:.1f} | "
                     f"{r['mape_held']:.1f} | {_fmt(r['median_fit'])} / {_fmt(r['mape_fit'])} |")
    lines += ["", "## Transfer: H100 parameters with A100 datasheet peaks, on A100's held-out shapes", "",
              "The shipped `h100_sxm` efficiencies, evaluated with A100's peak FLOP/s, HBM bandwidth, SM "
              "count and NVLink bandwidth, against A100's own fit on the same held-out rows. Aim: ≤ 1.5× "
              "the own fit's error.", "",
              "| table | band | rows | transfer median / MAPE % | own fit median / MAPE % | ratio (median) |",
              "|---|---|---|---|---|---|"]
    for r in trans:
        lines.append(f"| {r['family']} | {r['band']} | {r['n']:,} | {r['median_transfer']:.1f} / "
                     f"{r['mape_transfer']:.1f} | {r['median_own']:.1f} / {r['mape_own']:.1f} | "
                     f"{r['median_transfer'] / r['median_own']:.2f} |")
    lines += ["", "Where the aim is missed, the tables disagree in kind, not in scale: A100 ran vLLM 0.14 "
              "kernels (cuBLAS, FlashAttention-2) and H100 vLLM 0.24 kernels (FlashAttention-3); FA2 decode "
              "attention on A100 does not split the KV sequence for MHA shapes (fitted `split_kv_min_group` "
              "2 there, a per-CTA streaming term the H100 fit has no data for); A100's HBM2e reaches a "
              "lower share of its datasheet bandwidth than H100's HBM3 (GEMM memory efficiency ~0.8 vs "
              "~0.85-0.9), which H100's efficiencies cannot know; NCCL latency (5 vs 8.5 us + per-GPU "
              "hops) and bus efficiency differ between NVLink 3 and NVLink 4. Transferred profiles "
              "(h200_sxm, b200_sxm, gb200, l40s, mi300x) carry these errors; calibrate on the GPU "
              "(`calibration/run_on_gpu.sh`) to remove them.", "",
              "## Fitted parameters (H100, seed-0 training split)", "",
              "The shipped profiles (`hardware_profiles/h100_sxm.yaml`, `a100_sxm.yaml`) are fitted on all "
              "rows by `python -m calibration --from-table ../shared/kernels/<gpu> --base-profile <gpu> "
              "--out hardware_profiles/<gpu>.yaml`; the formulas are in `sim/cost_model/fitted.py`.", ""]
    def fmt(v):
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}: {fmt(x)}" for k, x in v.items()) + "}"
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    for fam, p in fits.get("h100_sxm", {}).items():
        lines.append(f"- `{fam}`: " + ", ".join(f"{k} {fmt(v)}" for k, v in p.model_dump().items()))
    lines += ["", "## Plots", "",
              "One PNG per table and GPU (`<gpu>_<family>.png`: fitted rows blue, held-out shapes orange, "
              "log-log, ±20 % band grey) and per transferred table (`transfer_h100_to_a100_<family>.png`).", ""]
    for png in sorted(path.parent.glob("*.png")):
        lines.append(f"![{png.stem}]({png.name})")
    lines += ["", f"_Generated in {wall:.0f} s by `benchmarks/calibration_accuracy.py`._", ""]
    path.write_text("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "calibration")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args()
    if not (shared_dir() / "kernels").is_dir():
        sys.exit(f"{shared_dir() / 'kernels'} absent: the measured tables are needed")
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rows, fits = [], {}
    for gpu in GPUS:
        r, f = evaluate(gpu, args.seeds, args.out)
        rm, fm = evaluate_mla(gpu, args.out)
        rg, fg = evaluate_gdn(gpu, args.out)
        rows += r + rm + rg
        fits[gpu] = {**f, **fm, **fg}
    trans = transfer(args.out)
    write_report(args.out / "README.md", rows, trans, fits, args.seeds, time.perf_counter() - t0)
    print(f"wrote {args.out / 'README.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()
