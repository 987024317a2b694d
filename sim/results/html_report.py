"""``report.html``: a report's markdown and figures in one self-contained page.

The markdown is rendered by markdown-it-py (CommonMark plus GFM tables); every
image it references that exists beside the markdown file is inlined as a
base64 ``data:`` URI, so the page can be mailed or attached alone. Links to
other files (``comparison.csv``) stay relative. No script, no external
stylesheet or font.
"""

from __future__ import annotations

import base64
import html
import mimetypes
from pathlib import Path

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; max-width: 1100px;
       margin: 2em auto; padding: 0 1em; line-height: 1.45; color: #1b1b1b; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
thead { background: #f3f3f3; }
img { max-width: 100%; height: auto; }
code { background: #f5f5f5; padding: 0 0.2em; }
pre { background: #f5f5f5; padding: 0.6em; overflow-x: auto; }
"""


def _data_uri(path: Path) -> str:
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def markdown_to_html(text: str, base_dir: str | Path, title: str | None = None) -> str:
    """A whole HTML page from ``text`` (markdown); images relative to
    ``base_dir`` inlined."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(text)
    base = Path(base_dir)
    for tok in tokens:
        for child in tok.children or ():
            if child.type != "image":
                continue
            src = str(child.attrGet("src") or "")
            p = base / src
            if src and "://" not in src and not src.startswith("data:") and p.is_file():
                child.attrSet("src", _data_uri(p))
    body = md.renderer.render(tokens, md.options, {})
    if title is None:
        heads = [t for t in text.splitlines() if t.startswith("# ")]
        title = heads[0][2:].strip() if heads else "servesim report"
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n{body}</body>\n</html>\n")


def write_html_report(markdown_path: str | Path, html_path: str | Path | None = None) -> Path:
    """Render ``markdown_path`` (e.g. ``report.md``) into ``html_path`` (default:
    the same name with ``.html``) beside it; returns the written path."""
    src = Path(markdown_path)
    dst = Path(html_path) if html_path is not None else src.with_suffix(".html")
    dst.write_text(markdown_to_html(src.read_text(encoding="utf-8"), src.parent), encoding="utf-8")
    return dst
