"""What each attention head does, in numbers and one word.

For every layer x head, over a set of texts, :func:`head_statistics` measures on the real (non-padding)
query rows of the attention matrix:

* ``normalized_entropy``: the row's entropy divided by log(n), n = the text's real tokens; 1.0 is
  uniform attention, 0.0 is all weight on one token. Normalising makes texts of any length comparable
  (plain entropy grows with log n). Rows of one-token texts (log 1 = 0) are skipped.
* ``previous_token`` / ``next_token`` / ``self`` / ``first_token``: the attention mass a query puts on
  position i-1, i+1, i and 0 (rows where that position is another real token: the first row has no
  previous token; the first row is left out of ``first_token`` because it would be ``self``).
* ``same_word``: the mass on *other* positions that hold the same token id as the query (rows whose
  token occurs again in the text).
* ``top_tokens`` (from a model run on texts): the words that receive the most attention per
  occurrence, as a multiple of what uniform attention would give them; this names what a content
  ("focused") head looks for.
* ``uniform_mass``: what ``self`` etc. would be under uniform attention (the mean of 1/n over the
  query rows), the chance level to compare the masses with.

:func:`label_head` turns these into one label, checked in this order:

====================  =====================================================================
label                 rule
====================  =====================================================================
``previous-token``    mass on i-1 >= 0.4 (and the largest of the positional masses)
``next-token``        mass on i+1 >= 0.4 (idem)
``self``              mass on i >= 0.4 (idem)
``first-token``       mass on position 0 >= 0.4 (idem; a "sink" head)
``same-word``         mass on other copies of the query's word >= 0.4
``focused``           normalized entropy <= 0.6: a few content tokens take most of the weight
``broad``             normalized entropy >= 0.9: close to uniform, a bag-of-words average
``mixed``             anything between
====================  =====================================================================

0.4 is far above chance (1/n is ~0.02 for a 50-token review) and means the pattern takes a plurality
of the weight; 0.6 / 0.9 split entropy into "a handful of tokens" / "almost everything".

On data built by a known rule (an extra registers the rule's positions in
its data source's ``relation_links()``), :func:`relation_heads` names, for each relation the rule reads (e.g. "the
word before the marker"), the head that puts the most attention from the rule's query position on its key
position, when that mass is at least 4 times what uniform attention would put there (:data:`RELATION_LIFT`:
a relation's key is one position of many, and a head that reads it often shares the row with the query's
own token)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf

from mha_project.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic
from mha_project.attention.plots import figure_to_png, label_color, plt
from mha_project.attention.scores import attention_scores, has_cls_token, normalized_entropy_rows, scores_for_texts
from mha_project.data.pipeline import pad_batch
from mha_project.errors import UserError
from mha_project.extras.analysis.finished import check_out_folder
from mha_project.extras.analysis.runs import load_masked_lm, load_run
from mha_project.run_dir import ANALYSIS_TB, STAGE_DIR

POSITION_THRESHOLD = 0.4


FOCUSED_ENTROPY = 0.6


BROAD_ENTROPY = 0.9


RELATION_LIFT = 4.0


STAT_KEYS = ("normalized_entropy", "previous_token", "next_token", "self", "first_token", "same_word")


def head_statistics(scores: np.ndarray, real: np.ndarray, token_ids: np.ndarray | None = None) -> list[dict]:
    """Statistics of one layer's heads.

    Args:
        scores: ``(batch, heads, T, T)`` attention probabilities (query rows, key columns).
        real: ``(batch, T)`` True at real tokens; real tokens come first in each row (right padding).
        token_ids: ``(batch, T)`` ids, for ``same_word``; with None, ``same_word`` is None.
    Returns:
        one dict per head with :data:`STAT_KEYS` and ``uniform_mass``.
    """
    scores = np.asarray(scores, dtype="float64")
    real = np.asarray(real, dtype=bool)
    if token_ids is None:  # distinct ids: no position shares a word with another, same_word is None
        token_ids = np.broadcast_to(np.arange(real.shape[1]), real.shape)
    sums: dict = {}
    _accumulate(sums, 0, scores, real, np.asarray(token_ids))
    return [{k: v for k, v in row.items() if k != "layer"} for row in _finish(sums)]


def label_head(stats: dict) -> str:
    """One word for a head, by the rules in this module's docstring."""
    positional = {
        "previous-token": stats.get("previous_token"),
        "next-token": stats.get("next_token"),
        "self": stats.get("self"),
        "first-token": stats.get("first_token"),
    }
    positional = {k: v for k, v in positional.items() if v is not None}
    if positional:
        name, mass = max(positional.items(), key=lambda kv: kv[1])
        if mass >= POSITION_THRESHOLD:
            return name
    if (stats.get("same_word") or 0.0) >= POSITION_THRESHOLD:
        return "same-word"
    entropy = stats.get("normalized_entropy")
    if entropy is None:
        return "undefined"
    if entropy <= FOCUSED_ENTROPY:
        return "focused"
    if entropy >= BROAD_ENTROPY:
        return "broad"
    return "mixed"


