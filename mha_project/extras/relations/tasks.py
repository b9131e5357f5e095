"""Seeded text tasks whose label is a relation between words: a bag of words (or of word pairs) cannot tell
the classes apart, attention can. Each task is one generator: ``make(n, rng) -> (texts, labels)``; its
docstring is the rule. ``links(words)`` names, for one text, the (query position, key position) pairs of each
relation the rule reads, so that a trained model's heads can be checked against it (head_patterns.py)."""

from __future__ import annotations

import logging

import numpy as np

from mha_project.data.sources import TextData
from mha_project.extras.relations.config import PROBES

NUMBERS = ("zero", "one", "two", "three", "four", "five", "six", "seven")
LENGTH = 16  # words per text of the number tasks

log = logging.getLogger(__name__)


def numbers_around_a_marker(n: int, rng, marker: str, related) -> tuple[list[str], np.ndarray]:
    """``n`` texts of LENGTH number words with ``marker`` at one random inner position; label 1 (half of
    them) when ``related(before, after)`` holds for the words on either side of the marker."""
    v = len(NUMBERS)
    words = rng.integers(0, v, size=(n, LENGTH))
    at = rng.integers(1, LENGTH - 1, size=n)
    labels = rng.integers(0, 2, size=n)
    rows = np.arange(n)
    before = words[rows, at - 1]
    wanted = np.array([next(b for b in range(v) if related(a, b)) for a in before])
    # A word that does not relate: the wanted one moved by 1..v-1 (uniform over the others).
    unrelated = (wanted + rng.integers(1, v, size=n)) % v
    words[rows, at + 1] = np.where(labels == 1, wanted, unrelated)
    texts = []
    for row, position in zip(words, at):
        tokens = [NUMBERS[i] for i in row]
        tokens[position] = marker
        texts.append(" ".join(tokens))
    return texts, labels


def marker(n: int, rng):
    """``marker``: 16 number words (zero … seven) with ``is`` at one random position inside; **same** when the
    word after ``is`` equals the word before it (``… four is four …``), else **different**.

    Every word is equally likely in both classes and so is every pair of neighbours with ``is``: a bag of
    words or word pairs sees nothing. The relation is read at one position from two others (before and
    after the marker)."""
    return numbers_around_a_marker(n, rng, "is", lambda a, b: a == b)


def successor(n: int, rng):
    """``successor``: as ``marker`` with ``then``: **yes** when the word after ``then`` is the one after the
    word before it, counting round (``… two then three …``, ``… seven then zero …``), else **no**.

    Unlike ``marker`` the relation is not symmetric: ``two then three`` is yes, ``three then two`` is no. An
    attention head that mixes the two neighbours (a sum of their values) loses which came first; two heads,
    one on each neighbour, keep it."""
    v = len(NUMBERS)
    return numbers_around_a_marker(n, rng, "then", lambda a, b: b == (a + 1) % v)


NOUNS = ("soup", "staff", "room", "coffee", "service", "bread", "price", "view")
GOOD = ("good", "great", "fresh", "friendly", "clean", "tasty")
BAD = ("bad", "awful", "stale", "rude", "dirty", "bland")
ADVERBS = ("very", "really", "quite", "truly", "so", "rather")
NEUTRAL = ("also", "still")  # where "not" is not: the same length and slot in both cases
TAILS = ("today", "again", "as usual", "this time", "for once", "in the end")


def negation(n: int, rng):
    """``negation``: ``the <noun> was [not|also|still] <adverb> <adjective> <tail>``; **positive** when the
    adjective is good and not negated, or bad and negated (``the soup was not really bad today``), else
    **negative**.

    ``not`` and a good adjective are each in half the texts of each class, and an adverb always stands
    between them, so no word and no pair of neighbours says the class: the adjective must be read together
    with the ``not`` two words before it."""
    texts, labels = [], np.empty(n, dtype="int64")
    for i in range(n):
        negated, good = rng.integers(0, 2, size=2)
        adjective = (GOOD if good else BAD)[rng.integers(len(GOOD))]
        slot = "not" if negated else NEUTRAL[rng.integers(len(NEUTRAL))]
        words = ["the", NOUNS[rng.integers(len(NOUNS))], "was", slot, ADVERBS[rng.integers(len(ADVERBS))], adjective]
        texts.append(" ".join(words + [TAILS[rng.integers(len(TAILS))]]))
        labels[i] = int(good != negated)
    return texts, labels


