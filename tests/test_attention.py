"""The NumPy reference against keras.layers.MultiHeadAttention, and scores of a trained run."""

from pathlib import Path

import keras
import numpy as np
import pytest

from conftest import event_records, run_script, small_model
from mha_project.attention.scores import attention_entropy, attention_scores, reference_mha

CASES = [
    # (num_heads, key_dim, value_dim, use_bias, query_len, key_len, d_model, masked)
    (4, 8, None, True, 6, 6, 16, False),  # self-attention
    (2, 5, None, True, 3, 7, 12, False),  # cross-attention, query_len != key_len
    (3, 4, 9, True, 5, 5, 10, False),  # value_dim != key_dim
    (3, 4, 9, False, 5, 8, 10, True),  # no biases, with a mask
    (1, 16, None, True, 4, 4, 8, True),  # a single head
    (8, 2, 3, False, 6, 6, 8, True),  # many small heads
]


@pytest.mark.parametrize("heads,key_dim,value_dim,use_bias,t,s,d,masked", CASES)
def test_reference_matches_keras(heads, key_dim, value_dim, use_bias, t, s, d, masked):
    rng = np.random.default_rng(heads * 100 + t)
    layer = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=key_dim, value_dim=value_dim, use_bias=use_bias)
    query = rng.normal(size=(2, t, d)).astype("float32")
    value = query if t == s else rng.normal(size=(2, s, d + 2)).astype("float32")
    mask = None
    if masked:
        mask = rng.random((2, t, s)) > 0.3
        mask[0, 0, :] = False  # a query that may attend to nothing
        mask[1, :, s - 2 :] = False  # padding at the end of the keys
    output, scores = layer(query, value, attention_mask=mask, return_attention_scores=True)
    if use_bias:  # make biases non-zero so they are really tested
        for w in layer.weights:
            if "bias" in w.path:
                w.assign(rng.normal(size=w.shape).astype("float32"))
        output, scores = layer(query, value, attention_mask=mask, return_attention_scores=True)
    ref_output, ref_scores = reference_mha(layer, query, value, attention_mask=mask)
    np.testing.assert_allclose(ref_scores, np.asarray(scores), atol=1e-5)
    np.testing.assert_allclose(ref_output, np.asarray(output), atol=1e-5)
    assert ref_scores.shape == (2, heads, t, s)


def test_reference_detects_a_wrong_scale():
    """The comparison can fail: dropping 1/sqrt(d_k) changes the scores."""
    layer = keras.layers.MultiHeadAttention(num_heads=2, key_dim=16)
    x = np.random.default_rng(0).normal(size=(1, 5, 8)).astype("float32") * 3
    _, scores = layer(x, x, return_attention_scores=True)
    _, ref = reference_mha(layer, x, x)
    assert np.allclose(ref, scores, atol=1e-5)
    unscaled_layer_scores = np.asarray(scores)
    assert not np.allclose(ref**2 / (ref**2).sum(-1, keepdims=True), unscaled_layer_scores, atol=1e-3)


def test_entropy_of_uniform_and_one_hot_rows():
    uniform = np.full((1, 1, 2, 4), 0.25)
    one_hot = np.zeros((1, 1, 2, 4))
    one_hot[..., 0] = 1
    real = np.ones((1, 2), bool)
    assert attention_entropy(uniform, real)[0] == pytest.approx(np.log(4))
    assert attention_entropy(one_hot, real)[0] == pytest.approx(0.0, abs=1e-9)


IDS = np.array([[5, 6, 7, 8, 9, 0, 0], [3, 4, 0, 0, 0, 0, 0]], dtype="int32")