def model_head_patterns(model, preprocessor, texts, batch_size: int = 32) -> list[dict]:
    """Run ``model`` on ``texts`` and return one dict per (layer, head), the statistics pooled over texts.

    Texts are batched by length (sorted), so little padding is computed; the statistics are means over
    all real query rows of all texts, weighted per row.
    """
    rows = [r for r in preprocessor.encode(texts) if len(r) > 0]
    rows.sort(key=len)
    cls = has_cls_token(model)
    vocab = preprocessor.vectorizer.get_vocabulary()
    sums: dict = {}
    lift: dict = {}  # layer -> (heads, vocab) sum of column sums; counts per token id
    counts = np.zeros(len(vocab) + 1)
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        ids = pad_batch(chunk)
        real = ids != 0
        if cls:  # position 0 is [CLS]: a real token with its own id (-1: never the same word as another)
            ids = np.concatenate([np.full((len(chunk), 1), -1, "int32"), ids], axis=1)
            real = np.concatenate([np.ones((len(chunk), 1), bool), real], axis=1)
        np.add.at(counts, ids[real] + 1, 1)
        for layer, scores in enumerate(attention_scores(model, ids[:, 1:] if cls else ids)):
            _accumulate(sums, layer, scores, real, ids)
            # Column sum = attention a token receives from its text's queries; 1.0 under uniform attention.
            received = np.asarray(scores, dtype="float64").sum(axis=2)  # (batch, heads, T)
            table = lift.setdefault(layer, np.zeros((scores.shape[1], len(vocab) + 1)))
            for h in range(scores.shape[1]):
                np.add.at(table[h], ids[real] + 1, received[:, h][real])
    heads = _finish(sums)
    names = ["[CLS]"] + list(vocab)  # index = id + 1
    for row in heads:
        row["top_tokens"] = top_tokens(lift[row["layer"]][row["head"]], counts, names)
    return heads


def relation_heads(model, preprocessor, texts, links, batch_size: int = 64):
    """For each relation ``links(words)`` names in the texts: every head's mean attention from the relation's
    query position to its key position, the chance level (mean 1/n), and the head that follows it (the
    largest mass, if >= :data:`RELATION_LIFT` x chance), as ``{"relation", "pairs", "chance", "mass", "head"}``.
    Positions are the texts' words, as the rule made them (their words are the vocabulary's)."""
    cls = int(has_cls_token(model))  # positions of the words are one further on
    sums: dict = {}  # relation -> [mass (layers, heads), pairs, sum of 1/n]
    for start in range(0, len(texts), batch_size):
        chunk = list(texts[start : start + batch_size])
        scores, tokens, _ = scores_for_texts(model, preprocessor, chunk)
        layers = np.stack(scores)  # (layers, batch, heads, T, T)
        for b, (text, n) in enumerate(zip(chunk, map(len, tokens))):
            for relation, pairs in links(text.split()).items():
                entry = sums.setdefault(relation, [0.0, 0, 0.0])
                for q, k in pairs:
                    if max(q, k) + cls < n:
                        entry[0] = entry[0] + layers[:, b, :, q + cls, k + cls]
                        entry[1] += 1
                        entry[2] += 1.0 / n
    out = []
    for relation, (mass, pairs, inverse_n) in sums.items():
        mass, chance = np.asarray(mass, dtype="float64") / pairs, inverse_n / pairs
        layer, head = np.unravel_index(int(np.argmax(mass)), mass.shape)
        best = float(mass[layer, head])
        named = {"layer": int(layer), "head": int(head), "mass": round(best, 4)}
        out.append(
            {
                "relation": relation,
                "pairs": pairs,
                "chance": round(chance, 4),
                "mass": np.round(mass, 4).tolist(),
                "head": named if best >= RELATION_LIFT * chance else None,
            }
        )
    return out


