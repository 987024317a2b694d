# ---
# jupyter:
#   jupytext:
#     formats: py:percent
# ---

# %% [markdown]
# # servesim from Python
#
# A notebook in the "percent" format: open it as a notebook in VS Code, PyCharm or
# Jupyter with jupytext, or run it as a script (`python examples/python_api.py`).
# Each `# %%` starts a cell. It needs only `pip install servesim` (or `pip install -e .`
# in the checkout); `SERVESIM_EXAMPLE_REQUESTS` makes it smaller (the test suite runs it so).

# %%
import os

import servesim

N = int(os.environ.get("SERVESIM_EXAMPLE_REQUESTS", "1000"))
print("servesim", servesim.__version__)

# %% [markdown]
# ## One deployment
# `simulate` takes the config keys of the README as keyword arguments; `engine="vllm"`
# fills every key you do not set with vLLM's defaults. Workload keys go in a dict.

# %%
r = servesim.simulate(model="llama-3.1-8b", hardware="h100_sxm", engine="vllm",
                      workload={"name": "chat", "request_rate": 8, "num_requests": N},
                      max_num_seqs=128)
print({k: round(r.summary[k], 1) for k in ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "output_throughput")})

# %% [markdown]
# `r.requests` and `r.steps` are pandas DataFrames (the columns of `requests.csv` and
# `steps.csv`): the slowest requests, and where their time went.

# %%
slow = r.requests.nlargest(5, "ttft_ms")[["request_id", "num_prompt_tokens", "ttft_ms", "queue_ms", "prefill_ms"]]
print(slow.to_string(index=False))

# %%
steps = r.steps
busy = (steps["step_time_s"] * steps["mean_kv_cache_usage"]).sum() / steps["step_time_s"].sum()
print(f"{steps['num_steps'].sum():,} engine steps; time-averaged KV usage {busy:.1%}")
# r.save("runs/api")                 # summary.json, requests.csv, steps.csv
# r.save_trace("runs/api/trace.json")  # open in https://ui.perfetto.dev

# %% [markdown]
# ## A comparison on the identical request stream
# Batching modes by name, or `{name: {key: value}}` variants; `c.table` is `comparison.csv`.

# %%
c = servesim.compare({"budget-8k": {"max_num_batched_tokens": 8192},
                      "budget-2k": {"max_num_batched_tokens": 2048}},
                     engine="vllm", workload={"name": "chat", "request_rate": 8, "num_requests": N},
                     goodput={"ttft": 500, "tpot": 50})
print(c.table[["variant", "p99_ttft_ms", "p99_tpot_ms", "request_goodput"]].to_string(index=False))
# c.report("runs/api-compare")  # report.md, report.html and the figures
