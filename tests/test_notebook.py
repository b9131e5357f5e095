"""notebooks/walkthrough.ipynb runs top to bottom (tiny setting), so the learner's path cannot silently rot."""

import os

import pytest

from conftest import ROOT


@pytest.mark.subprocess
@pytest.mark.slow
def test_walkthrough_notebook_executes_and_shows_what_it_promises():
    nbclient = pytest.importorskip("nbclient")  # in the [dev] and [notebook] extras
    import nbformat

    path = ROOT / "notebooks" / "walkthrough.ipynb"
    nb = nbformat.read(path, as_version=4)
    os.environ["MHA_NOTEBOOK_TINY"] = "1"  # the kernel inherits it
    try:
        nbclient.NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
        ).execute()
    finally:
        del os.environ["MHA_NOTEBOOK_TINY"]
    # A stream's text carries its own line ends, and the kernel may send one print in several pieces (it flushes
    # on a timer): joined as they came; other outputs on lines of their own.
    text = "".join(
        o.get("text", "")
        if o.get("output_type") == "stream"
        else "\n" + str(o.get("data", {}).get("text/markdown", ""))
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
    )
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert "tiny: True" in text
    assert "output (2, 10, 128) scores (2, 4, 10, 10)" in text  # the seed's example, run correctly
    assert "TypeError" in text and "Unrecognized keyword arguments" in text  # the seed's two mistakes, shown
    assert "test_accuracy" in text and "norm_entropy" in text and "accuracy without it" in text
    assert "| job | heads |" in text and text.count("| finished |") == 2  # the sweep report (tiny: 2 jobs)
    assert len(images) == 1  # the attention heatmap
    views = [
        o["data"]["text/html"]
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if "mha-head-view" in str(o.get("data", {}).get("text/html", ""))
    ]
    # The head view inline: the whole page in the stored output (srcdoc), nothing fetched from a CDN.
    assert len(views) == 1 and "srcdoc=" in views[0] and "mountHeadView" in views[0] and "<script src" not in views[0]