KEYS = ("ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen")
PAIRS = 4  # key-value pairs per recall text: each key and each value at most once
EVEN, ODD = NUMBERS[0::2], NUMBERS[1::2]
FILLERS = 7  # ``and``s at most per recall text: 16 words at most


def recall(n: int, rng):
    """``recall`` (associative recall, the task of induction heads): ``PAIRS`` key-value pairs with a few ``and``
    between them, then one of the keys again, ``cat five and dog two eel seven and and ant four dog``; the label
    is whether the value that followed the asked key's earlier occurrence (``dog two``) is **even** or **odd**.

    Every text holds two even and two odd values and every key once more: a bag of words sees nothing. The
    answer is two steps away from the last word: which value follows the asked key is known only at the value's
    position once it has read the word before it (a first layer), and only then can the last word look it up
    (a second). Read from the last word alone (``model.pooling=last``), one layer stays at chance; the ``and``s
    (0 to ``FILLERS`` in all, anywhere between the pairs) keep it from reading each value by its distance."""
    keys = np.argsort(rng.random((n, len(KEYS))), axis=1)[:, :PAIRS]
    halves = PAIRS // 2
    even = np.argsort(rng.random((n, len(EVEN))), axis=1)[:, :halves] * 2
    odd = np.argsort(rng.random((n, len(ODD))), axis=1)[:, :halves] * 2 + 1
    values = np.concatenate([even, odd], axis=1)
    values = np.take_along_axis(values, np.argsort(rng.random((n, PAIRS)), axis=1), axis=1)
    asked = rng.integers(0, PAIRS, size=n)
    labels = values[np.arange(n), asked] % 2
    gaps = [rng.multinomial(f, [1 / PAIRS] * PAIRS) for f in rng.integers(0, FILLERS + 1, size=n)]
    texts = [
        " ".join([w for k, v, g in zip(ks, vs, gap) for w in (KEYS[k], NUMBERS[v], *["and"] * g)] + [KEYS[ks[a]]])
        for ks, vs, a, gap in zip(keys, values, asked, gaps)
    ]
    return texts, labels


def marker_links(words: list[str]) -> dict:
    """The positions the marker tasks' rule relates: the marker and its two neighbours, each to each other
    (a model may read the relation at any of the three, or tag the neighbours by attending to the marker),
    and every other word to the marker (a head that finds where the marker is)."""
    at = next((i for i, w in enumerate(words) if w in ("is", "then")), None)
    if at is None or not 0 < at < len(words) - 1:
        return {}
    before, after = at - 1, at + 1
    return {
        "the word before the marker, to the marker": [(before, at)],
        "the word after the marker, to the marker": [(after, at)],
        "the marker, to the word before it": [(at, before)],
        "the marker, to the word after it": [(at, after)],
        "the word after the marker, to the word before it": [(after, before)],
        "the word before the marker, to the word after it": [(before, after)],
        "every other word, to the marker": [(i, at) for i in range(len(words)) if i != at],
    }


def negation_links(words: list[str]) -> dict:
    """The positions the negation rule relates: ``not`` and the adjective two words after it, each to the
    other, and every other word to ``not`` (a head that tells the whole text a ``not`` is there)."""
    at = words.index("not") if "not" in words else len(words)
    adjective = at + 2
    if adjective >= len(words):
        return {}
    return {
        "the adjective, to the not before it": [(adjective, at)],
        "not, to the adjective it negates": [(at, adjective)],
        "every other word, to not": [(i, at) for i in range(len(words)) if i != at],
    }


