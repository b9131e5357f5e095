"""The seed example, corrected: MultiHeadAttention(num_heads=4, key_dim=64) on a (2, 10, 128) input.

    python scripts/mha_basics.py

Two fixes against the seed text: the argument is ``key_dim`` (not ``key_dims``), and
``return_attention_scores=True`` is an argument of the *call*, not of the constructor.
"""

from entry import import_tensorflow_quietly  # scripts/entry.py

import_tensorflow_quietly()  # before Keras, which imports TensorFlow

# isort: split
import keras  # noqa: E402
import numpy as np  # noqa: E402

from mha_project.attention.scores import reference_mha  # noqa: E402


def run_seed_example(seed: int = 0):
    keras.utils.set_random_seed(seed)
    x = keras.random.normal((2, 10, 128))  # (batch, seq_len, d_model)
    mha = keras.layers.MultiHeadAttention(num_heads=4, key_dim=64)
    output, scores = mha(x, x, return_attention_scores=True)  # self-attention: query = value = key
    return x, mha, output, scores


def main() -> None:
    x, mha, output, scores = run_seed_example()
    print(f"input   {tuple(x.shape)}")
    print(f"output  {tuple(output.shape)}   (batch, seq_len, d_model): W^O projects back to d_model")
    print(f"scores  {tuple(scores.shape)}  (batch, heads, query_len, key_len)")
    print(f"value_dim defaults to key_dim: {mha.value_dim}")
    rows = np.asarray(scores).sum(axis=-1)
    print(f"each score row sums to 1: max |sum - 1| = {np.abs(rows - 1).max():.2e}")
    ref_out, ref_scores = reference_mha(mha, np.asarray(x), np.asarray(x))
    print(
        f"NumPy softmax(QK^T/sqrt(d_k))V agrees: max |diff| output {np.abs(ref_out - np.asarray(output)).max():.2e}, "
        f"scores {np.abs(ref_scores - np.asarray(scores)).max():.2e}"
    )


if __name__ == "__main__":
    main()
