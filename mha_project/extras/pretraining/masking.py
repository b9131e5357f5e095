"""BERT masking of token-id batches, for the masked-LM and ELECTRA pretraining stage."""

from __future__ import annotations

import tensorflow as tf

from mha_project.data.vocabulary import with_reserved_words
from mha_project.errors import UserError
from mha_project.extras.pretraining.config import MASK_TOKEN


def with_mask_token(words: list[str], vocab_size: int) -> list[str]:
    """The adapted words with ``[MASK]`` as the last id, in place of the least frequent word.

    >>> with_mask_token(["the", "a", "of"], vocab_size=5)
    ['the', 'a', '[MASK]']
    """
    return with_reserved_words(words, vocab_size, [MASK_TOKEN])


def mask_id_of(vectorizer) -> int:
    vocabulary = vectorizer.get_vocabulary()
    if MASK_TOKEN not in vocabulary:
        raise UserError(f"the vocabulary has no {MASK_TOKEN} token: it was not built for masked-LM pretraining")
    return vocabulary.index(MASK_TOKEN)


def mask_batch(ids, seed, rate: float, mask_id: int):
    """BERT masking of a padded batch of token ids.

    Per text ``max(1, round(rate * length))`` distinct real positions are chosen (padding, id 0, never);
    of those 80% become ``mask_id``, 10% a random word id in ``[2, mask_id)`` and 10% keep their token.

    Args:
        ids: ``(batch, T)`` int32 token ids, 0 = padding.
        seed: ``(2,)`` int seed for the stateless random ops (same seed, same masks).
        rate: fraction of each text's tokens to predict.
        mask_id: id of ``[MASK]`` (the last id of the vocabulary; the words are ``2 .. mask_id-1``).
    Returns:
        ``(masked_ids, positions, targets, weights)``: the input with replacements; ``(batch, P)``
        chosen positions (P = the most chosen in any row); the original ids there; 1.0 where a
        position was chosen, 0.0 where a row has fewer than P.
    """
    ids = tf.cast(ids, tf.int32)
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=4)
    real = ids != 0
    lengths = tf.reduce_sum(tf.cast(real, tf.int32), axis=1)
    chosen = tf.cast(tf.round(tf.cast(lengths, tf.float32) * rate), tf.int32)
    chosen = tf.where(lengths > 0, tf.maximum(chosen, 1), 0)
    num = tf.maximum(tf.reduce_max(chosen), 1)
    # Random scores with padding below every real token: top_k picks distinct real positions first.
    score = tf.where(real, tf.random.stateless_uniform(tf.shape(ids), seed=seeds[0]), -1.0)
    _, positions = tf.math.top_k(score, k=num)
    weights = tf.range(num)[None, :] < chosen[:, None]
    targets = tf.gather(ids, positions, batch_dims=1)
    roll = tf.random.stateless_uniform(tf.shape(positions), seed=seeds[1])
    random_words = tf.random.stateless_uniform(
        tf.shape(positions), seed=seeds[2], minval=2, maxval=max(mask_id, 3), dtype=tf.int32
    )
    replaced = tf.where(roll < 0.8, mask_id, tf.where(roll < 0.9, random_words, targets))
    replaced = tf.where(weights, replaced, targets)
    rows = tf.broadcast_to(tf.range(tf.shape(ids)[0])[:, None], tf.shape(positions))
    masked = tf.tensor_scatter_nd_update(ids, tf.stack([rows, positions], axis=-1), replaced)
    return masked, positions, tf.where(weights, targets, 0), tf.cast(weights, tf.float32)


def masked_lm_dataset(batches, *, rate: float, mask_id: int, seed: int):
    """(ids, label) batches -> ({token_ids, mask_positions}, targets, sample weights), new masks every epoch."""

    # Stateful random ops in a tf.data map replay the same numbers every epoch when a seed is set;
    # Dataset.random with rerandomize_each_iteration gives each epoch (iterator) new seeds instead.
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)

    def to_example(batch, random):
        ids, _ = batch
        masked, positions, targets, weights = mask_batch(ids, tf.stack([random, random // 7 + 1]), rate, mask_id)
        return {"token_ids": masked, "mask_positions": positions}, targets, weights

    ds = tf.data.Dataset.zip(batches, seeds).map(to_example, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.apply(tf.data.experimental.assert_cardinality(batches.cardinality())).prefetch(tf.data.AUTOTUNE)
