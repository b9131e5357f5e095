"""The interactive head view: a self-contained page, checked in a real headless browser (Chromium)."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import drive_head_view, run_script
from mha_project.extras.head_view.page import asset, decode_weights, encode_weights, head_view_html


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
    # No fetches: it works offline and inside a zip (the one address is SVG's namespace name, never fetched).
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg\b)", page)
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)
    assert page.count("</script>") == 1 and "<b>probe</b>" not in page
    data = json.loads(page.split("mountHeadView(document.body, ", 1)[1].split(", { minWeight:", 1)[0])
    assert [d["heads"] for d in data] == [4, 4] and len(data[0]["layers"]) == 2
    assert data[1]["tokens"][3] == "</script><script>alert(1)</script>"


def _open(page, path: Path, view: str = ""):
    """Load ``path`` afresh (the view reads its address once, when it loads)."""
    page.goto("about:blank")
    page.goto(f"{path.as_uri()}#{view}")
    page.wait_for_selector("#queries .token", state="attached")
    return page


def _drive(page, path: Path, view: str = "", heads: bool = True) -> dict:
    return drive_head_view(_open(page, path, view), heads=heads)


def _screenshot(page, path: Path, out: Path, view: str = "") -> np.ndarray:
    import matplotlib.image

    _open(page, path, view).screenshot(path=out)
    return matplotlib.image.imread(out)


def _saved_svg(page) -> str:
    """What "save SVG" downloads, as a person clicking it gets it."""
    with page.expect_download() as download:
        page.click("#save-svg")
    return Path(download.value.path()).read_text(encoding="utf-8")


def _width_used(pixels: np.ndarray, top: int = 200) -> float:
    """The share of the window's width between the first and the last column drawn in below the header."""
    inked = (pixels[top:, :, :3].mean(-1) < 0.85).any(axis=0)
    columns = np.flatnonzero(inked)
    return (columns[-1] - columns[0] + 1) / pixels.shape[1] if len(columns) else 0.0


@pytest.mark.browser
@pytest.mark.slow
def test_head_view_in_a_real_browser_for_512_tokens(tmp_path, page):
    view = tmp_path / "view.html"
    view.write_text(head_view_html(synthetic(512), title="512 tokens"), encoding="utf-8")
    result = _drive(page, view)
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
    # The hovered key's queries are shaded in the colour of the one head shown (the chip clicked: head 1).
    assert result["hover_shade"].startswith("rgba(255, 127, 14,")  # HEAD_VIEW_COLOURS[1], #ff7f0e
    single, model = result["hints"]
    assert "#text=1" in single and "click a cell to open" in model and "hover a token" not in model
    assert result["canvas_width"] > 0.6 * result["window_width"]  # the lines use the window's width

    pixels = _screenshot(page, view, tmp_path / "shot.png")
    pixels_all = _screenshot(page, view, tmp_path / "shot_all.png", "head=all")
    assert pixels.shape[0] >= 900 and pixels.shape[1] >= 1300
    assert pixels.std() > 0.05 and (pixels[..., :3].mean(-1) < 0.9).mean() > 0.02  # not blank
    assert _width_used(pixels) > 0.8  # drawn across the window, not in its left third
    ink = (pixels[200:, :, :3].mean(-1) < 0.85).mean()
    assert ink < (pixels_all[200:, :, :3].mean(-1) < 0.85).mean()  # one head draws less than all four


@pytest.mark.browser
@pytest.mark.slow
def test_a_text_holding_an_html_comment_opener_still_draws_every_token(tmp_path, page):
    # "<!--<script>" in a token leaves the page's script running (the data is escaped for the HTML parser).
    items = synthetic(12)
    items[0]["tokens"][2] = "<!--<script>"
    items[0]["text"] = "a review with <!--<script> inside"
    view = tmp_path / "view.html"
    view.write_text(head_view_html(items, title="comment"), encoding="utf-8")
    result = _drive(page, view)
    assert result["tokens"] == result["query_elements"] == 12
    # The columns say which side is which, and an unselected head's chip stays readable.
    titles = page.inner_text("#view-titles")
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
    page.goto(hosted.as_uri())
    page.wait_for_selector("#mount #queries .token")
    assert page.inner_text("body > #caption") == "outer" and "12 tokens" in page.inner_text("#mount #caption")


