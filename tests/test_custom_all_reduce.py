"""The engines' CUDA-graph custom all-reduce (``fitted_v1`` ``custom_all_reduce``):
a step's all-reduce inside one NVLink domain takes the faster of it and NCCL."""

import numpy as np
import pandas as pd
import pytest

from calibration.custom_all_reduce import fit_custom_all_reduce, read_custom_all_reduce
from calibration.fit import Device, predict
from sim.cost_model.fitted_step import FittedAllReduce
from sim.hardware.efficiency import AllReduceParams
from sim.hardware.profile import get_hardware


def test_small_message_takes_the_custom_kernel_hand_computed():
    hw = get_hardware("h100_sxm")
    # one token of hidden 4096 in bf16 = 8,192 B over 8 GPUs; link 450 GB/s per direction
    # custom: 2.513 us + 7 x 0.1905 us + 2 x 7/8 x 8192 / (450e9 x 0.3923 / (1 + (796,500 / 8192)^0.3766))
    ar = FittedAllReduce(hw.efficiency, hw, 4096, 8, 1)
    want = 2.513e-6 + 7 * 1.905e-7 + 1.75 * 8192 / (450e9 * 0.3923 / (1 + (7.965e5 / 8192) ** 0.3766))
    assert want == pytest.approx(4.383e-6, rel=1e-3)
    assert ar(1.0) == pytest.approx(want, rel=1e-12)
    # NCCL alone (the profile without the section) is 3.7x that: 16.3 us
    nccl = hw.efficiency.model_copy(update={"custom_all_reduce": None})
    assert FittedAllReduce(nccl, hw, 4096, 8, 1)(1.0) == pytest.approx(16.3e-6, rel=0.02)
    # arrays (the step model's tables) take the same minimum element-wise
    T = np.array([1.0, 4096.0])
    assert np.allclose(ar(T), [ar(1.0), ar(4096.0)], rtol=1e-12)


def test_large_message_keeps_nccl():
    hw = get_hardware("h100_sxm")
    nccl = hw.efficiency.model_copy(update={"custom_all_reduce": None})
    # 16,384 tokens x 7,168 x 2 B = 235 MB: NCCL is the faster (the custom kernels' range ends at 8 MiB)
    assert FittedAllReduce(hw.efficiency, hw, 7168, 8, 1)(16384.0) == FittedAllReduce(nccl, hw, 7168, 8, 1)(16384.0)


def test_fit_recovers_known_parameters():
    true = AllReduceParams(latency_s=3e-6, latency_per_gpu_s=2e-7, bus_efficiency={2: 0.5, 4: 0.45, 8: 0.4},
                           half_bytes=5e5, exponent=0.5)
    dev = Device(peak_bf16=1e15, peak_fp8=2e15, hbm_bw=3e12, num_sms=100, link_bw=4.5e11)
    rows = pd.DataFrame([dict(engine="x", num_gpus=float(g), message_bytes=float(2 ** e))
                         for g in (2, 4, 8) for e in range(7, 24)])
    rows["latency_s"] = predict("all_reduce", true, rows, dev)
    fit = fit_custom_all_reduce(rows, dev)
    err = np.abs(predict("all_reduce", fit, rows, dev) / rows["latency_s"] - 1)
    assert err.max() < 0.01


def test_reads_graph_rows_only(tmp_path):
    pd.DataFrame({"kernel_source": ["vLLM_custom_graph", "vLLM_custom_eager"], "num_gpus": [2, 2],
                  "message_size": [1024, 1024], "latency": [0.004, 0.020], "backend": ["g", "e"]}).to_csv(
        tmp_path / "vllm-0.24.0_custom_allreduce.csv.gz", index=False)
    pd.DataFrame({"num_gpus": [4], "message_size": [2048], "latency": [0.003]}).to_csv(
        tmp_path / "trtllm-1.3.0rc20_custom_allreduce.csv.gz", index=False)
    rows = read_custom_all_reduce(tmp_path)
    assert sorted(zip(rows["engine"], rows["latency_s"])) == [("trtllm", 3e-6), ("vllm", 4e-6)]
