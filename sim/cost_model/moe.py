"""Routed-expert (MoE) quantities shared by the step model and its tests:
how a step's routed rows spread over the experts and the expert-parallel
(EP) ranks, and the load of the most loaded rank, which sets the step's MoE
time (the ranks of an EP group meet at the combine, so every rank waits for
the slowest).

Uniform routing: each of a step's T tokens picks ``num_experts_per_tok`` = k
distinct experts of the E at random; the grouped expert GEMMs (vLLM
``fused_moe``) compute T x k token rows and read the weights of every expert
hit at least once, E (1 - (1 - k/E)^T) in expectation (k of E at T = 1; all E
once T >> E/k). Without expert parallelism experts are tensor-sharded (vLLM
FusedMoE: each rank holds 1/tp of every expert's columns).

Most loaded EP rank (uniform routing, E/ep experts per rank): a token puts a
hypergeometric number of its k rows on one rank (k draws without replacement
from E experts, E/ep of them local): mean k/ep, variance k (1/ep)(1 - 1/ep)
(E - k)/(E - 1). Over T independent tokens a rank's rows X_r have mean
mu = T k / ep and variance s^2 = T x that, and the ep counts always sum to
T k, so they are exchangeable with correlation -1/(ep - 1) (the multinomial /
multivariate-hypergeometric covariance). In the normal limit such a vector is
X_r = mu + s sqrt(ep/(ep-1)) (W_r - mean W) with W_r independent standard
normals, so E[max_r X_r] = mu + s z(ep) sqrt(ep/(ep-1)), z(n) = E[max of n
independent standard normals] (Gumbel-free, by quadrature; e.g. Arnold,
Balakrishnan & Nagaraja, *A First Course in Order Statistics*, for z(n); the
sum constraint gives the sqrt(ep/(ep-1)): at ep = 2 the max is mu + E|X_1 -
mu|, mu + s sqrt(2/pi)). Capped at T min(k, E/ep) (a token puts at most one row
on each expert). Checked against exact enumeration and a fixed-seed Monte Carlo
in ``tests/test_moe_routing.py`` (T = 2, k = 1, E = 4, ep = 2: exact 1.5, this
1.56). The experts the most loaded rank touches: its E/ep experts each hit as
if the rank had seen T' = T x rows / mu tokens, E/ep (1 - (1 - k/E)^T') (the
uniform formula at the rank's own load).

Skewed routing (``workload_distribution: power_law_<alpha>``, aiconfigurator's
vocabulary -- ``ModelConfig.workload_distribution``, its MoE tables'
``distribution`` column ``power_law_1.01`` / ``power_law_1.2``): the kernel
benchmarks of aiconfigurator's collector (``collector/helper.py``
``_generate_power_law_distribution``, used by its vllm / sglang / trtllm
``collect_moe.py``; github.com/ai-dynamo/aiconfigurator) draw one weight x_e
per expert from the truncated power law p(x) ~ x^-alpha on [1, 0.8 T] (when
T k > E; else on [0.01, 2]), give expert e round(T k x_e / sum x) rows (the
rounding remainder to the largest), and measure the EP rank whose experts
carry the most rows (swapped to rank 0). Modelled in expectation, without
sampling: a rank's weight S_r is the sum of E/ep independent draws (mean
(E/ep) m1, variance (E/ep) v from the truncated law's moments), the ep sums
are divided by their total, so the most loaded rank's share is 1/ep +
sqrt((E/ep) v) z(ep) / (E m1) (normal limit of max_r S_r - mean S over the
mean total), capped at 1, and it gets that share of the T k rows; an expert
is touched where its rounded count is at least 1 or the rounding shortfall
reaches it (:func:`power_law_touched_experts`), the rank 1/ep of them.
"""

from __future__ import annotations

import math

import numpy as np

from sim.config import POWER_LAW_ALPHA_RULE, WORKLOAD_DISTRIBUTION_RE
from sim.errors import ConfigError
from sim.model_spec import WEIGHT_BYTES_PER_PARAM, ModelSpec

#: ``workload_distribution`` values (aiconfigurator's names): ``uniform`` (each
#: token picks top_k experts at random, the serving default), ``balanced`` (the
#: kernel tables' balanced rows: the T top_k rows dealt evenly over min(E, T top_k)
#: experts), ``power_law_<alpha>`` (module docstring)
WORKLOAD_DISTRIBUTIONS = ("uniform", "balanced", "power_law_<alpha>")
_POWER_LAW = WORKLOAD_DISTRIBUTION_RE


