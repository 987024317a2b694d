"""The KV transfer of disaggregated serving: a prompt's KV cache moved from the
prefill worker that computed it to the decode worker that continues it.

**Bytes** are the prompt's KV in the *decode* worker's layout: tokens ×
the decode pool's KV bytes per token per rank (``KVSizing.kv_bytes_per_token``:
the model spec's layout — GQA heads per rank, fp8 KV, and whatever layouts the
model spec adds, MLA latents included) × the decode pool's TP. With TP
resharding between pools (TP 8 prefill → TP 4 decode) the total is the same
when the KV heads split evenly on both sides; each GPU's flow differs: a
sender GPU sends total / TP_prefill, a receiver GPU receives total / TP_decode,
so the transfer runs at ``min(TP_p × bw_p, TP_d × bw_d)`` (every GPU has its
own link: one NIC per GPU on HGX/DGX nodes, NVLink per GPU inside a domain).
Where TP exceeds the KV heads, ranks hold replicas (vLLM
``kv_heads_per_rank = max(1, kv_heads // tp)``) and each receiving rank needs its
copy: the decode layout's bytes count them.

**Time** = latency + the connector's fixed overhead + bytes / bandwidth, on
the NVLink domain (``interconnect``) or the network (``network``: per-GPU NIC).
With ``kv_transfer_layerwise`` (layer-wise connectors: LMCache, Mooncake's
layer-wise mode; Splitwise §4 overlaps KV transfer with the prefill's layers)
the KV of layer l streams out while layer l+1 computes: of the wire time W
only ``max(W / L, W − T_last × (L − 1) / L)`` is exposed after the last
prefill step of duration T_last ends (L layers). vLLM's NixlConnector, SGLang
(Mooncake / NIXL) and TensorRT-LLM send after the prefill completes (off).

**Queueing**: each worker's links are one FIFO resource (a SimPy ``Resource``
of capacity 1: the prefill worker's egress, the decode worker's ingress); a
transfer holds its sender's egress, then its receiver's ingress, for its
whole time, so prompts that finish prefill together go out one after the
other, and a decode worker fed by several prefill workers takes them in turn.
(Acquired in that order, always: no cycle, no deadlock.)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KVTransferSpec:
    """How one prompt's KV moves between the pools (see the module docstring)."""

    link: str                      #: "nvlink" or "network"
    link_name: str                 #: the hardware's name for it
    bandwidth_bytes_per_s: float   #: one transfer's, all GPUs of the pair: min(TP_p·bw_p, TP_d·bw_d)
    latency_s: float
    overhead_s: float
    layerwise: bool
    num_layers: int
    kv_bytes_per_token: int        #: decode layout, all decode ranks together
    prefill_tensor_parallel_size: int
    decode_tensor_parallel_size: int

    def num_bytes(self, num_tokens: int) -> int:
        return num_tokens * self.kv_bytes_per_token

    def wire_time_s(self, num_tokens: int) -> float:
        return self.num_bytes(num_tokens) / self.bandwidth_bytes_per_s

    def time_s(self, num_tokens: int, last_prefill_step_s: float = 0.0) -> float:
        """The transfer's time after the prefill ends (the link is held that long)."""
        w = self.wire_time_s(num_tokens)
        if self.layerwise and self.num_layers > 1:
            L = self.num_layers
            w = max(w / L, w - last_prefill_step_s * (L - 1) / L)
        return self.latency_s + self.overhead_s + w

    def describe(self) -> dict:
        """``summary.json``'s transfer keys; the bandwidth is one transfer's over every GPU of
        the pair (not the per-GPU ``disaggregation.kv_transfer_bandwidth_bytes_per_s``)."""
        return {"kv_transfer_link": self.link, "kv_transfer_link_name": self.link_name,
                "kv_transfer_pair_bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
                "kv_transfer_latency_s": self.latency_s, "kv_transfer_overhead_s": self.overhead_s,
                "kv_transfer_layerwise": self.layerwise, "kv_transfer_bytes_per_token": self.kv_bytes_per_token}
