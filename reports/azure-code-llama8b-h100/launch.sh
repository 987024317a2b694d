#!/usr/bin/env bash
vllm serve meta-llama/Llama-3.1-8B-Instruct \
    --tensor-parallel-size 1 \
    --max-num-seqs 1024 \
    --max-num-batched-tokens 8192 \
    --max-model-len 131072 \
    --gpu-memory-utilization 0.92 \
    --block-size 16 \
    --no-enable-prefix-caching \
    --enable-chunked-prefill \
    --scheduling-policy fcfs \
    --no-async-scheduling \
    --dtype bfloat16