@pytest.mark.browser
@pytest.mark.slow
def test_every_run_writes_a_head_view_and_inspect_writes_one_on_request(tiny_run: Path, tmp_path, page):
    run_page = tiny_run / "attention.html"
    assert f"open {run_page} in a browser" in (tiny_run.parent / "stdout.txt").read_text()  # the run's next step
    result = _drive(page, run_page)
    assert result["heads"] == 2 and result["query_elements"] == result["tokens"] > 0
    assert result["steps"][0]["lines"] > 0
    caption = _open(page, run_page).inner_text("#caption")
    assert re.fullmatch(r"predicted \w+ \(p=0\.\d\d\) · true label \w+ · \d+ tokens", caption), caption

    text = "the coffee was fresh and lovely " * 3
    out = tmp_path / "one.html"
    cli = run_script("inspect_attention.py", str(tiny_run), text, "--html", str(out), "--out", str(tmp_path / "a.png"))
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert f"head view: {out}" in cli.stdout
    result = _drive(page, out)
    assert result["tokens"] == 18  # six words, three times; all within seq_len 32


def _mha_attention(tokens: int = 6, heads: int = 3):
    """Scores of a plain keras.layers.MultiHeadAttention on random vectors: (heads, n, n) for one text."""
    import keras

    keras.utils.set_random_seed(0)
    layer = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=8)
    x = keras.random.normal((1, tokens, 16))
    _, scores = layer(x, x, return_attention_scores=True)
    return keras.ops.convert_to_numpy(scores)[0]


@pytest.mark.browser
@pytest.mark.slow
def test_render_draws_any_keras_models_attention_and_shows_itself_in_a_notebook(tmp_path, page):
    from mha_project.extras.head_view.page import render

    scores = _mha_attention()
    tokens = ["the", "tea", "was", "not", "bad", "."]
    view = render(tokens, [scores, scores[::-1]], path=tmp_path / "any.html", caption="a plain MultiHeadAttention")
    same = render(
        tokens, np.stack([scores, scores[::-1]]), caption="a plain MultiHeadAttention"
    )  # (layers, heads, n, n)
    assert str(view) == str(same) == (tmp_path / "any.html").read_text()
    result = _drive(page, tmp_path / "any.html")
    assert result["tokens"] == result["query_elements"] == 6
    assert {s["step"]: s for s in result["steps"]}["default"]["lines"] > 0
    # In a notebook: the whole page inside an iframe's srcdoc (its script runs there; nothing is fetched).
    import html

    frame = view._repr_html_()
    assert frame.startswith('<iframe class="mha-head-view" srcdoc="') and 'sandbox="allow-scripts"' in frame
    assert html.unescape(frame.split('srcdoc="', 1)[1].split('" style=', 1)[0]) == str(view)
    for bad, shown in (([scores[:, :5, :5]], "(3, 5, 5)"), (scores, "(6, 6)"), ([], "none")):
        with pytest.raises(ValueError, match=r"attention must be a list of \(heads, 6, 6\) arrays") as err:
            render(tokens, bad)
        assert shown in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"weights must be finite numbers in \[0, 1\]"):
        render(tokens, [scores * 3])


@pytest.mark.parametrize(
    "tokens, attention, shown",
    [
        ([], [np.zeros((2, 0, 0))], "for 0 tokens, with at least one token and one head; got shapes [(2, 0, 0)]"),
        (["a", "b"], [np.zeros((0, 2, 2))], "got shapes [(0, 2, 2)]"),
        (["a"], {"layer_0": np.ones((1, 1, 1))}, "; got dict"),
        ("hello", [np.full((1, 5, 5), 0.2)], "got one string (a token per character)"),
        (["a", "b"], [[["x", "y"], ["z", "w"]]], "got values that are not numbers"),
    ],
)
def test_render_refuses_what_is_no_attention_in_one_line(tokens, attention, shown):
    from mha_project.extras.head_view.page import render

    with pytest.raises(ValueError) as err:
        render(tokens, attention)
    assert shown in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
