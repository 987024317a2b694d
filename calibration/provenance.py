"""The provenance of a fitted profile's kernel efficiencies: flat, per family.

    provenance:
      efficiency: short summary (form, last fit date, the families refitted last,
        elementwise kernels, the step_overhead_s note)
      efficiency_families:           # one entry per family calibration fits
        gemm.bf16: '2026-11-30: tables in ../shared/kernels/h100_sxm (vllm-0.24.0_gemm.csv.gz);
          in-sample median APE 5.5 % MAPE 7.4 % (n=35742)'
        moe.bf16: '2026-12-05: tables in ...'
      efficiency_source: tables in ../shared/kernels/h100_sxm (file, file, ...)   # every table used
      efficiency_fit_error: 'gemm.bf16 median APE 5.5 % MAPE 7.4 % (n=35742); ...'  # each family once

A partial refit (``python -m calibration --families ...``) replaces the entries of
the families it refits and keeps the others verbatim, so the texts stay flat
however many refits follow one another. The helpers here also read the older,
nested texts (``... families not refitted: <previous efficiency_source>``,
``other families as fitted before: ...``) so a profile written before this form
can still be refitted.
"""

from __future__ import annotations

import re

from calibration.tables import table_kind

#: ``tables in <folder> (<file>, <file>)``: one group of an ``efficiency_source``
_TABLES = re.compile(r"tables in ([^;()]+?) \(([^()]*)\)")
#: the efficiency_fit_error's closing remark for fits to tables
HELD_OUT_NOTE = ("in-sample; errors on held-out shapes: benchmarks/calibration_accuracy.py, "
                 "reports/calibration/README.md")


def tables_source(directory: object, files: list[str] | set[str]) -> str:
    """``tables in <directory> (<files, sorted, once each>)``."""
    return f"tables in {directory} ({', '.join(sorted(set(files)))})"


def merge_sources(*texts: str) -> str:
    """One flat ``efficiency_source`` from several: the ``tables in <folder> (...)``
    groups merged per folder (each file once, sorted), any other part (``live
    microbenchmarks on ...``, ``transferred from <gpu>``) kept once; parts in the
    order first seen, joined by ``; ``. Older nested texts (``...; families not
    refitted: tables in ...``) come out flat."""
    order: list[tuple[str, str]] = []
    tables: dict[str, set[str]] = {}
    for text in texts:
        for part in (text or "").split("; "):
            part = part.strip().removeprefix("families not refitted: ").strip()
            groups = _TABLES.findall(part)
            if not groups and part and ("other", part) not in order:
                order.append(("other", part))
            for folder, files in groups:
                if folder not in tables:
                    tables[folder] = set()
                    order.append(("tables", folder))
                tables[folder] |= {f.strip() for f in files.split(",") if f.strip()}
    return "; ".join(tables_source(key, tables[key]) if kind == "tables" else key for kind, key in order)


#: the kind of table (``calibration.tables.table_kind``) each family is fitted to
_FAMILY_KIND = {"gemm": "gemm", "moe": "moe", "context_attention": "context_attention",
                "generation_attention": "generation_attention", "all_reduce": "nccl",
                "mla": "mla_module", "gdn": "gdn"}


def family_source(source: str, family: str) -> str:
    """Of an ``efficiency_source`` text, the tables of ``family``'s kind
    (``gemm.fp8`` -> the ``*_gemm`` tables, ``all_reduce`` -> ``nccl_*``); the
    whole text, flat (:func:`merge_sources`), where it names none."""
    kind = _FAMILY_KIND.get(family.split(".", 1)[0])
    flat = merge_sources(source)
    groups = [(folder, [f.strip() for f in files.split(",") if table_kind(f.strip()) == kind])
              for folder, files in _TABLES.findall(flat)]
    return "; ".join(tables_source(folder, files) for folder, files in groups if files) or flat


def score_text(n: int, mape: float, median: float) -> str:
    """``median APE 6.9 % MAPE 9.4 % (n=5400)``: a family's in-sample error."""
    return f"median APE {median:.1f} % MAPE {mape:.1f} % (n={n})"


def family_entry(date: str, source: str, error: str | None) -> str:
    """An ``efficiency_families`` entry: ``<date>: <source>; in-sample <error>``."""
    return f"{date}: {source}" + (f"; in-sample {error}" if error else "; in-sample error not recorded")


def family_errors(text: str) -> dict[str, str]:
    """family -> its error (``median APE ...``) from an ``efficiency_fit_error``
    text, the first one named for a family (this form or the older nested one)."""
    text = re.sub(r"\s*\(in-sample[^)]*\)", "", text or "")
    out: dict[str, str] = {}
    for part in text.replace("other families as fitted before: ", "").split("; "):
        fam, _, rest = part.strip().partition(" ")
        if rest.startswith("median APE") and fam not in out:
            out[fam] = rest
    return out


def fit_error_text(errors: dict[str, str], note: str) -> str:
    """``<family> <error>; ...`` (each family once) and ``(<note>)``."""
    body = "; ".join(f"{fam} {err}" for fam, err in errors.items()) or "none recorded"
    return f"{body} ({note})"


def step_overhead_note(efficiency_text: str) -> str | None:
    """The ``step_overhead_s ...`` remark of an ``efficiency`` text (its first,
    up to the next ``;``), without the closing parentheses an older nested text
    left after it; None if there is none."""
    m = re.search(r"step_overhead_s[^;]*", efficiency_text or "")
    if m is None:
        return None
    note = m.group(0).strip()
    while note.endswith(")") and note.count(")") > note.count("("):
        note = note[:-1].rstrip()
    return note


def merge_versions(*texts: str) -> str:
    """Flat union of ``efficiency_versions`` texts (``; ``-separated parts, each
    once; ``not recorded`` only when nothing else is)."""
    parts: list[str] = []
    for text in texts:
        for p in (text or "").split("; "):
            p = p.strip()
            if p and p not in parts:
                parts.append(p)
    known = [p for p in parts if p != "not recorded"]
    return "; ".join(known) or "not recorded"
