"""Engine versions: the documented behaviour changes that matter for timing.

``engine: vllm`` (or ``sglang``, ``trtllm``) alone keeps the preset's
behaviour, the latest modelled release. ``engine_version: X`` selects, for
every :class:`VersionChange` of that engine whose ``before`` is newer than X,
the older value of its key, and for every :class:`ReleaseValue` whose
``since`` is not after X, its measured value (the user's explicit keys still
win). A version outside the modelled range (:data:`MODELLED`), or one that
cannot be read, gets a warning naming the nearest modelled version
(:func:`version_warning`).

Data and pure functions only (imports nothing from sim).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class VersionChange:
    """``key`` was ``value`` in releases before ``before`` (and is the preset's since)."""
    key: str
    before: str
    value: Any
    source: str


#: engine -> behaviour changes, each with its source
VERSION_CHANGES: dict[str, tuple[VersionChange, ...]] = {
    "vllm": (
        VersionChange("scheduler", "0.8.0", "prefill_first_whole",
                      "V1 engine default from 0.8.0 (release notes; VLLM_USE_V1). The V0 scheduler without "
                      "chunked prefill (its default below 32k context) runs waiting prompts whole in "
                      "prefill-only steps before decodes (vllm/core/scheduler.py::_schedule_default)"),
        VersionChange("max_num_seqs", "0.8.0", 256,
                      "V0 SchedulerConfig max_num_seqs 256 (vllm/config.py, 0.7)"),
        VersionChange("enable_prefix_caching", "0.8.0", False,
                      "V0 EngineArgs: automatic prefix caching is opt-in (--enable-prefix-caching, default off; "
                      "vllm/engine/arg_utils.py, whose V0 create_engine_config enables chunked prefill for "
                      "max_model_len > 32K only 'not self.enable_prefix_caching'); the V1 engine (default from "
                      "0.8.0) turns it on (vllm/config/cache.py in 0.24)"),
        VersionChange("overlap_scheduling", "0.14.0", False,
                      "async_scheduling off in 0.11, on by default from 0.14 (release notes; "
                      "vllm/config/vllm.py in 0.24; ENGINE_SEMANTICS 1.1)"),
        VersionChange("memory_profile", "0.11.0", "after_cuda_context",
                      "github.com/vllm-project/vllm/pull/25359 (merged 2025-09-22) moved "
                      "init_worker_distributed_environment before the init-time memory snapshot; before it "
                      "NCCL buffers 'show up as non-torch memory increase' (sim/kv_cache/sizing.py)"),
        VersionChange("memory_profile", "0.7.0", "before_cuda_context",
                      "github.com/vllm-project/vllm/pull/12126 and 11809 (January 2025, in 0.7.0) keep the CUDA "
                      "context in the baseline snapshot (non-torch 0.16 GiB in its log); PR 10511's profiler "
                      "(0.6.5) logged 1.79 / 3.58 GiB non-torch at TP 1 / 2 on H100"),
        VersionChange("gpu_memory_utilization", "0.24.0", 0.9,
                      "vllm/config/cache.py gpu_memory_utilization 0.9 in 0.11, 0.92 in 0.24 (ENGINE_SEMANTICS "
                      "sources); the release in between that changed it was not read: modelled from 0.24"),
    ),
    "sglang": (
        VersionChange("overlap_scheduling", "0.4.0", False,
                      "zero-overhead (overlap) batch scheduler on by default from v0.4 (lmsys.org blog "
                      "2024-12-04 sglang-v0-4; server_args.py --disable-overlap-schedule)"),
    ),
    "trtllm": (
        VersionChange("overlap_scheduling", "0.19.0", False,
                      "PyTorch backend: PyTorchConfig enable_overlap_scheduler=False in the 0.18.2 docs "
                      "(torch.html); 'Enabled by default, disable_overlap_scheduler' in the 1.0 docs "
                      "(features/overlap_scheduler.md); the switch is modelled at 0.19.0"),
    ),
}


@dataclass(frozen=True)
class ReleaseValue:
    """``key`` is ``value`` from release ``since`` on (and in the preset, its
    newest modelled release): a measured property of the newer releases that
    replaces the value fitted on older releases' rows (``EnginePreset.fitted``).
    Before ``since`` the fitted value stands; a fit of that key
    (``benchmarks/validate_silicon.py``) is a fit of those older releases and
    does not reach rows of ``since`` on (``sim/validate/rows.py``)."""
    key: str
    since: str
    value: Any
    source: str


#: engine -> measured values of its newer releases, each with its source
RELEASE_VALUES: dict[str, tuple[ReleaseValue, ...]] = {
    "trtllm": (
        ReleaseValue("cpu_seq_overhead_s", "1.2.0", 28e-6,
                     "github.com/NVIDIA/TensorRT-LLM/pull/10273 (2025-12-24, the 1.2 series): GPT-OSS-120B on "
                     "GB200, aggregated, attention DP 2 with max_batch_size 1536, 3,072 clients (1,536 requests a "
                     "rank), a run the PR calls one 'where the host overhead is the bottleneck': 'the average per "
                     "iteration host_step_time is 45.11 ms' (PyExecutor's per-iteration wall time, which also "
                     "bounds the host's share); (45.11 ms - the 2 ms of cpu_step_overhead_s) / 1,536 = 28 us a "
                     "sequence. The fitted 80 us is of TensorRT-LLM 1.0.0rc3 (the dense table's rows)"),
    ),
}


def release_values(engine: str, version: str | None) -> dict[str, Any]:
    """Config keys that ``engine`` ``version`` takes from :data:`RELEASE_VALUES`:
    those whose ``since`` is not after it; all of them for no version or an
    unreadable one (the preset's newest modelled release)."""
    pv = parse_version(version) if version else None
    return {rv.key: rv.value for rv in RELEASE_VALUES.get(engine, ())
            if pv is None or pv >= (parse_version(rv.since) or (0, 0, 0))}


#: engine -> the releases whose behaviour the preset and its changes were read from
MODELLED: dict[str, tuple[str, ...]] = {
    "vllm": ("0.7.3", "0.11.0", "0.12.0", "0.14.0", "0.24.0"),
    "sglang": ("0.3.6", "0.4.0", "0.5.1", "0.5.6", "0.5.8"),
    "trtllm": ("0.18.2", "1.0.0", "1.2.0"),
}

#: NVIDIA Dynamo release -> the engine release its runtime container ships
#: (``nvcr.io/nvidia/ai-dynamo/{tensorrtllm,sglang,vllm}-runtime:<Dynamo release>``).
#: Source: Dynamo Support Matrix, "Backend Dependencies"
#: (https://docs.nvidia.com/dynamo/getting-started/support-matrix): "the backend
#: framework versions included with each Dynamo release". Releases before 0.6.0
#: are not in that table and are not mapped.
DYNAMO_BACKENDS: dict[str, dict[str, str]] = {
    "0.6.0": {"vllm": "0.11.0", "sglang": "0.5.3.post2", "trtllm": "1.1.0rc5"},
    "0.6.1": {"vllm": "0.11.0", "sglang": "0.5.3.post2", "trtllm": "1.1.0rc5"},
    "0.6.1.post1": {"vllm": "0.11.0", "sglang": "0.5.3.post2", "trtllm": "1.1.0rc5"},
    "0.7.0": {"vllm": "0.11.0", "sglang": "0.5.4.post3", "trtllm": "1.2.0rc2"},
    "0.7.0.post1": {"vllm": "0.11.0", "sglang": "0.5.4.post3", "trtllm": "1.2.0rc3"},
    "0.7.1": {"vllm": "0.11.0", "sglang": "0.5.4.post3", "trtllm": "1.2.0rc3"},
    "0.8.0": {"vllm": "0.12.0", "sglang": "0.5.6.post2", "trtllm": "1.2.0rc6.post1"},
    "0.8.1": {"vllm": "0.12.0", "sglang": "0.5.6.post2", "trtllm": "1.2.0rc6.post1"},
    "0.8.1.post1": {"vllm": "0.12.0", "sglang": "0.5.6.post2", "trtllm": "1.2.0rc6.post1"},
    "0.8.1.post2": {"vllm": "0.12.0", "sglang": "0.5.6.post2", "trtllm": "1.2.0rc6.post2"},
    "0.8.1.post3": {"vllm": "0.12.0", "sglang": "0.5.6.post2", "trtllm": "1.2.0rc6.post3"},
    "0.9.0": {"vllm": "0.14.1", "sglang": "0.5.8", "trtllm": "1.3.0rc1"},
}
#: Dynamo release series before the support matrix's first (0.6.0) -> engine -> (oldest,
#: newest) engine release it can ship, and the source. Where no modelled behaviour change
#: (:data:`VERSION_CHANGES`, :data:`RELEASE_VALUES`) falls inside the range, every release in
#: it behaves alike: such a row is simulated as the newest (:func:`dynamo_engine_bounds`).
DYNAMO_BOUNDS: dict[str, dict[str, tuple[str, str, str]]] = {
    "0.5": {"trtllm": ("1.0.0rc6", "1.1.0rc5",
                       "Dynamo's main branch pinned TensorRT-LLM 1.0.0rc6 until github.com/ai-dynamo/dynamo/pull/2930 "
                       "(2025-09-08) moved it to 1.1.0rc1, and 1.1 until pull/4405 (2025-11-17) moved it to "
                       "1.2.0rc2, after the 0.5.1-rc0 branch (release/0.5.1-rc0.20251105); the support matrix's "
                       "next release, 0.6.0, ships 1.1.0rc5")},
}
#: the image repository of each engine's Dynamo runtime container
DYNAMO_RUNTIME_IMAGES = {"tensorrtllm-runtime": "trtllm", "sglang-runtime": "sglang", "vllm-runtime": "vllm"}
_DYNAMO_IMAGE = re.compile(r"ai-dynamo[/#]([a-z]+-runtime):([^\s/#]+)$")


def dynamo_image_release(engine: str, image: str) -> str | None:
    """The Dynamo release of ``image`` if it is a Dynamo runtime container of
    ``engine`` (``nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.5.1-rc0.pre3``
    -> ``0.5.1-rc0.pre3``), mapped in :data:`DYNAMO_BACKENDS` or not; else None."""
    m = _DYNAMO_IMAGE.search(str(image or "").strip())
    if not m or DYNAMO_RUNTIME_IMAGES.get(m.group(1)) != engine:
        return None
    return m.group(2)


def dynamo_engine_bounds(engine: str, image: str) -> tuple[str, str, str, str] | None:
    """(Dynamo release, oldest and newest ``engine`` release it can ship, source) of a
    Dynamo runtime ``image`` whose release series is in :data:`DYNAMO_BOUNDS`
    (``tensorrtllm-runtime:0.5.1-rc0.pre3`` -> ``("0.5.1-rc0.pre3", "1.0.0rc6",
    "1.1.0rc5", ...)``); None otherwise."""
    tag = dynamo_image_release(engine, image)
    pv = parse_version(tag) if tag else None
    if pv is None:
        return None
    bounds = DYNAMO_BOUNDS.get(f"{pv[0]}.{pv[1]}", {}).get(engine)
    return (tag, *bounds) if bounds else None


def dynamo_engine_version(engine: str, image: str) -> tuple[str, str] | None:
    """(Dynamo release, engine release) of a Dynamo runtime container ``image``
    of ``engine`` (``nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post2``
    -> ``("0.8.1.post2", "1.2.0rc6.post2")``, :data:`DYNAMO_BACKENDS`). A
    post-release not in the table takes its base release's engine (the table
    pins one per release; e.g. ``0.7.0.post2`` -> 0.7.0's). None when the image
    is not a Dynamo runtime of ``engine`` or its release is not in the table."""
    tag = dynamo_image_release(engine, image)
    if tag is None:
        return None
    rel = DYNAMO_BACKENDS.get(tag) or DYNAMO_BACKENDS.get(tag.split(".post")[0])
    if rel is None or engine not in rel:
        return None
    return tag, rel[engine]


#: major[.minor[.patch]] then pre/post/dev tags (``rc3``, ``.post1``, ``-rc0.pre1``) and a local part
#: (``+cu124``); anything else (``0.12.0; rm``, ``0.12.0.1.2.3``) is no version number
_NUM = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?((?:[.\-_]?[A-Za-z]+\d*)*(?:\+[\w.]+)?)$")


def parse_version(v: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of ``0.5.1.post1``, ``1.0.0rc3``, ``v0.8``; None if unreadable.
    Pre-release and post tags are ignored (1.0.0rc3 counts as 1.0.0)."""
    m = _NUM.match(str(v).strip())
    if not m:
        return None
    return int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0)


def version_defaults(engine: str, version: str | None) -> dict[str, Any]:
    """Config keys whose value in ``engine`` ``version`` differs from the preset's."""
    pv = parse_version(version) if version else None
    if pv is None:
        return {}
    out: dict[str, Any] = {}
    for ch in VERSION_CHANGES.get(engine, ()):
        before = parse_version(ch.before)
        if before is not None and pv < before:
            out[ch.key] = ch.value
    return out


def nearest_modelled(engine: str, version: str) -> str | None:
    """The modelled release whose behaviour ``version`` gets: the newest modelled
    release not after it (the behaviour changes are thresholds: a release keeps
    every change up to it), the oldest for a version before them all, the newest
    for an unreadable one; None for an engine without modelled releases."""
    known = MODELLED.get(engine, ())
    if not known:
        return None
    pv = parse_version(version)
    if pv is None:
        return known[-1]
    ordered = sorted(known, key=lambda k: parse_version(k) or (0, 0, 0))
    not_after = [k for k in ordered if (parse_version(k) or (0, 0, 0)) <= pv]
    return not_after[-1] if not_after else ordered[0]


def simulated_release(engine: str | None, version: str | None) -> str | None:
    """The modelled release whose behaviour a run of ``engine`` at ``version``
    gets: the nearest one (:func:`nearest_modelled`) where ``version`` is given,
    else the newest; None without an engine."""
    known = MODELLED.get(engine or "", ())
    if not known:
        return None
    return nearest_modelled(engine, version) if version else known[-1]


def version_warning(engine: str | None, version: str | None) -> str | None:
    """A warning if ``version`` of ``engine`` is unreadable or outside the
    modelled releases (older than the oldest, or of a later minor series than
    the newest)."""
    if not engine or not version:
        return None
    known = MODELLED.get(engine)
    if not known:
        return None
    pv = parse_version(version)
    lo, hi = parse_version(known[0]), parse_version(known[-1])
    if pv is None:
        return (f"engine_version {version!r} of {engine} is not a version number; the preset's behaviour "
                f"(its newest modelled release, {known[-1]}) is used")
    # newer: a later minor series than the newest modelled (0.5.9 is still SGLang 0.5's behaviour)
    if pv < lo or pv[:2] > hi[:2]:  # type: ignore[operator,index]
        near = nearest_modelled(engine, version)
        side = "older" if pv < lo else "newer"  # type: ignore[operator]
        return (f"{engine} {version} is {side} than every modelled release ({', '.join(known)}); its timing "
                f"is simulated as {near}'s, the nearest modelled version")
    return None