def format_relations(relations: list[dict]) -> str:
    """One line per relation: the head that follows it, or that none does."""
    lines = []
    for r in relations:
        h = r["head"]
        who = f"layer {h['layer']} head {h['head']} (attention {h['mass']:.2f})" if h else "no head reaches 4x chance"
        lines.append(f"{r['relation']}: {who}; chance {r['chance']:.3f}, {r['pairs']} query positions")
    return "\n".join(lines)


def top_tokens(
    lift_sum: np.ndarray, counts: np.ndarray, names: list[str], k: int = 5, min_count: int = 5
) -> list[list]:
    """The ``k`` tokens (seen at least ``min_count`` times) with the highest mean attention received per
    occurrence, relative to uniform (1.0 = what uniform attention gives; 5.0 = five times that)."""
    seen = counts >= min_count
    mean = np.where(seen, lift_sum / np.maximum(counts, 1), -np.inf)
    order = np.argsort(-mean)[:k]
    return [[names[i], round(float(mean[i]), 2)] for i in order if np.isfinite(mean[i])]


def _accumulate(sums: dict, layer: int, scores, real, ids) -> None:
    """Add a batch's per-row sums, so a mean over batches weights rows, not batches, equally."""
    scores = np.asarray(scores, dtype="float64")
    batch, heads, t, _ = scores.shape
    ent, ent_valid = normalized_entropy_rows(scores, real)
    pair_real = real[:, :, None] & real[:, None, :]
    i = np.arange(t)

    def diag(offset):
        j = i + offset
        ok = (j >= 0) & (j < t)
        return scores[:, :, i[ok], j[ok]], pair_real[:, i[ok], j[ok]][:, None, :]

    same = (ids[:, :, None] == ids[:, None, :]) & pair_real & ~np.eye(t, dtype=bool)[None]
    parts = {
        "normalized_entropy": (ent, ent_valid),
        "previous_token": diag(-1),
        "next_token": diag(1),
        "self": diag(0),
        "first_token": (scores[:, :, 1:, 0], (real[:, 1:] & real[:, :1])[:, None, :]),
        "same_word": ((scores * same[:, None]).sum(-1), same.any(-1)[:, None, :]),
    }
    entry = sums.setdefault(layer, {k: [np.zeros(heads), np.zeros(heads)] for k in STAT_KEYS} | {"inv_n": [0.0, 0]})
    for key, (values, valid) in parts.items():
        valid = np.broadcast_to(valid, values.shape).astype("float64")
        entry[key][0] += (values * valid).sum(axis=(0, 2))
        entry[key][1] += valid.sum(axis=(0, 2))
    # Chance level per query row: 1/n for each of a text's n rows (texts of one token left out).
    n = real.sum(axis=1)
    entry["inv_n"][0] += float((n > 1).sum())
    entry["inv_n"][1] += int(n[n > 1].sum())


def _finish(sums: dict) -> list[dict]:
    out = []
    for layer in sorted(sums):
        entry = sums[layer]
        heads = len(entry["self"][0])
        for h in range(heads):
            row = {"layer": layer, "head": h}
            for key in STAT_KEYS:
                total, count = entry[key][0][h], entry[key][1][h]
                row[key] = round(float(total / count), 4) if count else None
            row["uniform_mass"] = round(entry["inv_n"][0] / entry["inv_n"][1], 4) if entry["inv_n"][1] else None
            row["label"] = label_head(row)
            out.append(row)
    return out


def format_table(heads: list[dict]) -> str:
    """A fixed-width table, one line per head."""
    cols = ("layer", "head", "label") + STAT_KEYS
    short = {
        "normalized_entropy": "norm_entropy",
        "previous_token": "prev",
        "next_token": "next",
        "first_token": "first",
        "same_word": "same_word",
    }
    header = "  ".join(f"{short.get(c, c):>12}" for c in cols)
    if any(row.get("top_tokens") for row in heads):
        header += "    most attended (x uniform)"
    lines = [header]
    for row in heads:
        cells = []
        for c in cols:
            v = row.get(c)
            cells.append(f"{'-' if v is None else (f'{v:.3f}' if isinstance(v, float) else v):>12}")
        if row.get("top_tokens"):
            cells.append("  " + ", ".join(f"{tok} ×{x:.1f}" for tok, x in row["top_tokens"]))
        lines.append("  ".join(cells))
    return "\n".join(lines)


PATTERN_COLUMNS = 3  # panels per row: six statistics in two rows, not one strip


