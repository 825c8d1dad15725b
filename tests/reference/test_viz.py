"""Every plot returns a matplotlib Figure with what the lesson needs on it."""

import base64
import io

import matplotlib.pyplot as plt
import nbformat
import pytest
import torch
from matplotlib.figure import Figure
from PIL import Image

from attention_course.masks import causal_mask, to_additive_mask
from attention_course.training import History
from attention_course.viz import plot_attention, plot_history, plot_mask, plot_positional_encoding
from helpers.notebooks import execute


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def heatmap_axes(fig):
    return [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]


def tick_texts(labels):
    return [label.get_text() for label in labels]


def test_attention_heatmap_with_token_labels():
    weights = torch.softmax(torch.randn(3, 4), dim=-1)
    fig = plot_attention(weights, query_labels=["a", "b", "c"], key_labels=["w", "x", "y", "z"])
    assert isinstance(fig, Figure)
    (ax,) = heatmap_axes(fig)
    assert ax.images[0].get_array().shape == (3, 4)
    assert tick_texts(ax.get_yticklabels()) == ["a", "b", "c"]
    assert tick_texts(ax.get_xticklabels()) == ["w", "x", "y", "z"]


def test_attention_heads_get_one_titled_heatmap_each():
    weights = torch.softmax(torch.randn(5, 3, 4), dim=-1)
    fig = plot_attention(weights)
    axes = heatmap_axes(fig)
    assert [ax.get_title() for ax in axes] == [f"head {h}" for h in range(5)]


@pytest.mark.parametrize("shape", [(4,), (2, 2, 3, 4)])
def test_attention_of_the_wrong_shape_raises(shape):
    with pytest.raises(ValueError, match=r"\(T, S\) or \(H, T, S\)"):
        plot_attention(torch.rand(shape))


@pytest.mark.parametrize("mask", [causal_mask(4, 6), to_additive_mask(causal_mask(4, 6))])
def test_plot_mask_bool_and_float(mask):
    fig = plot_mask(mask, key_labels=list("abcdef"))
    assert isinstance(fig, Figure)
    (ax,) = heatmap_axes(fig)
    assert ax.images[0].get_array().shape == (4, 6)
    assert tick_texts(ax.get_xticklabels()) == list("abcdef")


def test_plot_positional_encoding():
    fig = plot_positional_encoding(torch.rand(10, 8) * 2 - 1)
    assert isinstance(fig, Figure)
    assert heatmap_axes(fig)[0].images[0].get_array().shape == (10, 8)


def test_plot_history():
    history = History(loss=[2.0, 1.0, 0.5, 0.2], eval_steps=[2, 4], accuracy=[0.1, 0.9])
    fig = plot_history(history)
    assert isinstance(fig, Figure)
    loss_ax, acc_ax = fig.axes
    assert list(loss_ax.lines[0].get_ydata()) == history.loss
    assert list(acc_ax.lines[0].get_xdata()) == history.eval_steps


def test_in_jupyter_a_figure_is_shown_as_laid_out_not_cropped(tmp_path):
    """Importing viz in a kernel turns off the inline backend's crop to the content (a second
    drawing of every figure): a 4 x 3 inch figure comes out 400 x 300 pixels, whitespace and
    all, where the crop would give it the size of its lines and labels."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import matplotlib.pyplot as plt\nfrom attention_course import viz\n"
        "fig, ax = plt.subplots(figsize=(4, 3), dpi=100, layout='constrained')\n"
        "ax.plot([0, 1])\nplt.show()")]
    execute(nb, tmp_path)
    (png,) = [out["data"]["image/png"] for out in nb.cells[0].outputs
              if "image/png" in out.get("data", {})]
    assert Image.open(io.BytesIO(base64.b64decode(png))).size == (400, 300)
