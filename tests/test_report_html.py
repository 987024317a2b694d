"""``report.html`` (sim/results/html_report.py): the report's markdown and figures
in one self-contained page; rendered in a real headless Chromium when one is
installed (``apt-get install chromium``; skipped otherwise)."""

from __future__ import annotations

import base64
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from sim.results.html_report import markdown_to_html, write_html_report


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])  # IHDR width, height


def _inlined_images(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'<img src="data:image/png;base64,([^"]+)"', page)]


@pytest.fixture(scope="module")
def compare_report(tmp_path_factory):
    import servesim

    out = tmp_path_factory.mktemp("cmp")
    c = servesim.compare(["static", "chunked"], workload={"name": "code", "num_requests": 150})
    c.report(out)
    return out


def test_markdown_to_html_inlines_images_and_keeps_links(tmp_path):
    png = tmp_path / "fig.png"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1), dpi=50)
    ax.plot([0, 1], [1, 0])
    fig.savefig(png)
    plt.close(fig)
    md = ("# Title <x>\n\n| a | b |\n|---|---:|\n| 1 | 2 |\n\n![fig](fig.png)\n\n![missing](nope.png)\n\n"
          "[table](comparison.csv) and <script>alert(1)</script>\n")
    page = markdown_to_html(md, tmp_path)
    assert "<title>Title &lt;x&gt;</title>" in page
    assert "<table>" in page and "<td>1</td>" in page and '<td style="text-align:right">2</td>' in page
    assert _inlined_images(page) == [png.read_bytes()]
    assert '<img src="nope.png" alt="missing"' in page  # absent files stay as written
    assert '<a href="comparison.csv">table</a>' in page
    assert "<script>" not in page  # raw HTML in the markdown is escaped, not run


def test_compare_writes_a_self_contained_report_html(compare_report):
    page = (compare_report / "report.html").read_text()
    md = (compare_report / "report.md").read_text()
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", md)
    assert len(figures) == 5
    imgs = _inlined_images(page)
    assert imgs == [(compare_report / f).read_bytes() for f in figures]  # every figure, in order, inlined
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing fetched from elsewhere
    assert "<link" not in page and "<script" not in page
    separators = [ln for ln in md.splitlines() if re.fullmatch(r"\|[\s:|-]+\|", ln.strip())]
    assert page.count("<table>") == len(separators) >= 1  # every markdown table became a table
    assert "<h1>Policy comparison: llama-3.1-8b on h100_sxm</h1>" in page


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


#: appended to a copy of the page: once it has loaded, write each image's state into the DOM
_PROBE = ('<script>window.addEventListener("load",function(){var d=document.createElement("pre");'
          'd.id="servesim-check";d.textContent=JSON.stringify({images:[].slice.call(document.images).map('
          'function(i){return [i.complete,i.naturalWidth,i.naturalHeight,Math.round(i.getBoundingClientRect().width)]}),'
          'tables:document.querySelectorAll("table").length,title:document.title});document.body.appendChild(d);});'
          '</script>')


def render_in_chromium(page: Path, browser: str) -> dict:
    """What headless Chromium made of ``page``: per image (loaded, natural width,
    natural height, laid-out width), the number of tables, the title."""
    probe = page.with_name(page.stem + ".probe.html")
    probe.write_text(page.read_text().replace("</body>", _PROBE + "</body>"))
    try:
        r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
                            "--dump-dom", probe.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    finally:
        probe.unlink()
    m = re.search(r'<pre id="servesim-check">([^<]*)</pre>', r.stdout)
    assert m, f"no probe output from {browser} (status {r.returncode}): {r.stderr[-500:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def test_report_html_renders_with_its_images_in_headless_chromium(compare_report):
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium on this machine (Debian: apt-get install -y chromium)")
    page = compare_report / "report.html"
    seen = render_in_chromium(page, browser)
    sizes = [_png_size(b) for b in _inlined_images(page.read_text())]
    assert len(seen["images"]) == len(sizes) == 5
    for (loaded, w, h, laid_out), (pw, ph) in zip(seen["images"], sizes):
        assert loaded and (w, h) == (pw, ph) and laid_out > 100  # decoded at the PNG's size, and shown
    assert seen["tables"] >= 1
    assert seen["title"] == "Policy comparison: llama-3.1-8b on h100_sxm"


def test_write_html_report_beside_the_markdown(tmp_path):
    (tmp_path / "plan.md").write_text("# Capacity plan: m\n\n- a\n")
    out = write_html_report(tmp_path / "plan.md", tmp_path / "report.html")
    assert out == tmp_path / "report.html" and "<h1>Capacity plan: m</h1>" in out.read_text()
