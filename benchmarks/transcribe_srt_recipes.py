"""Transcribe srt-slurm recipe files into ``sim/validate/data/srt_slurm_recipes.yaml``'s
form (that file's header says what is transcribed and why), from a local clone of
the fork that keeps the harness's branch history (github.com/csahithi/srt-slurm).

For each recipe path: the versions of the file on the first-parent history of the
branch head (``--head``, the sa-submission-q1-2026 head of 2026-02-12), reduced to
the values transcribed; the newest one is printed with its ``url`` (the commit at
which the file got those values) and ``live`` days: from its first whole day (UTC;
the creation day of a new file) to ``--live-end`` (the rebase day), provided the
file has the same transcribed values at ``--check`` (NVIDIA/srt-slurm's squash-merge
of the branch into main, which the header uses to know the branch between the head
and the rebase); else the path is reported and skipped. ``--verify`` instead
compares the transcription of every path already in the data file with its entry
and prints the differences: of values (none expected: exit status 1) and of the cited
commit or live days (the tool cites the first commit with the file's current values
and reads a frontend section added later as a change, so it can start later).

    python benchmarks/transcribe_srt_recipes.py --repo /path/to/csahithi-srt-slurm \\
        recipes/trtllm/gb200-fp8/1k8k/stp/ctx1_gen4_tep8_batch1_eplb0_mtp0_4.yaml ...
    python benchmarks/transcribe_srt_recipes.py --repo /path/to/csahithi-srt-slurm --verify
"""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO / "sim" / "validate" / "data" / "srt_slurm_recipes.yaml"
URL = "https://github.com/csahithi/srt-slurm/blob/{commit}/{path}"

def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def modelled_options(fmt: str) -> tuple[str, ...]:
    """The options of one pool that ``sim/validate/disagg_rows.py`` reads (nested
    TensorRT-LLM options as dotted paths): its parallelism, speculative-decoding, KV
    dtype and overlap names (``SRT_FORMATS``), its flags, the decode server's streaming,
    TensorRT-LLM's expert slots, SGLang's decode-server disaggregation flags."""
    from sim.validate.disagg_rows import SGLANG_DISAGG_FLAGS, SRT_FORMATS, TRTLLM_NUM_SLOTS

    names = SRT_FORMATS[fmt]
    out = [names[k] for k in ("tp", "ep", "dp_attn", "dp", "pp", "spec", "kv_dtype", "no_overlap") if names[k]]
    out += [*names["flags"], *names["stream"]]
    out += [TRTLLM_NUM_SLOTS] if fmt == "trtllm" else [*SGLANG_DISAGG_FLAGS]
    return tuple(dict.fromkeys(out))


#: SGLang's short flag names, transcribed under the long ones
SGLANG_ALIASES = {"tp-size": "tensor-parallel-size", "dp-size": "data-parallel-size", "ep-size": "expert-parallel-size",
                  "pp-size": "pipeline-parallel-size"}


def _pool(fmt: str, cfg: dict) -> dict:
    """One pool's modelled options (:func:`modelled_options`), nested as in the file; a
    pipeline-parallel size of 1 left out (it changes nothing)."""
    from sim.validate.disagg_rows import SRT_FORMATS, _opt

    if fmt == "sglang":
        cfg = {SGLANG_ALIASES.get(k, k): v for k, v in cfg.items()}
    out: dict = {}
    for path in modelled_options(fmt):
        v = _opt(cfg, path)
        if v is None or (path == SRT_FORMATS[fmt]["pp"] and int(v) <= 1):
            continue
        *parents, leaf = path.split(".")
        d = out
        for part in parents:
            d = d.setdefault(part, {})
        d[leaf] = v
    return out


def transcribe(text: str) -> dict:
    """The transcribed values of one recipe file's text (the data file's entry without url/live)."""
    doc = yaml.safe_load(text)
    res, backend = doc["resources"], doc.get("backend") or {}
    if "trtllm_config" in backend:
        fmt, pools = "trtllm", backend["trtllm_config"]
    elif "sglang_config" in backend:
        fmt, pools = "sglang", backend["sglang_config"]
    else:
        raise ValueError("neither trtllm_config nor sglang_config under backend")
    out = {"format": fmt, "prefill_workers": int(res["prefill_workers"]), "decode_workers": int(res["decode_workers"]),
           "nodes": [int(res["prefill_nodes"]), int(res["decode_nodes"])]}
    fe = {k: doc["frontend"][k] for k in ("enable_multiple_frontends", "num_additional_frontends")
          if isinstance(doc.get("frontend"), dict) and k in doc["frontend"]}
    if fe:
        out["frontend"] = fe
    out["prefill"], out["decode"] = _pool(fmt, pools["prefill"]), _pool(fmt, pools["decode"])
    return out


