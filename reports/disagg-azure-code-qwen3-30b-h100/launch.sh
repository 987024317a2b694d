#!/usr/bin/env bash
# 3 replicas: run this command 3 times (each on its own GPUs) behind a load balancer (simulated router 'round_robin')
vllm serve Qwen/Qwen3-30B-A3B \
    --tensor-parallel-size 2 \
    --max-num-seqs 1024 \
    --max-num-batched-tokens 8192 \
    --max-model-len 40960 \
    --gpu-memory-utilization 0.92 \
    --block-size 16 \
    --no-enable-prefix-caching \
    --enable-chunked-prefill \
    --scheduling-policy fcfs \
    --no-async-scheduling \
    --dtype bfloat16
