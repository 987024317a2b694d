#!/usr/bin/env bash
# simulated router 'round_robin'; vLLM's data-parallel balancer sends each request to the least loaded engine
vllm serve Qwen/Qwen3-30B-A3B \
    --tensor-parallel-size 2 \
    --data-parallel-size 3 \
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