def test_the_lines_figure_labels_every_token_and_a_stronger_weight_draws_a_more_opaque_line(tmp_path):
    from mha_project.attention.plots import save_figure_as
    from mha_project.extras.head_view.assets import MIN_WEIGHT
    from mha_project.extras.head_view.lines import attention_lines

    weights = np.array([[[0.7, 0.2, 0.1], [0.05, 0.9, 0.05], [0.3, 0.3, 0.4]]])
    tokens = ["stale", "coffee", "beans"]
    save_figure_as(attention_lines([weights], tokens, heads=[(0, 0)]), tmp_path / "fig.svg")
    svg = (tmp_path / "fig.svg").read_text()
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert all(labels.count(token) == 2 for token in tokens)  # left (queries) and right (keys), as text
    opacity = {}
    for i, j, style in re.findall(r'<g id="l0h0q(\d)k(\d)">\s*<path[^>]*style="([^"]*)"', svg):
        found = re.search(r"stroke-opacity: ([0-9.]+)", style)
        opacity[(int(i), int(j))] = float(found.group(1)) if found else 1.0
    drawn = {(i, j) for i in range(3) for j in range(3) if weights[0, i, j] >= MIN_WEIGHT}
    assert set(opacity) == drawn  # the page's threshold: weights below MIN_WEIGHT are not drawn
    order = sorted(drawn, key=lambda ij: weights[0][ij])
    assert [opacity[ij] for ij in order] == sorted(opacity[ij] for ij in order)  # stronger: more opaque
    assert opacity[(1, 1)] > opacity[(0, 1)] > opacity[(1, 0)]
    for fmt, magic in (("png", b"\x89PNG"), ("pdf", b"%PDF")):
        save_figure_as(attention_lines([weights, weights], tokens), tmp_path / f"grid.{fmt}")  # layers x heads
        assert (tmp_path / f"grid.{fmt}").read_bytes()[:4] == magic


@pytest.mark.slow
def test_inspect_draws_the_lines_figure_and_refuses_a_head_that_does_not_exist(tiny_run: Path, tmp_path):
    out = tmp_path / "fig.svg"
    result = run_script(
        "inspect_attention.py", str(tiny_run), "great coffee", "--view", "lines", "--heads", "0:1", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr[-2000:]
    svg = out.read_text()
    assert "layer 0 · head 1" in svg and ">great<" in svg and ">coffee<" in svg
    for args, message in (
        (("--view", "lines", "--heads", "0:7"), "--heads=0:7 is invalid: give all or LAYER:HEAD pairs"),
        (("--view", "arcs"), "--view=arcs is invalid: must be one of heatmap, lines"),
        (("--out", str(tmp_path / "fig.jpg")), "the extension must be one of .png, .svg, .pdf"),
    ):
        result = run_script("inspect_attention.py", str(tiny_run), "great coffee", *args)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and message in lines[0], (args, lines)


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("tokens", [128, 512])
def test_the_model_view_shows_every_layer_and_head_and_a_click_opens_one(tmp_path, page, tokens):
    view = tmp_path / "model.html"
    view.write_text(head_view_html(synthetic(tokens, heads=8, layers=2), title="model view"), encoding="utf-8")
    result = _drive(page, view, heads=False)  # the single view's chips and hovering: the 512-token test
    model = result["model"]
    assert model["cells"] == 16 and model["shown"]  # 2 layers x 8 heads side by side
    assert all(lines > 0 for lines in model["lines"])
    assert (
        model["opened"]["view_shown"] and [model["opened"]["layer"], model["opened"]["head"]] == model["opened"]["want"]
    )
    print(
        f"model view, {tokens} tokens, 2 x 8 heads: {model['ms']:.0f} ms to draw, {model['frame_ms']:.0f} ms to paint"
    )  # docs/speed.md quotes it
    # "save SVG" downloads the view as drawn (the head the grid opened), its tokens as text on both sides.
    svg = _saved_svg(page)
    lines, texts = re.findall(r"<line ", svg), re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert len(lines) == int(page.get_attribute("#lines", "data-drawn-lines")) > 0
    assert texts == [t for i in range(tokens) for t in (f"w{i}", f"w{i}")]
    pixels = _screenshot(page, view, tmp_path / "model.png", "view=model")  # the address opens it
    assert (pixels[150:, :, :3].mean(-1) < 0.85).mean() > 0.01


@pytest.mark.browser
@pytest.mark.slow
def test_compare_puts_two_runs_side_by_side_each_with_its_own_heads(tiny_run: Path, tmp_path, page):
    from mha_project.extras.analysis.runs import load_run
    from mha_project.extras.head_view.notebook import compare

    run = load_run(tiny_run)
    view = compare(run, run, "great coffee", right_texts=["stale tea", "awful"], titles=("left run", "right </script>"))
    page_file = view.save(tmp_path / "compare.html")
    assert str(view).count("</script>") == 1  # a title cannot close the script
    page.set_viewport_size({"width": 1600, "height": 1000})
    page.goto(page_file.as_uri())
    page.wait_for_selector("#side1 #queries .token")
    dom = page.content()
    sides = re.findall(r'<div class="side" id="side(\d)">(.*?)<canvas id="lines"', dom, re.S)
    assert [k for k, _ in sides] == ["0", "1"], dom[-2000:]
    assert "great" in sides[0][1] and "stale" in sides[1][1] and "stale" not in sides[0][1]
    assert dom.count('class="token q"') == len(run.token_ids("great coffee")[0]) + len(run.token_ids("stale tea")[0])
