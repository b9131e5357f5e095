"""An interactive attention head view: one self-contained HTML file (inline CSS and JS, no network).

The page is ``head_view.html`` next to this module, with ``head_view.js`` and ``head_view.css`` inlined: the
same script draws TensorBoard's Attention tab (``plugin.py``).

bertviz's head view is the reference for this picture, but it needs PyTorch and transformers and its
users report it breaking on long inputs, so this is a small one of our own for Keras models:

* a layer selector, one coloured chip per head: it opens on head 0 alone (a learner reads one head at a
  time; every head overlaid is hundreds of crossing lines), "all" overlays them;
* queries on the left, keys on the right, a line from query i to key j with opacity = attention weight,
  across the window's width (weights below ``MIN_WEIGHT`` are not drawn);
* hover a token on the left: whom it attends to; on the right: who attends to it (the other side's
  tokens are shaded by the weight and show it);
* long texts (512 tokens and more) scroll; weights travel as one byte each (``sqrt`` scaled, so small
  weights keep their precision), about 1 MB per layer of four heads at 512 tokens.

The page reads ``#text=0&layer=0&head=1&hover=q3`` (``head=all``: every head; ``view=model``: every layer and
head) from its address: links to one view, and the screenshots in the README."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

import numpy as np

from mha_project.atomic import write_text_atomic
from mha_project.attention import quantize
from mha_project.attention.scores import scores_for_texts
from mha_project.attention.summaries import prediction_caption
from mha_project.errors import message_line
from mha_project.extras.head_view.assets import MIN_WEIGHT, asset


def encode_weights(scores: np.ndarray) -> str:
    """(heads, n, n) weights in [0, 1] -> base64 of :func:`quantize`.

    >>> import numpy as np
    >>> decode_weights(encode_weights(np.array([[[0.25, 0.75]]])), (1, 1, 2)).round(3).tolist()
    [[[0.252, 0.751]]]
    """
    return base64.b64encode(quantize(scores).tobytes()).decode("ascii")


def decode_weights(data: str, shape) -> np.ndarray:
    """The inverse of :func:`encode_weights` (what the page's JavaScript does)."""
    q = np.frombuffer(base64.b64decode(data), dtype="uint8").reshape(shape)
    return (q.astype("float64") / 255) ** 2


def head_view_html(texts: list[dict], title: str = "attention head view") -> str:
    """The page for ``texts``: each a dict with ``tokens`` (n strings), ``scores`` (one ``(heads, n, n)``
    array per layer, query rows and key columns) and optional ``text`` and ``caption``."""
    payload = [page_item(item) for item in texts]
    return page(payload, title)


def page_item(item: dict) -> dict:
    """One text as the page's script reads it: its tokens, caption and one-byte weights per layer."""
    n = len(item["tokens"])
    layers = [np.asarray(s)[:, :n, :n] for s in item["scores"]]
    return {
        "text": item.get("text", " ".join(item["tokens"])),
        "caption": item.get("caption", ""),
        "tokens": list(item["tokens"]),
        "heads": int(layers[0].shape[0]),
        "layers": [encode_weights(s) for s in layers],
    }


def compare_html(left: list[dict], right: list[dict], titles=("left", "right"), title: str = "compare") -> str:
    """Two head views side by side on one page (two texts, or one text under two runs or epochs): each
    ``left`` / ``right`` is what :func:`head_view_html` takes; each view keeps its own text, layer and head."""
    data = [[page_item(item) for item in side] for side in (left, right)]
    one = page(data[0], titles[0])
    script = (
        "const views = [0, 1].map(k => mountHeadView(document.getElementById('side' + k), SIDES[k],"
        " { minWeight: __MIN__, title: TITLES[k] }));"
    ).replace("__MIN__", str(MIN_WEIGHT))
    sides = json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")
    names = json.dumps(list(titles), ensure_ascii=False).replace("<", "\\u003c")
    body = (
        f"<style>body {{ margin: 0 }} .side {{ display: inline-block; vertical-align: top; width: 49%;"
        f" overflow-x: auto }}</style><div class='side' id='side0'></div><div class='side' id='side1'></div>"
        f"<script>{asset('head_view.js')}\nconst SIDES = {sides};\nconst TITLES = {names};\n{script}</script>"
    )
    head = one.split("<body>", 1)[0].replace(
        f"<title>{html.escape(titles[0])}</title>", f"<title>{html.escape(title)}</title>"
    )
    return head + "<body>\n" + body + "\n</body></html>\n"


def page(payload: list[dict], title: str) -> str:
    # "<" as \u003c: no "</script>" or "<!--<script>" in the data or title can end or change the script.
    values = {
        "__TITLE__": html.escape(title),
        "__TITLE_JSON__": json.dumps(title, ensure_ascii=False).replace("<", "\\u003c"),
        "__CSS__": asset("head_view.css"),
        "__JS__": asset("head_view.js"),
        "__MIN_WEIGHT__": str(MIN_WEIGHT),
        "__DATA__": json.dumps(payload, ensure_ascii=False).replace("<", "\\u003c"),
    }
    # One pass: a text that happens to contain "__JS__" is data, never a place to fill in.
    return re.sub("|".join(values), lambda m: values[m.group(0)], asset("head_view.html"))


class HeadView:
    """A head-view page: ``str(view)`` is the HTML, ``view.save(path)`` writes it, and in a notebook it shows
    itself (``_repr_html_``: the page inside an ``<iframe srcdoc>``, so its script runs in JupyterLab, Jupyter
    and an exported HTML notebook alike, with no CDN and no require.js)."""

    def __init__(self, html_page: str, height: int = 620):
        self.html, self.height = html_page, height

    def __str__(self) -> str:
        return self.html

    def save(self, path) -> Path:
        write_text_atomic(Path(path), self.html)
        return Path(path)

    def _repr_html_(self) -> str:
        return (
            f'<iframe class="mha-head-view" srcdoc="{html.escape(self.html, quote=True)}" '
            f'style="width:100%;height:{self.height}px;border:0" sandbox="allow-scripts"></iframe>'
        )


def render(tokens, attention, path=None, title: str = "attention head view", caption: str = "") -> HeadView:
    """The head view of any model's attention: ``tokens`` (n strings) and ``attention``, a list of
    ``(heads, n, n)`` arrays (one per layer, query rows, key columns) or one ``(layers, heads, n, n)`` array,
    weights in [0, 1]; written to ``path`` when given. For a plain ``keras.layers.MultiHeadAttention``::

        _, scores = layer(x, x, return_attention_scores=True)      # (batch, heads, n, n)
        render(tokens, [keras.ops.convert_to_numpy(scores)[0]]).save("view.html")
    """
    if isinstance(tokens, (str, bytes)):
        raise ValueError("tokens must be a list of strings, one per token; got one string (a token per character)")
    tokens = [str(t) for t in tokens]
    n = len(tokens)
    expected = (
        f"attention must be a list of (heads, {n}, {n}) arrays (one per layer) or one (layers, heads, {n}, {n}) "
        f"array for {n} tokens, with at least one token and one head"
    )
    if not isinstance(attention, (list, tuple)) and not hasattr(attention, "shape"):  # arrays and tensors
        raise ValueError(f"{expected}; got {type(attention).__name__}")
    try:
        layers = [np.asarray(a, "float64") for a in attention]
    except (TypeError, ValueError) as err:
        raise ValueError(f"{expected}; got values that are not numbers ({message_line(err)})") from None
    shapes = [a.shape for a in layers]
    if (
        not n
        or not layers
        or any(len(shape) != 3 or shape[1:] != (n, n) or shape[0] != shapes[0][0] or not shape[0] for shape in shapes)
    ):
        raise ValueError(f"{expected}; got shapes {shapes or 'none'}")
    if any(not np.isfinite(a).all() or a.min() < 0 or a.max() > 1 + 1e-6 for a in layers):
        raise ValueError("attention weights must be finite numbers in [0, 1] (softmax outputs)")
    view = HeadView(head_view_html([{"tokens": tokens, "scores": layers, "caption": caption}], title))
    if path is not None:
        view.save(path)
    return view


def head_view_items(model, preprocessor, texts, class_names=None, labels=None):
    """Each text with a token as the page shows it: tokens, the model's attention per layer, a caption
    naming the prediction (and, with ``labels``, the true label)."""
    rows = preprocessor.encode(list(texts))
    kept = [k for k, row in enumerate(rows) if len(row) > 0]
    texts = [texts[k] for k in kept]
    labels = None if labels is None else [labels[k] for k in kept]
    if not texts:
        return []
    scores, tokens, _real = scores_for_texts(model, preprocessor, texts)
    probs = model.predict(preprocessor.model_inputs(model, texts), verbose=0)
    items = []
    for k, text in enumerate(texts):
        caption = prediction_caption(probs[k], class_names, None if labels is None else labels[k])
        items.append(
            {
                "text": text,
                "caption": caption,
                "tokens": tokens[k],
                "scores": [layer[k] for layer in scores],
            }
        )
    return items


def write_head_view(
    path,
    model,
    preprocessor,
    texts,
    class_names=None,
    title: str = "",
    labels=None,
) -> Path | None:
    """Compute the attention of ``model`` on ``texts`` and write the page to ``path`` (atomically); None when
    no text has a token."""
    items = head_view_items(model, preprocessor, texts, class_names, labels)
    if not items:
        return None
    return HeadView(head_view_html(items, title or "attention head view")).save(path)
