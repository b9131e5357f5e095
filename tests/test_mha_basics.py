import importlib.util

import numpy as np
import pytest

from conftest import ROOT, run_script


def load_basics():
    spec = importlib.util.spec_from_file_location("mha_basics", ROOT / "scripts" / "mha_basics.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_seed_example_shapes():
    x, mha, output, scores = load_basics().run_seed_example()
    assert tuple(x.shape) == (2, 10, 128)
    assert tuple(output.shape) == (2, 10, 128)
    assert tuple(scores.shape) == (2, 4, 10, 10)
    assert mha.num_heads == 4 and mha.key_dim == 64 and mha.value_dim == 64  # value_dim defaults to key_dim
    np.testing.assert_allclose(np.asarray(scores).sum(-1), 1.0, atol=1e-5)


@pytest.mark.subprocess
@pytest.mark.slow
def test_mha_basics_script_prints_shapes():
    # A fresh process: its start-up must be quiet (TensorFlow is imported quietly before Keras).
    result = run_script("mha_basics.py", fresh_process=True)
    assert result.returncode == 0, result.stderr
    assert "output  (2, 10, 128)" in result.stdout
    assert "scores  (2, 4, 10, 10)" in result.stdout
    assert "Could not find cuda drivers" not in result.stderr
