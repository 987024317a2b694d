"""GPU hardware profiles (:class:`HardwareProfile`) from ``hardware_profiles/*.yaml``.

Every number carries its unit in its name (bytes, bytes/s, FLOP/s, s, USD) and
a ``provenance`` entry (datasheet URL, or the measured table it was fitted to).
Loading validates every field (pydantic v2, unknown keys forbidden; physical
values within the sane ranges below, e.g. peaks 1e8..1e18 FLOP/s); any problem is
a :class:`~sim.errors.ConfigError` naming the file, key and value.

The ``efficiency`` section declares its ``form``. Forms (``sim/hardware/efficiency.py``)
are registered in :data:`EFFICIENCY_FORMS`: ``scalar`` (one compute and one
memory efficiency for every operator) and ``fitted_v1`` (size-dependent
efficiencies per kernel family, fitted by ``calibration`` to measured kernels)
are built in; :func:`register_efficiency_form` adds others.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import (BaseModel, ConfigDict, Field, SerializeAsAny, ValidationError,
                      model_validator)

from sim.hardware.efficiency import (EFFICIENCY_FORMS, OPERATOR_CLASSES, EfficiencyBase,  # noqa: F401
                            FittedEfficiency, ScalarEfficiency, register_efficiency_form)
from sim.errors import ConfigError
from sim.schema import error_text, reject_bool_numbers
from sim.paths import hardware_profiles_dir
from sim.yaml_io import safe_load_unique

#: Compute dtypes a profile may list peaks for.
PEAK_DTYPES = ("bf16", "fp16", "fp8", "int8", "fp4")
#: Top-level fields whose numbers must have a provenance entry.
PROVENANCE_KEYS = ("memory_bytes", "hbm_bandwidth_bytes_per_s", "peak_flops_per_s", "num_sms",
                   "interconnect", "efficiency", "price_per_gpu_hour_usd")

# Sane ranges of the physical values (a profile outside them is an error naming the
# file and key): a value of 1e-300 FLOP/s or B/s passed "> 0" and made step times
# inf/NaN inside the event loop. The floors sit far below any real accelerator
# (and below the CPU profiles ``calibrate`` measures), the ceilings far above.
#: FLOP/s of a dense tensor peak: 100 MFLOP/s .. 1 EFLOP/s (B200 fp4: 9e15)
PEAK_FLOPS_RANGE = (1e8, 1e18)
#: device memory bandwidth, B/s: 100 MB/s .. 1 PB/s (B200: 8e12)
HBM_BANDWIDTH_RANGE = (1e8, 1e15)
#: device memory, bytes: 1 MiB .. 1 PiB (B200: 1.9e11)
MEMORY_BYTES_RANGE = (2 ** 20, 2 ** 50)
#: link bandwidth per GPU and direction, B/s: 1 MB/s .. 100 TB/s (NVLink 5: 9e11)
LINK_BANDWIDTH_RANGE = (1e6, 1e14)
#: SMs / CUs, GPUs per link domain
MAX_UNITS = 100_000
#: fixed costs (latency, launch, per-step overhead), s
MAX_FIXED_COST_S = 1.0
#: USD per GPU-hour
MAX_PRICE_USD = 10_000.0

_Peak = Field(ge=PEAK_FLOPS_RANGE[0], le=PEAK_FLOPS_RANGE[1])


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        """``latency_s: yes`` is a mistake, not 1.0 (as in the efficiency forms)."""
        return reject_bool_numbers(cls, data)


class PeakFlops(_Strict):
    """Dense (no 2:4 sparsity) tensor-core peak, FLOP/s (int8: OP/s)."""
    bf16: float = _Peak
    fp16: float | None = Field(default=None, ge=PEAK_FLOPS_RANGE[0], le=PEAK_FLOPS_RANGE[1])
    fp8: float | None = Field(default=None, ge=PEAK_FLOPS_RANGE[0], le=PEAK_FLOPS_RANGE[1])
    int8: float | None = Field(default=None, ge=PEAK_FLOPS_RANGE[0], le=PEAK_FLOPS_RANGE[1])
    fp4: float | None = Field(default=None, ge=PEAK_FLOPS_RANGE[0], le=PEAK_FLOPS_RANGE[1])

    def get(self, dtype: str) -> float | None:
        """Peak for ``dtype`` or ``None`` if the chip lacks it (fp16 = bf16)."""
        if dtype not in PEAK_DTYPES:
            raise ConfigError(f"peak_flops_per_s: unknown dtype {dtype!r}; valid: {', '.join(PEAK_DTYPES)}")
        value = getattr(self, dtype)
        return self.bf16 if value is None and dtype == "fp16" else value


class Interconnect(_Strict):
    """GPU-to-GPU link used for tensor parallelism."""
    name: str
    #: per GPU, per direction
    bandwidth_bytes_per_s: float = Field(ge=LINK_BANDWIDTH_RANGE[0], le=LINK_BANDWIDTH_RANGE[1])
    latency_s: float = Field(ge=0, le=MAX_FIXED_COST_S)  #: fixed cost of one all-reduce
    #: GPUs this link joins (one node's NVLink / NVSwitch domain, 8 on HGX boards);
    #: tensor parallelism beyond it would cross nodes, which is not modelled
    max_gpus: int = Field(default=8, ge=1, le=MAX_UNITS)


class Network(_Strict):
    """The scale-out network between nodes, per GPU: each GPU's own NIC (rail-
    optimised HGX/DGX nodes have one per GPU, e.g. ConnectX-7 400 Gb/s on DGX
    H100). Used by disaggregated serving's KV transfer between nodes
    (``sim/engine/kv_transfer.py``)."""
    name: str
    #: per GPU, per direction
    bandwidth_bytes_per_s: float = Field(ge=LINK_BANDWIDTH_RANGE[0], le=LINK_BANDWIDTH_RANGE[1])
    latency_s: float = Field(ge=0, le=MAX_FIXED_COST_S)  #: one-way latency of a transfer (RDMA)


class HardwareProfile(_Strict):
    """One GPU. ``memory_bytes`` is the device memory CUDA reports as total
    (what vLLM multiplies by ``gpu_memory_utilization``)."""
    name: str
    description: str = ""
    memory_bytes: int = Field(ge=MEMORY_BYTES_RANGE[0], le=MEMORY_BYTES_RANGE[1])
    hbm_bandwidth_bytes_per_s: float = Field(ge=HBM_BANDWIDTH_RANGE[0], le=HBM_BANDWIDTH_RANGE[1])
    peak_flops_per_s: PeakFlops
    num_sms: int = Field(ge=1, le=MAX_UNITS)  #: SMs (NVIDIA) or CUs (AMD)
    interconnect: Interconnect
    #: per-GPU NIC to other nodes (optional: needed only by disaggregated serving across nodes)
    network: Network | None = None
    efficiency: SerializeAsAny[EfficiencyBase]
    price_per_gpu_hour_usd: float = Field(ge=0, le=MAX_PRICE_USD)
    #: key -> its source; ``efficiency_families`` (written by ``calibration``): family -> its fit
    provenance: dict[str, str | dict[str, str]]

    @property
    def transferred_from(self) -> str | None:
        """The profile whose kernel efficiencies this one was given
        (``calibration.transfer``: ``efficiency_source`` "transferred from X ..."),
        or None where they were fitted on this GPU."""
        src = str((self.provenance or {}).get("efficiency_source", ""))
        if not src.lower().startswith("transferred from "):
            return None
        return src[len("transferred from "):].split(" ", 1)[0].split(";", 1)[0] or None

    def tensor_parallel_nodes(self, tp: int) -> int:
        """NVLink domains a tensor-parallel group of ``tp`` GPUs spans: 1 inside one
        domain; beyond it, whole domains joined by each GPU's NIC (``network``), as
        multi-node TP runs (SGLang's two-node DeepSeek recipe ``--tp 16 --nnodes 2``;
        NCCL's all-reduce then goes hierarchical: NVLink inside, the NICs between).
        ConfigError when the profile has no network or ``tp`` is no multiple of a domain."""
        g = self.interconnect.max_gpus
        if tp <= g:
            return 1
        if self.network is None or tp % g:
            why = ("the profile has no 'network' section (per-GPU NIC) to join nodes" if self.network is None
                   else f"{tp} is not a whole number of {g}-GPU domains")
            raise ConfigError(f"tensor_parallel_size {tp}: more GPUs than one {self.name} node's "
                              f"{self.interconnect.name} joins ({g}), and {why}: use more replicas or data "
                              "parallelism, or a profile whose interconnect.max_gpus covers it")
        return tp // g

    @model_validator(mode="before")
    @classmethod
    def _dispatch_efficiency(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("efficiency"), dict):
            eff = data["efficiency"]
            form = eff.get("form")
            if form not in EFFICIENCY_FORMS:
                raise ValueError(f"efficiency.form={form!r}: unknown form; valid: "
                                 f"{', '.join(EFFICIENCY_FORMS)}")
            try:
                data = {**data, "efficiency": EFFICIENCY_FORMS[form].model_validate(eff)}
            except ValidationError as e:  # the locations are relative to the form: prefix them
                raise ValidationError.from_exception_data(e.title, [
                    {"type": err["type"], "loc": ("efficiency", *err["loc"]), "input": err["input"],
                     **({"ctx": err["ctx"]} if "ctx" in err else {})} for err in e.errors()]) from None
        return data

    @model_validator(mode="after")
    def _check_provenance(self) -> HardwareProfile:
        missing = [k for k in PROVENANCE_KEYS if not self.provenance.get(k)]
        if self.network is not None and not self.provenance.get("network"):
            missing.append("network")
        if missing:
            raise ValueError(f"provenance: missing source for {', '.join(missing)}")
        return self

    def with_overrides(self, overrides: dict[str, Any], source: str = "<overrides>") -> HardwareProfile:
        """A copy with dotted keys replaced (e.g. ``price_per_gpu_hour_usd``,
        ``efficiency.step_overhead_s``), validated like a file."""
        data = self.model_dump()
        for key, value in overrides.items():
            node = data
            parts = key.split(".")
            for part in parts[:-1]:
                if not isinstance(node.get(part), dict):
                    raise ConfigError(f"{source}: {key}: unknown hardware key (value {value!r})")
                node = node[part]
            if parts[-1] not in node:
                raise ConfigError(f"{source}: {key}: unknown hardware key (value {value!r})")
            node[parts[-1]] = value
        return _validate(data, source)


def _validate(data: Any, source: str) -> HardwareProfile:
    if data is None:
        raise ConfigError(f"{source}: the file is empty; a hardware profile needs its fields "
                          "(see hardware_profiles/h100_sxm.yaml)")
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of hardware fields, got {type(data).__name__}")
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as e:
        msgs = []
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))
            msg = error_text(err)
            if err["type"] == "extra_forbidden":
                msg = "unknown key (misspelt?)"
            value = err.get("input")
            shown = "" if isinstance(value, dict) else f" (value {value!r})"
            msgs.append(f"{loc or '<root>'}: {msg}{shown}")
        raise ConfigError(f"{source}: invalid hardware profile: " + "; ".join(msgs)) from None


#: validated profiles by (path, text): a profile is parsed once per process however
#: many deployments use it (``servesim validate`` builds two per row); profiles are
#: frozen, and an edited file is parsed again.
_LOADED: dict[tuple[str, str], HardwareProfile] = {}


def load_hardware(path: str | Path) -> HardwareProfile:
    """Load and validate one profile YAML (parsed once per content)."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read hardware profile: {e}") from e
    key = (str(path), text)
    hw = _LOADED.get(key)
    if hw is None:
        hw = _LOADED[key] = _parse_hardware(path, text)
    return hw


def _parse_hardware(path: Path, text: str) -> HardwareProfile:
    try:
        data = safe_load_unique(text)  # a key given twice is an error
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark else ""
        raise ConfigError(f"{path}:{where} cannot read hardware profile: {getattr(e, 'problem', None) or e}") from None
    return _validate(data, str(path))


def list_hardware() -> list[str]:
    """Names of the built-in profiles (``hardware_profiles/*.yaml``)."""
    d = hardware_profiles_dir()
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def get_hardware(name_or_path: str | Path) -> HardwareProfile:
    """A built-in profile by name (``h100_sxm``) or a YAML path."""
    text = str(name_or_path)
    builtin = hardware_profiles_dir() / f"{text}.yaml"
    if "/" not in text and builtin.is_file():
        return load_hardware(builtin)
    path = Path(text)
    if path.is_file():
        return load_hardware(path)
    raise ConfigError(f"hardware: unknown hardware {text!r} (not a profile name or YAML path); "
                      f"profiles: {', '.join(list_hardware())}")