def parse_workload_distribution(value: str) -> tuple[str, float]:
    """(kind, alpha) of a ``workload_distribution`` value; alpha 0 unless power law.
    ConfigError (one line, naming the key, listing the values) for anything else:
    alpha must be a finite number > 0 (:data:`sim.config.POWER_LAW_ALPHA_RULE`)."""
    if value in ("uniform", "balanced"):
        return value, 0.0
    m = _POWER_LAW.match(str(value))
    if m is None or not (0.0 < float(m.group(1)) < math.inf):
        raise ConfigError(f"workload_distribution: {value!r} is not one of "
                          f"{', '.join(WORKLOAD_DISTRIBUTIONS)} ({POWER_LAW_ALPHA_RULE})")
    return "power_law", float(m.group(1))


def expected_experts_touched(num_experts: int, top_k: int, num_tokens):
    """Expected number of distinct experts hit by ``num_tokens`` tokens routing
    uniformly to ``top_k`` of ``num_experts`` each: E (1 - (1 - k/E)^T)."""
    E, k = num_experts, top_k
    return E * (1.0 - (1.0 - k / E) ** num_tokens)


_Z_CACHE: dict[int, float] = {}


def expected_max_std_normal(n: int) -> float:
    """E[max of n independent standard normals] (0 at n = 1, 1/sqrt(pi) at 2,
    1.4236 at 8), by numerical integration of n x phi(x) Phi(x)^(n-1)."""
    n = int(n)
    if n <= 1:
        return 0.0
    z = _Z_CACHE.get(n)
    if z is None:
        x = np.linspace(-10.0, 10.0, 40001)
        phi = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        Phi = 0.5 * (1.0 + np.array([math.erf(v / math.sqrt(2.0)) for v in x]))
        f = x * n * phi * Phi ** (n - 1)
        z = _Z_CACHE[n] = float(np.sum((f[1:] + f[:-1]) * 0.5 * (x[1] - x[0])))
    return z


def _z(ep, fixed_sum: bool):
    """z(ep) (x sqrt(ep/(ep-1)) where the ep values sum to a constant), for a
    scalar or an array of EP sizes."""
    def one(n: float) -> float:
        n = int(n)
        z = expected_max_std_normal(n)
        return z * math.sqrt(n / (n - 1.0)) if fixed_sum and n > 1 else z
    if np.ndim(ep) == 0:
        return one(float(ep))
    e = np.asarray(ep, dtype=float)
    vals = {u: one(u) for u in np.unique(e)}
    return np.vectorize(vals.__getitem__, otypes=[float])(e)


def uniform_max_rank_load(num_tokens, num_experts, top_k, ep):
    """(rows, experts touched) of the most loaded of ``ep`` EP ranks for
    ``num_tokens`` tokens routed uniformly (module docstring; arrays broadcast;
    ep = 1: T k rows on E (1 - (1 - k/E)^T) experts)."""
    T = np.asarray(num_tokens, dtype=float)
    E, k, ep = (np.asarray(x, dtype=float) for x in (num_experts, top_k, ep))
    El = E / ep
    p = 1.0 / ep
    mu = T * k * p
    var = k * p * (1.0 - p) * (E - k) / np.maximum(E - 1.0, 1.0)
    rows = np.minimum(mu + np.sqrt(T * var) * _z(ep, fixed_sum=True), T * np.minimum(k, El))
    with np.errstate(divide="ignore", invalid="ignore"):
        t_eff = np.where(ep > 1, np.where(mu > 0, T * rows / mu, 0.0), T)
    touched = El * (1.0 - (1.0 - k / E) ** t_eff)
    return rows, touched


def power_law_support(num_tokens, num_experts, top_k):
    """(xmin, xmax) of aiconfigurator's expert weights: [1, 0.8 T] when T k > E,
    else [0.01, 2] (module docstring)."""
    T = np.asarray(num_tokens, dtype=float)
    big = T * np.asarray(top_k, dtype=float) > np.asarray(num_experts, dtype=float)
    return np.where(big, 1.0, 0.01), np.where(big, np.maximum(0.8 * T, 1.0 + 1e-9), 2.0)


def _power_moment_integral(p, lo, hi, alpha, a):
    """Integral of u^(p - alpha) du over [lo/a, hi/a] (u = x / a, log where the power is -1):
    the integral of x^(p - alpha) over [lo, hi] is a^(p + 1 - alpha) times it. In units of
    the support's lower end ``a`` (lo, hi >= a) u^e stays in [0, (b/a)^3] for every alpha > 0,
    so a large alpha underflows harmlessly instead of overflowing a^e (0.01^-200 = 1e400); the
    ratios below take the a^(...) factors out by hand."""
    e = p + 1.0 - alpha
    if abs(e) < 1e-12:
        return np.log(hi / lo)
    return ((hi / a) ** e - (lo / a) ** e) / e


def power_law_moments(a, b, alpha: float):
    """(mean, variance) of the density ~ x^-alpha truncated to [a, b]."""
    z = _power_moment_integral(0.0, a, b, alpha, a)
    m1 = a * _power_moment_integral(1.0, a, b, alpha, a) / z
    m2 = a * a * _power_moment_integral(2.0, a, b, alpha, a) / z
    return m1, np.maximum(m2 - m1 * m1, 0.0)


