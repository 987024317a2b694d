"""The import direction of ``../shared/DESIGN.md`` ("Layout"), enforced.

Every ``sim`` module's imports (at module level and deferred into functions)
may go only to its own layer or a lower one, and the modules import each other
without a cycle. Only ``sim/engine`` imports simpy; torch only ``calibration``;
the simulation core never imports pandas, matplotlib or the CLI. The
``servesim`` package (the Python facade) is the top layer, above ``sim``: it
only composes ``sim``'s config, runner and jobs, and nothing in ``sim`` or
``calibration`` imports it. The optional dependencies (extras) are imported
only inside the functions that need them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SIM = ROOT / "sim"

#: lowest first; a package (or top-level module) of ``sim`` per entry
LAYERS = [
    {"__init__", "errors", "paths", "schema", "yaml_io"},
    {"request", "model_spec", "hardware", "presets", "vocabulary"},
    {"workload", "config", "disaggregation", "launch"},
    {"cost_model", "kv_cache"},
    {"scheduler", "results"},
    {"engine"},
    {"accelerated"},
    {"runner"},
    {"compare", "sweep", "validate"},
    {"cli", "__main__"},
]
LAYER = {part: i for i, layer in enumerate(LAYERS) for part in layer}
#: the simulation core: no pandas, matplotlib, rich or torch in its import graph
#: (``workload`` may read traces with pandas: that is before the run, not on its hot path)
CORE = {"request", "model_spec", "hardware", "presets", "config", "cost_model", "kv_cache",
        "scheduler", "engine", "accelerated"}


def _modules() -> dict[str, Path]:
    out = {}
    for p in SIM.rglob("*.py"):
        parts = p.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 2:
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _imports(path: Path) -> list[tuple[str, int]]:
    """(imported module, line) of every import in ``path``; ``from sim.x import y``
    counts as ``sim.x.y`` where that is a module, else ``sim.x``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.append((full if full in MODULES else node.module, node.lineno))
        elif isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno) for alias in node.names)
    return out


def _part(module: str) -> str:
    """The layer entry of a ``sim`` module: its package under ``sim`` or its own name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_sim_module_is_in_a_layer():
    missing = sorted({_part(m) for m in MODULES} - set(LAYER))
    assert not missing, f"add these to LAYERS in {__file__}: {missing}"


def test_imports_go_only_to_the_same_or_a_lower_layer():
    bad = []
    for mod, path in sorted(MODULES.items()):
        for target, line in _imports(path):
            if target != "sim" and not target.startswith("sim."):
                continue
            a, b = _part(mod), _part(target)
            if LAYER[b] > LAYER[a]:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {a} (layer {LAYER[a]}) imports {target} "
                           f"(layer {LAYER[b]})")
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_no_import_cycles():
    graph = {m: sorted({t for t, _ in _imports(p) if t in MODULES and t != m}) for m, p in MODULES.items()}
    # a package's __init__ is imported before its modules: an edge to each of them
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in graph[m]:
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state and (cycle := visit(t)):
                return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (cycle := visit(m)):
            pytest.fail("import cycle: " + " -> ".join(cycle))


@pytest.mark.parametrize("library, allowed", [
    ("simpy", {"engine"}),
    ("torch", set()),
])
def test_only_its_own_package_imports(library, allowed):
    users = sorted({_part(m) for m, p in MODULES.items()
                    for t, _ in _imports(p) if t == library or t.startswith(library + ".")})
    assert set(users) <= allowed, f"{library} imported by sim packages {users}; allowed: {sorted(allowed)}"


def test_the_simulation_core_stays_off_reporting_libraries():
    heavy = ("pandas", "matplotlib", "rich", "typer", "tqdm", "torch", "pyarrow")
    bad = [f"{m}: {t}" for m, p in sorted(MODULES.items()) if _part(m) in CORE
           for t, _ in _imports(p) if t.split(".")[0] in heavy]
    assert not bad, "the simulation core imports reporting/CLI libraries:\n" + "\n".join(bad)


FACADE = ROOT / "servesim"


def test_servesim_facade_is_the_top_layer():
    """``servesim`` imports ``sim`` (any layer); ``sim`` and ``calibration`` never import ``servesim``."""
    below = [p for d in (SIM, ROOT / "calibration") for p in d.rglob("*.py")]
    bad = [f"{p.relative_to(ROOT)}:{line}: imports {t}" for p in below for t, line in _imports(p)
           if t == "servesim" or t.startswith("servesim.")]
    assert not bad, "the facade must stay on top:\n" + "\n".join(bad)
    used = {t.split(".")[0] for p in FACADE.rglob("*.py") for t, _ in _imports(p)}
    assert "sim" in used and not used & {"simpy", "torch", "scipy", "pyarrow", "ray"}, used


@pytest.mark.parametrize("library, extra", [("scipy", "calibration"), ("torch", "calibration"),
                                            ("pyarrow", "parquet"), ("ray", "ray")])
def test_optional_dependencies_are_imported_lazily(library, extra):
    """An extra's library is imported inside a function (never at module level), so
    servesim runs without it; the command that needs it says which extra to install."""
    bad = []
    for d in (SIM, ROOT / "calibration", FACADE):
        for p in d.rglob("*.py"):
            tree = ast.parse(p.read_text(), str(p))
            for node in tree.body:  # module level only
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                if any(n == library or n.startswith(library + ".") for n in names):
                    bad.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert not bad, f"{library} (extra [{extra}]) imported at module level: {bad}"


def test_policies_do_not_know_the_accelerated_stepping():
    """Acceleration is injected by the runner, never inherited: no scheduler
    module mentions it, and a policy subclass runs in the reference mode unless
    it declares ``accelerate_like`` itself."""
    from sim.accelerated.policies import decode_runs_for
    from sim.kv_cache import make_kv_cache_manager
    from sim.scheduler import ChunkedPrefillScheduler, SchedulerLimits

    for p in (SIM / "scheduler").glob("*.py"):
        assert "accelerat" not in p.read_text().lower(), p

    class ShortestPromptFirst(ChunkedPrefillScheduler):
        pass

    class Declared(ChunkedPrefillScheduler):
        accelerate_like = ChunkedPrefillScheduler

    class Inherits(Declared):
        pass

    limits = SchedulerLimits(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=128, block_size=16)
    kv = make_kv_cache_manager("paged", 16, 16, enable_prefix_caching=False, max_model_len=128)
    assert decode_runs_for(ChunkedPrefillScheduler(limits, kv)) is not None
    assert decode_runs_for(ShortestPromptFirst(limits, kv)) is None
    assert decode_runs_for(Declared(limits, kv)) is not None
    assert decode_runs_for(Inherits(limits, kv)) is None
