"""Engine flags on the command line: every config key as vLLM's kebab-case flag
(``--max-num-seqs 256``, ``--enable-prefix-caching`` / ``--no-enable-prefix-caching``)
and the aliases of :mod:`sim.vocabulary` (``--num-prompts``, ``--max-running-requests``,
``--max_batch_size``, ``-tp``), on ``run``, ``compare``, ``plan`` and ``kv``.

:class:`VocabCommand` (a typer command class) rewrites those flags as ``--set
--FLAG=VALUE`` before click parses the arguments, so they merge, conflict and
fail exactly as ``--set`` does, with the flag named in the message."""

from __future__ import annotations

from typing import Optional

import typer
import typer.core

from sim.errors import ConfigError


FLAGS_EPILOG = ("Engine flags: every config key also as a flag in vLLM's kebab case (--engine "
                "vllm|sglang|trtllm for that engine's defaults, --quantization fp8, --kv-cache-dtype fp8, "
                "--max-num-seqs 256, "
                "--max-num-batched-tokens 2048, --enable-prefix-caching / --no-enable-prefix-caching, "
                "--tensor-parallel-size/-tp, --scheduling-policy, --async-scheduling, --data-parallel-size), "
                "vllm bench serve's --num-prompts, --request-rate, --burstiness, --max-concurrency, and the "
                "SGLang / TensorRT-LLM names (--max-running-requests, --mem-fraction-static, --max_batch_size, "
                "...): `servesim flags` lists them all.")


def native_options(command) -> dict[str, bool]:
    """A click command's own option names → whether each takes a value."""
    out: dict[str, bool] = {}
    for p in command.params:
        if getattr(p, "param_type_name", None) == "option":  # (typer may vendor its own click)
            for o in (*p.opts, *p.secondary_opts):
                out[o] = not p.is_flag and not p.count
    return out


class VocabCommand(typer.core.TyperCommand):
    """A typer command that also takes the engine vocabulary's flags."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        from sim.config import config_keys
        from sim.vocabulary import flag_args_to_set

        if "--help" not in args:  # (a bad flag value raises ConfigError: main prints it as one line)
            args = flag_args_to_set(list(args), native_options(self), config_keys())
        return super().parse_args(ctx, args)


def flags(
    engine: Optional[str] = typer.Option(None, help="Also list the values this engine's preset fills "
                                         "(vllm, sglang, trtllm), each with its source."),
    engine_version: Optional[str] = typer.Option(None, help="With --engine: that engine release's values "
                                                 "(default: the preset's newest modelled release)."),
) -> None:
    """List every engine flag and alias: servesim's keys in kebab case, and the vLLM,
    vllm bench serve, SGLang and TensorRT-LLM names (with the key each sets). With
    --engine, the values that engine's preset fills at --engine-version, and where
    each comes from."""
    from sim.config import SimConfig, config_keys
    from sim.vocabulary import ALIASES, kebab

    if engine_version is not None and not engine_version.strip():
        raise ConfigError("--engine-version: no value; give one (e.g. --engine-version 0.12.0), or leave it out "
                          "for the preset's newest modelled release")
    if engine_version is not None and engine is None:
        raise ConfigError(f"--engine-version {engine_version} needs --engine (the release of which engine)")
    typer_echo = typer.echo
    if engine is not None:
        _echo_preset(engine, engine_version)
        return
    typer_echo("servesim's keys (YAML: snake or kebab case; flags: --KEY VALUE, booleans --KEY / --no-KEY), "
               "with their values where a key takes a fixed set, and their default (a preset given with "
               "--engine fills the keys it sets: `servesim flags --engine NAME` lists them with their sources):")
    for k, is_bool in config_keys().items():
        f = SimConfig.model_fields[k]
        choices = _choices(f.annotation)
        flag = f"--{kebab(k)}" + (f" / --no-{kebab(k)}" if is_bool else
                                  f" {{{','.join(choices)}}}" if choices else " VALUE")
        default = "" if f.is_required() else "unset by default" if f.default is None else f"default {f.default!r}"
        typer_echo(f"  {flag:<44} {k}" + (f" ({default})" if default else ""))
    typer_echo("\naliases (an alias never changes the meaning: see `requires`):")
    for a in ALIASES:
        names = ", ".join(dict.fromkeys(a.flag_names()))
        req = "; ".join(f"only where {k} is {' or '.join(map(str, v))}" for k, v in a.requires.items())
        typer_echo(f"  {names:<44} {a.key:<28} {a.engine}: {a.note}" + (f" ({req})" if req else ""))


def _echo_preset(engine: str, version: str | None) -> None:
    """The values ``engine``'s preset fills at ``version``, with their sources."""
    from sim.presets import PRESETS, preset_values, version_warning
    from sim.presets.versions import simulated_release

    if engine not in PRESETS:
        raise ConfigError(f"--engine: unknown engine {engine!r}; valid: {', '.join(PRESETS)}")
    newest = simulated_release(engine, None)
    typer.echo(f"engine {engine}, release {version or f'{newest} (the newest modelled; --engine-version X for another)'}"
               ": the keys its preset fills (explicit keys always win), each value with its source")
    w = version_warning(engine, version)
    if w:
        typer.echo(f"warning: {w}")
    for r in preset_values(engine, version):
        typer.echo(f"  {r['key']} = {r['value']}\n      {r['source']}")


def _choices(annotation) -> list[str]:
    """The values a ``Literal`` config field (or an optional one) takes, as text; [] otherwise."""
    from typing import Literal, Union, get_args, get_origin

    if get_origin(annotation) is Literal:
        return [str(a) for a in get_args(annotation)]
    if get_origin(annotation) is Union or type(annotation).__name__ == "UnionType":
        return [c for a in get_args(annotation) for c in _choices(a)]
    return []
