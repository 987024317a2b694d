#!/usr/bin/env bash
# simulated router 'round_robin'; vLLM's data-parallel balancer sends each request to the least loaded engine
vllm serve meta-llama/Llama-3.1-70B-Instruct \
    --tensor-parallel-size 4 \
    --data-parallel-size 6 \
    --max-num-seqs 1024 \
    --max-num-batched-tokens 8192 \
    --max-model-len 8192 \
    --gpu-memory-utilization 0.92 \
    --block-size 16 \
    --no-enable-prefix-caching \
    --no-enable-chunked-prefill \
    --scheduling-policy fcfs \
    --no-async-scheduling \
    --dtype bfloat16