def versions(repo: Path, head: str, path: str) -> list[tuple[str, dt.datetime, bool]]:
    """(commit, commit time UTC, file created there) of every first-parent change, oldest first."""
    log = git(repo, "log", "--first-parent", "--format=%H %cI", "--name-status", head, "--", path)
    out, commit, when = [], None, None
    for line in log.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) == 2 and len(parts[0]) == 40:
            commit, when = parts[0], dt.datetime.fromisoformat(parts[1]).astimezone(dt.timezone.utc)
        elif commit is not None:
            out.append((commit, when, parts[0].startswith("A")))
    return out[::-1]


def entry(repo: Path, head: str, check: str, live_end: str, path: str) -> dict:
    """The data file's entry for ``path`` (ValueError naming why not)."""
    vs = versions(repo, head, path)
    if not vs:
        raise ValueError(f"{path}: not on the first-parent history of {head}")
    values = [(c, t, new, transcribe(git(repo, "show", f"{c}:{path}"))) for c, t, new in vs]
    # the newest version's values and the first commit from which the file held them
    k = len(values) - 1
    while k > 0 and values[k - 1][3] == values[-1][3]:
        k -= 1
    commit, when, new, got = values[k]
    first = when.date() if new else when.date() + dt.timedelta(days=1)
    try:
        later = transcribe(git(repo, "show", f"{check}:{path}"))
    except subprocess.CalledProcessError:
        raise ValueError(f"{path}: absent at {check}") from None
    if later != got:
        raise ValueError(f"{path}: its values at {check} differ from those at the head: live end unknown")
    return {"format": got["format"], "url": URL.format(commit=commit, path=path),
            "live": [first.isoformat(), live_end], **got}


def _meaning(v):
    """A pool's options as modelled (an attention-DP switch set false means what its absence does)."""
    if isinstance(v, dict):
        return {k: x for k, x in v.items() if not (k in ("enable-dp-attention", "enable_attention_dp") and x is False)}
    return v


def dump(path: str, e: dict) -> str:
    """The entry in the data file's style (one flow mapping per pool)."""
    def flow(d):
        return yaml.safe_dump(d, default_flow_style=True, sort_keys=False, width=110).strip()
    lines = [f"  {path}:", f"    format: {e['format']}", f"    url: {e['url']}",
             f"    live: ['{e['live'][0]}', '{e['live'][1]}']",
             f"    prefill_workers: {e['prefill_workers']}", f"    decode_workers: {e['decode_workers']}",
             f"    nodes: [{e['nodes'][0]}, {e['nodes'][1]}]"]
    if "frontend" in e:
        lines.append(f"    frontend: {flow(e['frontend'])}")
    for p in ("prefill", "decode"):
        body = flow(e[p]).replace("\n", "\n" + " " * (len(p) + 6))
        lines.append(f"    {p}: {body}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", help="recipe paths (recipes/...) to transcribe")
    ap.add_argument("--repo", required=True, type=Path, help="a clone of github.com/csahithi/srt-slurm")
    ap.add_argument("--head", default="b92b1f60608b", help="the branch head read (default: 2026-02-12's)")
    ap.add_argument("--check", default="5063eb432640",
                    help="a later commit the values must match to be live to --live-end (default: NVIDIA/srt-slurm's "
                         "squash-merge of the branch, 2026-03-03)")
    ap.add_argument("--live-end", default="2026-03-24", help="the last live day (default: the branch's rebase)")
    ap.add_argument("--verify", action="store_true", help="compare every transcribed entry with the data file")
    a = ap.parse_args(argv)
    if a.verify:
        have = yaml.safe_load(DATA.read_text())["recipes"]
        bad = 0
        for path, old in have.items():
            try:
                new = entry(a.repo, a.head, a.check, a.live_end, path)
            except ValueError as e:
                print(f"{path}: {e}")
                bad += 1
                continue
            diff = {k: (old.get(k), new.get(k)) for k in set(old) | set(new)
                    if _meaning(old.get(k)) != _meaning(new.get(k))}
            dated = {k: diff.pop(k) for k in ("url", "live") if k in diff}
            if diff:
                bad += 1
                print(f"{path}: values differ: {diff}")
            elif dated:  # e.g. a frontend section added later with the count the defaults gave
                print(f"{path}: same values; cited commit or live days differ (data file, tool): {dated}")
        print(f"{len(have)} entries, {bad} with different values")
        return 1 if bad else 0
    status = 0
    for path in a.paths:
        try:
            print(dump(path, entry(a.repo, a.head, a.check, a.live_end, path)))
        except ValueError as e:
            print(f"# skipped: {e}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
