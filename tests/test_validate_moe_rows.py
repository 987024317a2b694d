"""validate reads the MoE table's parallelism columns and simulates each row as deployed."""

import pytest

from sim.validate.disagg_rows import NotSimulable
from sim.validate.rows import recorded_parallelism, row_overrides
from sim.validate.run import ValidateOptions

ROW = {"backend": "trtllm", "model_path": "deepseek-ai/DeepSeek-V3", "system": "h200_sxm", "isl": 1024,
       "osl": 1024, "concurrency": 16, "tp_size": 8, "silicon_ttft_ms": 100.0, "silicon_tpot_ms": 20.0,
       "campaign": "db-dump/2026-04-27", "mode": "agg"}


def test_attention_dp_row_is_simulated_as_dp_ranks():
    # TensorRT-LLM attention DP 8: tp_size counts the 8 attention ranks, experts EP 8
    ov = row_overrides({**ROW, "attention_dp_size": 8, "moe_tp_size": 1, "moe_ep_size": 8}, ValidateOptions())
    assert (ov["tensor_parallel_size"], ov["data_parallel_size"], ov["moe_ep_size"], ov["moe_tp_size"]) == (1, 8, 8, 1)


def test_plain_tp_row_keeps_the_keys_it_had():
    ov = row_overrides({**ROW, "attention_dp_size": 1, "moe_tp_size": 8, "moe_ep_size": 1}, ValidateOptions())
    assert ov["tensor_parallel_size"] == 8 and "data_parallel_size" not in ov


def test_vllm_dp_without_ep_is_read_from_the_gpu_count():
    ov = row_overrides({**ROW, "backend": "vllm", "tp_size": 1, "moe_tp_size": 4, "moe_ep_size": 1},
                       ValidateOptions())
    assert (ov["tensor_parallel_size"], ov["data_parallel_size"], ov["moe_tp_size"]) == (1, 4, 4)


def test_tp_across_nodes_runs_over_the_nics_and_is_not_simulable_without_them():
    ov = row_overrides({**ROW, "tp_size": 16, "attention_dp_size": 1, "moe_tp_size": 16, "moe_ep_size": 1},
                       ValidateOptions())
    assert ov["tensor_parallel_size"] == 16  # two 8-GPU H200 nodes, joined by the per-GPU NICs
    with pytest.raises(NotSimulable, match=r"tensor_parallel_size 12: .* 12 is not a whole number of 8-GPU domains"):
        row_overrides({**ROW, "tp_size": 12, "moe_tp_size": 12, "moe_ep_size": 1}, ValidateOptions())
    with pytest.raises(NotSimulable, match=r"the profile has no 'network' section"):
        row_overrides({**ROW, "system": "l40s", "tp_size": 16, "moe_tp_size": 16, "moe_ep_size": 1},
                      ValidateOptions())


def test_summary_scores_per_model_and_per_campaign():
    import pandas as pd

    from sim.validate.report import summarize_predictions, summary_markdown

    df = pd.DataFrame({
        "status": ["ok", "ok", "ok", "not_simulable"], "reason": ["", "", "", "x"], "id": list("abcd"),
        "backend": ["vllm", "vllm", "sglang", "vllm"], "system": ["h200_sxm"] * 4, "tp_size": [8, 8, 8, 8],
        "model_path": ["deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3", "openai/gpt-oss-120b", "x/y"],
        "campaign": ["c1", "c2", "c2", "c1"], "mode": ["agg"] * 4,
        "silicon_ttft_ms": [100.0, 100.0, 100.0, 1.0], "pred_ttft_ms": [110.0, 130.0, 50.0, 1.0],
        "silicon_tpot_ms": [10.0, 10.0, 10.0, 1.0], "pred_tpot_ms": [10.0, 12.0, 10.0, 1.0]})
    s = summarize_predictions(df)
    assert s["by_model"]["DeepSeek-V3"]["n"] == 2 and s["by_model"]["DeepSeek-V3"]["ttft_mape"] == pytest.approx(20.0)
    assert s["by_campaign"]["c2"]["n"] == 2 and s["by_campaign"]["c2"]["ttft_mape"] == pytest.approx(40.0)
    assert s["by_campaign"]["c1"]["tpot_mape"] == pytest.approx(0.0)  # the not-simulated c1 row is not scored
    md = summary_markdown(s)
    assert "| model gpt-oss-120b | 1 | 50.0 |" in md and "| campaign c1 | 1 | 10.0 |" in md


