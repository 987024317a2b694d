"""``servesim models`` / ``servesim hardware``: what each preset and profile
holds, as a table or JSON (values checked by hand against the configs and
datasheets)."""

from __future__ import annotations

import json
import subprocess
import sys

from typer.testing import CliRunner

from sim.cli.main import app


def _json(*args):
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_models_lists_size_attention_experts_and_kv_per_token():
    rows = {r["name"]: r for r in _json("models")}
    llama = rows["llama-3.1-8b"]
    assert llama["kv_bytes_per_token"] == 131_072  # 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B
    assert llama["params_b"] == 8.03 and llama["active_params_b"] == 8.03 and llama["experts"] == "-"
    assert llama["attention"] == "GQA 32/8 heads x 128"
    ds = rows["deepseek-v3"]
    assert ds["kv_bytes_per_token"] == 61 * (512 + 64) * 2 == 70_272  # one MLA latent per token per layer
    assert ds["attention"] == "MLA 128 heads, latent 512+64"
    assert ds["experts"] == "256 top-8 + shared, 3 dense layers" and ds["weights"] == "fp8_block"
    oss = rows["gpt-oss-120b"]
    assert oss["attention"] == "GQA 64/8 heads x 64 (18 full, 18 sliding window 128)"
    assert oss["experts"] == "128 top-4" and oss["weights"] == "mxfp4"


def test_one_model_and_an_unknown_name():
    assert _json("models", "mixtral-8x7b")["experts"] == "8 top-2"
    r = subprocess.run([sys.executable, "-m", "sim", "models", "no-such-model"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("error: model: unknown model 'no-such-model'")
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1


def test_hardware_lists_datasheet_numbers_and_where_efficiencies_come_from():
    rows = {r["name"]: r for r in _json("hardware")}
    h100 = rows["h100_sxm"]
    assert h100["memory_gib"] == 79.22 and h100["hbm_tb_per_s"] == 3.35
    assert (h100["bf16_tflops"], h100["fp8_tflops"], h100["fp4_tflops"]) == (989, 1979, None)
    assert h100["efficiencies"] == "fitted on this GPU"
    assert rows["b300_sxm"]["efficiencies"] == "transferred from b200_sxm"
    assert rows["gb200"]["link_domain_gpus"] == 72 and rows["gb200"]["fp4_tflops"] == 10_000
    assert rows["l40s"]["interconnect"].startswith("PCIe") and rows["l40s"]["link_domain_gpus"] == 8


def test_one_profile_shows_each_families_fit():
    h200 = _json("hardware", "h200_sxm")
    fam = h200["efficiency_families"]
    assert fam["gemm.bf16"].startswith("2026-11-30: tables in ../shared/kernels/h100_sxm (vllm-0.24.0_gemm.csv.gz)")
    assert {"mla", "gdn", "moe.bf16", "all_reduce"} <= set(fam)
    r = CliRunner().invoke(app, ["hardware", "h200_sxm"])
    assert r.exit_code == 0 and "where each kernel family was fitted" in r.output
