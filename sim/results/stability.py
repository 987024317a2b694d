"""Is a run's load sustainable? An open-loop run is *stable* when the backlog does
not grow while requests arrive: compare the first third of the arrival window
(first to last send of the measured requests) with the last third, after the
start-up transient: the system starts empty and fills within about one request's
service time (Little: N = λ·W), so the window starts one median service time
(first scheduled → finished) after the first send. Under overload the queue
keeps growing while the service time stays bounded by the batch cap, so the skip
does not hide it; where the batch itself keeps growing (continuous batching with
a large ``max_num_seqs``) the service time grows too, and such a run usually ends
up too short to judge, which does not pass either. A run whose window after the
transient is shorter than the transient cannot be judged: it is not called
stable, and ``stability_reason`` says "not judged" (send more requests).

- **In-system count** N(t) = running + waiting requests, summed over replicas,
  time-averaged over each third from the engine-step rows (idle time counts 0).
  Under overload N grows linearly (Little: N = λ·W with W growing); it also
  catches a batch that keeps growing while the waiting queue stays empty
  (continuous batching admits up to ``max_num_seqs`` and slows every step).
- **Queueing time** (send → first scheduled) of requests sent in each third.
- **Completed ≈ offered**: measured requests that finished / measured requests
  sent, which falls when requests are rejected (e.g. larger than the KV cache).

Unstable when ``N_last > n_growth·N_first + n_floor`` or
``q_last > q_growth·q_first + q_floor_s`` or the completed fraction is below
``1 − max_rejected_fraction``. The defaults leave room for Poisson noise and
the start-up transient (the system starts empty): on llama-3.1-70b / chat
runs the ratio stays ≤ 1.4 up to saturation and jumps to ≥ 2.5 beyond it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.results.metrics import STATUS_FINISHED


@dataclass(frozen=True)
class StabilityCheck:
    n_growth: float = 1.5
    n_floor: float = 2.0          # requests
    q_growth: float = 2.0
    q_floor_s: float = 0.1        # s
    max_rejected_fraction: float = 0.05


def _time_avg_in_system(steps: dict[str, np.ndarray], lo: float, hi: float) -> float:
    start = steps["start_time_s"]
    end = start + steps["step_time_s"]
    overlap = np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0.0, None)
    # a merged row's num_waiting_reqs is its last step's; mean_num_waiting_reqs its time average
    n = steps["num_running_seqs"] + steps.get("mean_num_waiting_reqs", steps["num_waiting_reqs"])
    return float((n * overlap).sum() / (hi - lo)) if hi > lo else float("nan")


def assess_stability(requests: dict[str, np.ndarray], steps: dict[str, np.ndarray],
                     check: StabilityCheck = StabilityCheck()) -> dict:
    """Stability columns of one run (``RunResult.requests`` / ``.steps`` arrays):
    ``stable`` (bool), ``stability_reason`` (empty when stable and judged),
    ``in_system_first`` / ``in_system_last`` (requests), ``queue_first_ms`` /
    ``queue_last_ms`` (thirds of the window after the transient),
    ``transient_s`` (the skipped start-up, s), ``completed_fraction`` and
    ``offered_rate`` (req/s: measured sends over the whole arrival window)."""
    measured = requests["is_warmup"] == 0
    done = measured & (requests["status"] == STATUS_FINISHED)
    sent = int(measured.sum())
    out = {"stable": False, "stability_reason": "", "offered_rate": float("nan"),
           "completed_fraction": float(done.sum() / sent) if sent else float("nan"),
           "in_system_first": float("nan"), "in_system_last": float("nan"),
           "queue_first_ms": float("nan"), "queue_last_ms": float("nan"), "transient_s": float("nan")}
    if sent < 3 or done.sum() < 3:
        out["stability_reason"] = f"too few finished requests to judge ({int(done.sum())} of {sent})"
        return out
    arrival = requests["arrival_time_s"]
    t0, t1 = float(arrival[measured].min()), float(arrival[measured].max())
    span = t1 - t0
    out["offered_rate"] = (sent - 1) / span if span > 0 else float("inf")
    reasons = []
    if out["completed_fraction"] < 1.0 - check.max_rejected_fraction:
        reasons.append(f"only {out['completed_fraction']:.1%} of the sent requests completed")
    warm = 0.0
    if "finish_time_s" in requests:
        warm = float(np.median(requests["finish_time_s"][done] - requests["first_scheduled_time_s"][done]))
        out["transient_s"] = warm
    if span > 0 and span - warm < warm:
        # Too short to tell a filling system from an overloaded one: not shown
        # stable (a capacity plan must not pass a rate it could not judge).
        reasons.append(f"not judged: the arrival window ({span:.1f} s) is shorter than twice the start-up "
                       f"transient (median service time {warm:.1f} s); send more requests")
        out["stability_reason"] = "; ".join(reasons)
        return out
    t0 += warm
    span = t1 - t0
    if span > 0:
        first, last = (t0, t0 + span / 3), (t1 - span / 3, t1)
        n1, n3 = (_time_avg_in_system(steps, *w) for w in (first, last))
        queue = requests["first_scheduled_time_s"] - arrival
        q = [float(np.mean(queue[done & (arrival >= a) & (arrival <= b)])) if np.any(
            done & (arrival >= a) & (arrival <= b)) else 0.0 for a, b in (first, last)]
        out.update(in_system_first=n1, in_system_last=n3, queue_first_ms=q[0] * 1e3, queue_last_ms=q[1] * 1e3)
        if n3 > check.n_growth * n1 + check.n_floor:
            reasons.append(f"requests in system grow from {n1:.1f} to {n3:.1f} (first vs last third of arrivals)")
        if q[1] > check.q_growth * q[0] + check.q_floor_s:
            reasons.append(f"queueing time grows from {q[0] * 1e3:.0f} ms to {q[1] * 1e3:.0f} ms")
    out["stable"] = not reasons
    out["stability_reason"] = "; ".join(reasons)
    return out