def test_tp_times_ep_campaign_cells_are_read_as_one_node():
    # 2026-04-06 id "..._tp8_ep8_940" is recorded tp_size 64, moe_tp 8, moe_ep 8: TP 8, EP 8 on 8 GPUs
    row = {**ROW, "system": "b200_sxm", "campaign": "2026-04-06", "tp_size": 64, "attention_dp_size": 1,
           "moe_tp_size": 8, "moe_ep_size": 8}
    ov = row_overrides(row, ValidateOptions())
    assert (ov["tensor_parallel_size"], ov["moe_ep_size"], ov["moe_tp_size"]) == (8, 8, 1)
    # tp4_ep4 recorded 16 / 4 / 4 -> TP 4, EP 4, moe-TP 1
    assert recorded_parallelism({**row, "tp_size": 16, "moe_tp_size": 4, "moe_ep_size": 4})[
        "tp_size"] == 4
    # with attention DP: tp_size 1, DP 64 recorded for tp8_ep8 -> 8 attention ranks, EP 8
    # (its batch_size, recorded as C / 64 = 1 at C = 64, becomes C / 8 = 8)
    dp = recorded_parallelism({**row, "tp_size": 1, "attention_dp_size": 64, "concurrency": 64, "batch_size": 1})
    assert (dp["tp_size"], dp["attention_dp_size"], dp["moe_tp_size"], dp["moe_ep_size"]) == (8, 8, 1, 8)
    assert dp["batch_size"] == 8


def test_readme_convention_campaigns_are_left_as_they_are():
    row = {**ROW, "campaign": "2026-03-25", "tp_size": 64, "attention_dp_size": 1, "moe_tp_size": 8,
           "moe_ep_size": 8}
    assert recorded_parallelism(row) is row
    # TP 8 with EP 1 in a tp-times-ep campaign: nothing counted twice
    plain = {**ROW, "campaign": "2026-04-06", "tp_size": 8, "moe_tp_size": 8, "moe_ep_size": 1}
    assert recorded_parallelism(plain) is plain


def test_clients_tp_times_the_batch_are_read_as_attention_dp_ranks():
    """aic-gap-analysis's TensorRT-LLM DeepSeek NVFP4 row
    nvidia_deepseek_v3_1_nvfp4_..._gb200_trtllm_agg_4000x1000_c320_tp8: tp 8, experts EP 8,
    batch 40 at 320 clients, no attention_dp_size: 320 = 8 x 40, 8 attention ranks of
    batch 40 (the table's batch_size = concurrency / attention_dp_size); aiconfigurator's
    limits per rank: max_batch_size 40, max_num_tokens 40 + 4000 + 1500 up to 32 = 5568."""
    row = {**ROW, "campaign": "aic-gap-analysis", "system": "gb200", "model_path": "deepseek-ai/DeepSeek-V3",
           "isl": 4000, "osl": 1000, "concurrency": 320, "batch_size": 40, "tp_size": 8, "moe_tp_size": 1,
           "moe_ep_size": 8}
    assert recorded_parallelism(row)["attention_dp_size"] == 8
    ov = row_overrides(row, ValidateOptions())
    assert (ov["tensor_parallel_size"], ov["data_parallel_size"], ov["moe_ep_size"]) == (1, 8, 8)
    assert (ov["max_num_seqs"], ov["max_num_batched_tokens"]) == (40, 5568)
    # clients = the batch (every other aic row), another engine's tp convention, a dense row: as they are
    for other in ({**row, "concurrency": 40}, {**row, "backend": "vllm"},
                  {k: v for k, v in row.items() if k not in ("moe_tp_size", "moe_ep_size")},
                  {**row, "concurrency": 300}):
        assert "attention_dp_size" not in recorded_parallelism(other)
    assert row_overrides({**row, "concurrency": 40}, ValidateOptions())["max_num_seqs"] == 40
    # vLLM's DP read from the GPU count (batch = clients): the generator's max_num_seqs per rank is the batch
    vdp = row_overrides({**ROW, "backend": "vllm", "campaign": "aic-gap-analysis", "tp_size": 2, "moe_tp_size": 4,
                         "moe_ep_size": 1, "concurrency": 11, "batch_size": 11, "isl": 2000, "osl": 100},
                        ValidateOptions())
    assert (vdp["data_parallel_size"], vdp["max_num_seqs"]) == (2, 11)