def power_law_tail(x, a, b, alpha: float):
    """P(X >= x) for the truncated power law on [a, b] (1 below a, 0 above b)."""
    xc = np.clip(x, a, b)
    return _power_moment_integral(0.0, xc, b, alpha, a) / _power_moment_integral(0.0, a, b, alpha, a)


def _power_law_partial_mean(u, a, b, alpha: float):
    """E[X; X >= u] for the truncated power law on [a, b]."""
    uc = np.clip(u, a, b)
    return a * _power_moment_integral(1.0, uc, b, alpha, a) / _power_moment_integral(0.0, a, b, alpha, a)


#: integer counts summed one by one in :func:`power_law_touched_experts` (beyond: the mean)
_ROUND_TERMS = 32


def power_law_touched_experts(num_tokens, num_experts, top_k, alpha: float):
    """Expected experts (of all E) with at least one row under aiconfigurator's
    power law: expert e gets round(c x_e) rows, c = T k / (E m1); n1 = E P(c X >=
    1/2) round to one or more; the rounding shortfall delta = T k - E E[round(c X)]
    (E[round(c X)] = sum_j P(c X >= j - 1/2)) is dealt one row each to the experts
    in descending order, the n1 nonzero ones first, so the touched count is
    max(n1, min(delta, E))."""
    T = np.asarray(num_tokens, dtype=float)
    E, k = np.asarray(num_experts, dtype=float), np.asarray(top_k, dtype=float)
    a, b = power_law_support(T, E, k)
    m1, _ = power_law_moments(a, b, alpha)
    c = T * k / (E * m1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rounded = 0.0
        for j in range(1, _ROUND_TERMS + 1):
            rounded = rounded + power_law_tail((j - 0.5) / c, a, b, alpha)
        u = (_ROUND_TERMS + 0.5) / c
        rounded = rounded + np.maximum(c * _power_law_partial_mean(u, a, b, alpha)
                                       - _ROUND_TERMS * power_law_tail(u, a, b, alpha), 0.0)
        n1 = E * power_law_tail(0.5 / c, a, b, alpha)
    delta = T * k - E * rounded
    return np.where(T > 0, np.maximum(n1, np.minimum(delta, E)), 0.0)


def power_law_max_rank_load(num_tokens, num_experts, top_k, ep, alpha: float):
    """(rows, experts touched) of the most loaded EP rank under aiconfigurator's
    ``power_law_<alpha>`` routing (module docstring; arrays broadcast): the rank's
    share of the rows, its 1/ep share of :func:`power_law_touched_experts` (at
    least one expert, at most its rows and its E/ep experts)."""
    T = np.asarray(num_tokens, dtype=float)
    E, k, ep = (np.asarray(x, dtype=float) for x in (num_experts, top_k, ep))
    El = E / ep
    a, b = power_law_support(T, E, k)
    m1, v = power_law_moments(a, b, alpha)
    share = np.minimum(1.0 / ep + np.sqrt(El * v) * _z(ep, fixed_sum=False) / (E * m1), 1.0)
    rows = share * T * k
    touched = power_law_touched_experts(T, E, k, alpha) / ep
    touched = np.minimum(np.maximum(touched, 1.0), np.minimum(El, np.maximum(rows, 1.0)))
    return rows, touched


def max_rank_load(num_tokens, num_experts, top_k, ep, workload_distribution: str = "uniform"):
    """(rows, experts touched) on the most loaded EP rank for a
    ``workload_distribution`` (``balanced``: the T top_k rows dealt evenly over
    min(E, T top_k) experts, rank share 1/ep, at least one expert and one row)."""
    kind, alpha = parse_workload_distribution(workload_distribution)
    if kind == "uniform":
        return uniform_max_rank_load(num_tokens, num_experts, top_k, ep)
    if kind == "power_law":
        return power_law_max_rank_load(num_tokens, num_experts, top_k, ep, alpha)
    T = np.asarray(num_tokens, dtype=float)
    E, k, ep = (np.asarray(x, dtype=float) for x in (num_experts, top_k, ep))
    return np.maximum(T * k / ep, 1.0), np.maximum(np.minimum(E, T * k) / ep, 1.0)


def expert_weight_bytes_per_step(model: ModelSpec, num_tokens, tensor_parallel_size: int = 1,
                                 quantization: str | None = None):
    """Routed-expert weight bytes one rank reads in one step (all MoE layers):
    distinct experts touched x (w13 + w2 bytes of one expert's shard)."""
    w13, w2 = model.expert_shapes(tensor_parallel_size)
    wb = WEIGHT_BYTES_PER_PARAM[model.family_quantization("experts", quantization)]
    per_expert = (w13.n * w13.k + w2.n * w2.k) * wb
    return (expected_experts_touched(model.num_experts, model.num_experts_per_tok, num_tokens)
            * per_expert * model.num_moe_layers)