def patterns_figure(heads: list[dict], title: str):
    """One heatmap (layers x heads) per statistic, each with its colour bar (0..1), values written in."""
    layers = max(r["layer"] for r in heads) + 1
    n_heads = max(r["head"] for r in heads) + 1
    rows = -(-len(STAT_KEYS) // PATTERN_COLUMNS)
    width = 1.4 + 0.55 * max(n_heads, 4)
    fig, axes = plt.subplots(
        rows, PATTERN_COLUMNS, figsize=(width * PATTERN_COLUMNS, rows * (1.3 + 0.5 * layers)), squeeze=False
    )
    for ax in axes.flat[len(STAT_KEYS) :]:
        ax.axis("off")
    for ax, key in zip(axes.flat, STAT_KEYS):
        grid = np.full((layers, n_heads), np.nan)
        for r in heads:
            if r[key] is not None:
                grid[r["layer"], r["head"]] = r[key]
        cmap = "viridis_r" if key == "normalized_entropy" else "viridis"
        image = ax.imshow(grid, cmap=cmap, vmin=0, vmax=1, aspect="auto")
        fig.colorbar(image, ax=ax, fraction=0.05, pad=0.03).ax.tick_params(labelsize=6)
        for r in heads:
            value = r[key]
            text = "-" if value is None else f"{value:.2f}"
            if key == "normalized_entropy":
                text += f"\n{r['label']}"
            ax.text(
                r["head"],
                r["layer"],
                text,
                ha="center",
                va="center",
                fontsize=6,
                color="black" if value is None else label_color(image, value),
            )
        ax.set_xticks(range(n_heads), [f"h{h}" for h in range(n_heads)], fontsize=6)
        ax.set_yticks(range(layers), [f"layer {l}" for l in range(layers)], fontsize=6)
        ax.set_title(key.replace("_", " "), fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def run_head_patterns(run_dir, num_texts: int = 200, out=None, pretrained: bool = False) -> dict:
    """Head statistics of a finished run on its first ``num_texts`` validation texts.

    Writes head_patterns.{json,md,png} into ``out`` (default RUN_DIR/head_patterns/) and the picture plus
    one scalar per statistic and head into RUN_DIR/tensorboard/head_patterns/. ``pretrained=True``: the
    heads of the run's masked language model as pretraining left them (RUN_DIR/pretrain/model.keras), into
    RUN_DIR/pretrain/head_patterns/ and RUN_DIR/pretrain/tensorboard/head_patterns/.
    """
    check_out_folder(out, "head_patterns.png, .md, .json")
    if num_texts < 1:
        raise UserError(f"--texts={num_texts} is invalid: must be an integer >= 1")
    run = load_run(run_dir, needs_attention=True)
    data = run.splits()
    texts = data.val_texts[:num_texts]
    model, base = run.model, run.path
    if pretrained:
        model, base = load_masked_lm(run.path, run.cfg), run.path / STAGE_DIR
    heads = model_head_patterns(model, run.preprocessor, texts)
    rule = getattr(run.source, "relation_links", None)  # data built by a known rule (data=relations)
    links = rule() if rule else None
    relations = [] if links is None else relation_heads(model, run.preprocessor, texts, links)
    result = {
        "run_dir": str(run.path),
        "texts": len(texts),
        "split": "validation",
        "model": "pretrained masked LM" if pretrained else "classifier",
        "heads": heads,
        "relations": relations,
        "thresholds": {
            "position_mass": POSITION_THRESHOLD,
            "focused_entropy": FOCUSED_ENTROPY,
            "broad_entropy": BROAD_ENTROPY,
        },
    }
    out_dir = base / "head_patterns" if out is None else Path(out)
    which = " (pretrained masked LM)" if pretrained else ""
    title = f"attention head patterns over {len(texts)} validation texts of {run.path.name}{which}"
    png = figure_to_png(patterns_figure(heads, title))
    write_bytes_atomic(out_dir / "head_patterns.png", png)
    write_json_atomic(out_dir / "head_patterns.json", result)
    table = format_table(heads) + (f"\n\n{format_relations(relations)}" if relations else "")
    write_text_atomic(out_dir / "head_patterns.md", f"# {title}\n\n```\n{table}\n```\n")

    writer = tf.summary.create_file_writer(str(base / "tensorboard" / ANALYSIS_TB))
    with writer.as_default(step=0):
        tf.summary.image("head_patterns", tf.io.decode_png(png, channels=3)[None])
        for r in heads:
            for key in STAT_KEYS:
                if r[key] is not None:
                    tf.summary.scalar(f"head_patterns/{key}/layer_{r['layer']}/head_{r['head']}", r[key])
    writer.close()
    return {**result, "out_dir": str(out_dir)}
