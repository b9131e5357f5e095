"""The interactive head view: a self-contained page, checked in a real headless browser (Chromium)."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import run_script
from mha_project.attention.head_view import asset, decode_weights, encode_weights, head_view_html


def synthetic(n_tokens: int, heads: int = 4, layers: int = 2, seed: int = 0, texts: int = 1) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {
            "text": f"text {t}",
            "tokens": [f"w{i}" for i in range(n_tokens)],
            "scores": [rng.dirichlet(np.full(n_tokens, 0.05), size=(heads, n_tokens)) for _ in range(layers)],
            "caption": "synthetic",
        }
        for t in range(texts)
    ]


def test_weights_survive_the_one_byte_encoding():
    w = np.random.default_rng(0).dirichlet(np.ones(64), size=(2, 64))
    back = decode_weights(encode_weights(w), w.shape)
    assert np.abs(back - w).max() < 0.004  # sqrt scaling: small weights keep their precision
    assert np.abs(back - w)[w < 0.01].max() < 0.0008


def test_page_is_self_contained_and_its_data_cannot_close_the_script():
    items = synthetic(10, texts=2)
    items[1]["tokens"][3] = "</script><script>alert(1)</script>"
    page = head_view_html(items, title="<b>probe</b>")
    assert not re.search(r"https?://", page)  # no fetches: it works offline and inside a zip
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)
    assert page.count("</script>") == 1 and "<b>probe</b>" not in page
    data = json.loads(page.split("mountHeadView(document.body, ", 1)[1].split(", { minWeight:", 1)[0])
    assert [d["heads"] for d in data] == [4, 4] and len(data[0]["layers"]) == 2
    assert data[1]["tokens"][3] == "</script><script>alert(1)</script>"


def _browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    if os.environ.get("MHA_REQUIRE_BROWSER"):
        pytest.fail("no chromium on PATH; .ci/run installs Debian's chromium package")
    pytest.skip("no chromium on PATH (apt-get install chromium)")


def _chromium(*args: str) -> subprocess.CompletedProcess:
    command = [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def _selftest(page: Path, view: str = "") -> dict:
    dom = _chromium(
        "--window-size=1400,1000", "--virtual-time-budget=10000", "--dump-dom", f"{page.as_uri()}#selftest{view}"
    ).stdout
    found = re.search(r'<pre id="selftest">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def _screenshot(page: Path, out: Path, view: str = "") -> np.ndarray:
    import matplotlib.image

    _chromium("--window-size=1400,1000", f"--screenshot={out}", f"{page.as_uri()}#{view}")
    return matplotlib.image.imread(out)


def _width_used(pixels: np.ndarray, top: int = 200) -> float:
    """The share of the window's width between the first and the last column drawn in below the header."""
    inked = (pixels[top:, :, :3].mean(-1) < 0.85).any(axis=0)
    columns = np.flatnonzero(inked)
    return (columns[-1] - columns[0] + 1) / pixels.shape[1] if len(columns) else 0.0


@pytest.mark.browser
@pytest.mark.slow
def test_head_view_in_a_real_browser_for_512_tokens(tmp_path):
    page = tmp_path / "view.html"
    page.write_text(head_view_html(synthetic(512), title="512 tokens"), encoding="utf-8")
    result = _selftest(page)
    assert result["tokens"] == result["query_elements"] == result["key_elements"] == 512  # one element per token
    steps = {s["step"]: s for s in result["steps"]}
    default, every, one = steps["default"], steps["all heads"], steps["click head chip"]
    # It opens on one head: about a quarter of the lines of all four overlaid.
    assert default["isolated"] == 0 and every["isolated"] is None and one["isolated"] == 1
    assert 0 < default["lines"] < 0.4 * every["lines"] and 0 < one["lines"] < 0.4 * every["lines"]
    assert one["checksum"] != default["checksum"] != every["checksum"]  # the picture changed
    assert 0 < steps["hover first query"]["lines"] < one["lines"]
    assert steps["hover first key"]["checksum"] != steps["hover first query"]["checksum"]
    assert result["weights_shown_on_hover"] > 0  # hovering a key shows each query's weight beside it
    assert result["canvas_width"] > 0.6 * result["window_width"]  # the lines use the window's width

    pixels = _screenshot(page, tmp_path / "shot.png")
    pixels_all = _screenshot(page, tmp_path / "shot_all.png", "head=all")
    assert pixels.shape[0] >= 900 and pixels.shape[1] >= 1300
    assert pixels.std() > 0.05 and (pixels[..., :3].mean(-1) < 0.9).mean() > 0.02  # not blank
    assert _width_used(pixels) > 0.8  # drawn across the window, not in its left third
    ink = (pixels[200:, :, :3].mean(-1) < 0.85).mean()
    assert ink < (pixels_all[200:, :, :3].mean(-1) < 0.85).mean()  # one head draws less than all four


@pytest.mark.browser
@pytest.mark.slow
def test_a_text_holding_an_html_comment_opener_still_draws_every_token(tmp_path):
    # Issue case: "<!--<script>" in the data put the browser's parser in a state where the script never ran.
    items = synthetic(12)
    items[0]["tokens"][2] = "<!--<script>"
    items[0]["text"] = "a review with <!--<script> inside"
    page = tmp_path / "view.html"
    page.write_text(head_view_html(items, title="comment"), encoding="utf-8")
    result = _selftest(page)
    assert result["tokens"] == result["query_elements"] == 12
    # The columns say which side is which, and an unselected head's chip stays readable.
    dom = _chromium("--window-size=1400,1000", "--virtual-time-budget=10000", "--dump-dom", page.as_uri()).stdout
    titles = re.search(r'<div id="view-titles">(.*?)</div>', dom, re.S).group(1)
    assert "queries" in titles and "keys" in titles
    off = re.search(r"\.chip\.off \{ opacity: ([0-9.]+)", asset("head_view.css"))
    assert float(off.group(1)) >= 0.5
    # A view mounted inside a page keeps to its own elements: another "caption" on the page is left alone.
    hosted = tmp_path / "hosted.html"
    source = head_view_html(items, title="hosted").replace(
        "<body>", '<body><div id="caption">outer</div><div id="mount"></div>', 1
    )
    hosted.write_text(
        source.replace("mountHeadView(document.body,", 'mountHeadView(document.getElementById("mount"),', 1)
    )
    dom = _chromium("--window-size=1400,1000", "--virtual-time-budget=10000", "--dump-dom", hosted.as_uri()).stdout
    assert '<div id="caption">outer</div>' in dom and "12 tokens" in dom.split('<div id="mount">')[1]


@pytest.mark.browser
@pytest.mark.slow
def test_every_run_writes_a_head_view_and_inspect_writes_one_on_request(tiny_run: Path, tmp_path):
    run_page = tiny_run / "attention.html"
    result = _selftest(run_page)
    assert result["heads"] == 2 and result["query_elements"] == result["tokens"] > 0
    assert result["steps"][0]["lines"] > 0
    caption = re.search(r'<div id="caption">(.*?)</div>', _chromium("--dump-dom", run_page.as_uri()).stdout).group(1)
    assert re.fullmatch(r"predicted \w+ \(p=0\.\d\d\) · true label \w+ · \d+ tokens", caption), caption

    text = "the coffee was fresh and lovely " * 3
    out = tmp_path / "one.html"
    cli = run_script("inspect_attention.py", str(tiny_run), text, "--html", str(out), "--out", str(tmp_path / "a.png"))
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert f"head view: {out}" in cli.stdout
    result = _selftest(out)
    assert result["tokens"] == 18  # six words, three times; all within seq_len 32