def recall_links(words: list[str]) -> dict:
    """The positions recall reads: each value to the key before it (the previous-token step) and the asked key
    at the end to the value after its first occurrence (the look-up)."""
    if len(words) < 2 * PAIRS + 1 or words[-1] not in KEYS:
        return {}
    values = [i for i, w in enumerate(words) if w in NUMBERS]
    return {
        "each value, to the key before it": [(i, i - 1) for i in values],
        "the asked key, to the value after its first occurrence": [(len(words) - 1, words.index(words[-1]) + 1)],
    }


# name -> (generator, class names, links, probe texts that show the relation)
TASKS = {
    "marker": (
        marker,
        ("different", "same"),
        marker_links,
        PROBES["marker"],
    ),
    "successor": (
        successor,
        ("no", "yes"),
        marker_links,
        PROBES["successor"],
    ),
    "recall": (
        recall,
        ("even", "odd"),
        recall_links,
        PROBES["recall"],
    ),
    "negation": (
        negation,
        ("negative", "positive"),
        negation_links,
        PROBES["negation"],
    ),
}


def flipped(task: str, text: str, label: int) -> str:
    """``text`` changed in the one word its rule reads so that its label flips (activation patching's corrupted
    twin): the word after the marker, ``not`` or its stand-in, which key stands before the asked value."""
    words = text.split()
    if task == "negation":
        at = next(i for i, w in enumerate(words) if w == "not" or w in NEUTRAL)
        words[at] = NEUTRAL[0] if label == int(words[at + 2] in BAD) else "not"
    elif task == "recall":  # the asked key trades places with a key whose value is of the other kind
        asked = words.index(words[-1])
        other = next(i for i, w in enumerate(words[:-1]) if w in KEYS and NUMBERS.index(words[i + 1]) % 2 != label)
        words[asked], words[other] = words[other], words[asked]
    else:
        at = words.index("is" if task == "marker" else "then")
        before = NUMBERS.index(words[at - 1])
        related = before if task == "marker" else (before + 1) % len(NUMBERS)
        words[at + 1] = NUMBERS[(related + 1) % len(NUMBERS)] if label else NUMBERS[related]
    return " ".join(words)


def patching_pairs(task: str, count: int, seed: int):
    """``count`` texts of ``task`` (not a run's own: another stream of the seed), each with its twin whose label
    is the other (:func:`flipped`), their labels, and how they were made."""
    rng = np.random.default_rng([seed, list(TASKS).index(task), 1])
    texts, labels = TASKS[task][0](count, rng)
    twins = [flipped(task, text, label) for text, label in zip(texts, labels)]
    return texts, twins, labels, f"{task} texts and their twins with the one word the rule reads changed"


def generate(task: str, train_examples: int, test_examples: int, seed: int):
    """((train texts, labels), (test texts, labels), class names) of ``task``, the same for the same seed."""
    make, classes, _, _ = TASKS[task]
    rng = np.random.default_rng([seed, list(TASKS).index(task)])
    train = make(train_examples, rng)
    test = make(test_examples, rng)
    return train, test, list(classes)


class RelationsData(TextData):
    """``data=relations``: the seeded texts of ``task`` (``examples`` to train on, ``test_examples`` to test),
    generated in memory; :meth:`relation_links` gives the rule's positions (``head_patterns.py``)."""

    def __init__(self, task: str, examples: int, test_examples: int, model_setting: str = "", **common):
        super().__init__(**common)
        self.task, self.examples, self.test_examples = task, examples, test_examples
        self.model_setting = model_setting

    def load(self, seed: int):
        if self.model_setting:  # data=relations changed the model too: a run says so before anything else
            log.info(f"data=relations sets the model it learns with: {self.model_setting}")
        return generate(self.task, self.examples, self.test_examples, seed)

    def patching_pairs(self, count: int, seed: int):
        """head_patching.py's clean/corrupted pairs: :func:`patching_pairs` of this task."""
        return patching_pairs(self.task, count, seed)

    def relation_links(self):
        """``links(words) -> {relation: [(query position, key position), ...]}`` of this task's rule."""
        return TASKS[self.task][2]

    def probes(self) -> list[str]:
        """Two texts that differ where the task's relation is decided."""
        return list(PROBES[self.task])