def forward_pass_scores(model, ids, monkeypatch) -> list[np.ndarray]:
    """The scores each MultiHeadAttention returned while ``model`` itself ran on ``ids`` (a spy on its call)."""
    seen = []
    original = keras.layers.MultiHeadAttention.call

    def spy(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        seen.append(np.asarray(out[1]))
        return out

    monkeypatch.setattr(keras.layers.MultiHeadAttention, "call", spy)
    model(ids, training=False)
    monkeypatch.setattr(keras.layers.MultiHeadAttention, "call", original)
    return seen


@pytest.mark.parametrize(
    "overrides, changes",
    [
        ((), dict(local_conv=3)),
        (("model/backbone=rotary",), {}),
        ((), dict(use_gate=True)),
        ((), dict(sliding_window=2)),
        ((), dict(pooling="cls")),
        ((), dict(norm_first=True)),
        ((), dict(norm_first=False, num_layers=2)),
        ((), dict(num_layers=2, local_conv=3, norm_first=True)),
    ],
)
def test_the_tools_scores_are_what_the_models_own_forward_pass_computed(overrides, changes, monkeypatch):
    # Every tool reads attention_scores: it must give what each MultiHeadAttention returned in model(ids) itself,
    # whatever runs before the blocks (a convolution, a [CLS] position, rotary positions) and in every layer.
    keras.utils.set_random_seed(7)
    model = small_model(20, 2, *overrides, **changes)
    forward = forward_pass_scores(model, IDS, monkeypatch)
    tools = attention_scores(model, IDS)
    assert len(tools) == len(forward) == model.backbone.get_config()["num_layers"]
    real = np.concatenate([np.ones((2, 1), bool), IDS != 0], axis=1) if changes.get("pooling") == "cls" else IDS != 0
    for tool, seen in zip(tools, forward):
        assert tool.shape == seen.shape
        rows = np.broadcast_to(real[:, None, :, None], tool.shape)  # padding query rows are the tools' zeros
        np.testing.assert_allclose(tool[rows], seen[rows], atol=1e-6)


@pytest.mark.slow
def test_scores_of_a_trained_run(tiny_run: Path):
    from mha_project.attention.scores import scores_for_texts
    from mha_project.extras.analysis.runs import load_run

    run = load_run(tiny_run)
    texts = ["the coffee was great", "bad", "great great tea and more words than the others here"]
    scores, tokens, real = scores_for_texts(run.model, run.preprocessor, texts)
    heads = run.cfg.model.backbone.num_heads
    assert len(scores) == run.cfg.model.backbone.num_layers
    for s in scores:
        assert s.shape == (3, heads, real.shape[1], real.shape[1])
        sums = s.sum(-1)
        np.testing.assert_allclose(sums[np.broadcast_to(real[:, None, :], sums.shape)], 1.0, atol=1e-5)
        assert np.all(s[np.broadcast_to(~real[:, None, None, :], s.shape)] == 0)
        assert np.all(s[np.broadcast_to(~real[:, None, :, None], s.shape)] == 0)
    cls = ["[CLS]"] if run.cfg.model.pooling == "cls" else []
    assert tokens[1] == cls + ["bad"] and len(tokens[2]) == real[2].sum()


@pytest.mark.slow
def test_tensorboard_records_attention_and_hparams(tiny_run: Path):
    tags = event_records(tiny_run / "tensorboard")
    assert tags["attention/layer_0"] == "images"
    assert tags["attention_scores/layer_0"] == "histograms"
    assert tags["attention_entropy/layer_0/head_0"] == "scalars"
    assert tags["attention_entropy/layer_0/head_1"] == "scalars"
    assert tags["attention_normalized_entropy/layer_0/head_1"] == "scalars"
    assert tags["attention_probe/0"] == "text"
    assert tags["_hparams_/session_start_info"] == "hparams"
    assert tags["hparams/test_accuracy"] == "scalars"
    assert tags["epoch_learning_rate"] == "scalars" and tags["epoch_accuracy"] == "scalars"


@pytest.mark.slow
def test_inspect_attention_cli(tiny_run: Path, tmp_path):
    out = tmp_path / "grid.png"
    result = run_script("inspect_attention.py", str(tiny_run), "정말 맛있어요 great coffee", "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "predicted: " in result.stdout and "layer 0 head 1 (row entropy " in result.stdout
    assert ") receives most: " in result.stdout and "the mean weight the queries give it" in result.stdout
    lines = result.stdout.splitlines()
    tokens = next(line for line in lines if line.startswith("tokens: ")).split()[1:]
    assert tokens[0].startswith("0:") and tokens[-1] == f"{len(tokens) - 1}:coffee"  # position-indexed
    assert f"uniform attention = 1/{len(tokens)} = {1 / len(tokens):.3f}" in result.stdout
    head_line = next(line for line in lines if line.startswith("layer 0 head 0 "))
    entropy = float(head_line.split("(row entropy ")[1].split(")")[0])
    assert 0.0 <= entropy <= 1.0 and "@" in head_line
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "inspect/attention/layer_0" in event_records(tiny_run / "tensorboard" / "analysis")
    # A run and an inspection of it are four TensorBoard runs (folders with event files), not one per tool.
    folders = {path.parent for path in (tiny_run / "tensorboard").rglob("events.out.tfevents.*")}
    assert sorted(f.relative_to(tiny_run).as_posix() for f in folders) == [
        "tensorboard",
        "tensorboard/analysis",
        "tensorboard/train",
        "tensorboard/validation",
    ]

    # The rest in-process (the command line above prints what inspect_text returns).
    from mha_project.errors import UserError
    from mha_project.extras.analysis.inspection import inspect_text

    long = inspect_text(tiny_run, " ".join(["great"] * 50), out=str(tmp_path / "long.png"))
    assert "only the first 32 are used (data.seq_len, data.truncation=head)" in long["notice"]
    with pytest.raises(UserError, match="text is empty"):
        inspect_text(tiny_run, "  ")
    # A real fine_foods review: "$...$" is drawn as text, never parsed as matplotlib mathtext.
    inspect_text(tiny_run, "What a waste of $$ buying things for $5 and $3", out=str(tmp_path / "money.png"))
    assert (tmp_path / "money.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_heatmap_grid_wraps_at_four_heads_and_says_how_many_tokens_it_shows():
    from mha_project.attention.plots import attention_grid

    rng = np.random.default_rng(0)
    scores = rng.dirichlet(np.ones(50), size=(8, 50))  # 8 heads, 50 tokens
    fig = attention_grid([scores], [f"w{i}" for i in range(50)], "probe", max_tokens=24)
    heatmaps = [ax for ax in fig.axes if ax.get_images() and ax.get_title()]
    assert len(heatmaps) == 8
    fig.canvas.draw()  # the constrained layout places the panels when drawn
    rows = {round(ax.get_position().y0, 3) for ax in heatmaps}
    columns = {round(ax.get_position().x0, 3) for ax in heatmaps}
    assert len(rows) == 2 and len(columns) == 4
    assert "first 24 of 50 tokens" in fig._suptitle.get_text() and "1/n" in fig._suptitle.get_text()
    assert [t.get_text() for t in heatmaps[0].get_xticklabels()][-1] == "w23"
    fig = attention_grid([scores[:3, :5, :5]], ["a", "b", "c", "d", "e"], "short")
    assert "(5 tokens;" in fig._suptitle.get_text()


@pytest.mark.slow
@pytest.mark.parametrize("scale", ["shared", "per_head"])
def test_heatmap_scales_are_what_the_title_says_and_the_uniform_mark_is_readable(scale):
    # One colour scale for every head, and the uniform weight "1/n" on its own tick.
    import matplotlib.image

    from mha_project.attention.plots import attention_grid, figure_to_png

    rng = np.random.default_rng(1)
    scores = rng.dirichlet(np.full(24, 0.3), size=(4, 24))
    scores[0] = np.eye(24)  # one head puts all of each query's weight on one key: 1.0
    scores[3] = 1 / 24  # and one is uniform
    fig = attention_grid([scores], [f"w{i}" for i in range(24)], "probe", scale=scale)
    heatmaps = [ax for ax in fig.axes if ax.get_images() and ax.get_title()]
    bars = [ax for ax in fig.axes if ax not in heatmaps]
    tops = {ax.get_images()[0].get_clim()[1] for ax in heatmaps}
    if scale == "shared":
        assert len(bars) == 1 and tops == {1.0} and "one colour scale for every head" in fig._suptitle.get_text()
    else:
        assert len(bars) == 4 and len(tops) == 4 and "each head its own colour scale" in fig._suptitle.get_text()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for bar in bars:
        (mark,) = [t for t in bar.texts if t.get_text() == "1/n"]
        box = mark.get_window_extent(renderer)
        ticks = [t.get_window_extent(renderer) for t in bar.get_yticklabels() if t.get_text()]
        assert ticks and not any(box.overlaps(tick) for tick in ticks)
    png = figure_to_png(fig, dpi=160)
    height, width = matplotlib.image.imread(__import__("io").BytesIO(png)).shape[:2]
    assert width >= 1400 and height >= 400  # was 843 x 236


def test_dollar_signs_are_drawn_as_written_not_as_mathtext():
    from mha_project.attention.plots import attention_grid, figure_to_png

    text = "What a waste of $$ buying things for $5 and $3 \\frac{"
    fig = attention_grid([np.full((1, 3, 3), 1 / 3)], ["$5", "$$", "x"], text)
    assert text in fig._suptitle.get_text()
    assert figure_to_png(fig)[:4] == b"\x89PNG"  # mathtext would raise a ValueError here
