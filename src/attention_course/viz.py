"""Pictures for the lessons: attention heatmaps, masks, positional encodings, training curves.

Every function draws on a new matplotlib figure, laid out by matplotlib's constrained layout so
that it fits its canvas, and returns it. A grid of heads is labelled on its outer edges only.
"""

import math

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure


def _draw_each_figure_once() -> None:
    """In Jupyter, show figures as they are laid out instead of cropped to their content.

    The inline backend saves a figure with bbox_inches="tight", which draws it twice (once to
    measure what to crop, once to save): 12-18% of a figure's time. The lessons' figures fit
    their canvas (constrained layout), so nothing is cut off."""
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import InlineBackend, set_matplotlib_formats
    except ImportError:  # not in IPython: nothing to set
        return
    if get_ipython() is None or "inline" not in matplotlib.get_backend():
        return
    settings = InlineBackend.instance()
    settings.print_figure_kwargs = {**settings.print_figure_kwargs, "bbox_inches": None}
    set_matplotlib_formats(*settings.figure_formats)


_draw_each_figure_once()


def _as_array(x) -> np.ndarray:
    if not isinstance(x, torch.Tensor):
        return np.asarray(x)
    x = x.detach().cpu()
    return (x if x.dtype == torch.bool else x.float()).numpy()


def _label_axes(ax, query_labels, key_labels, keys: bool = True, queries: bool = True) -> None:
    """Token labels on the axes; ``keys``/``queries`` False leaves that edge bare (inner panels)."""
    if key_labels is not None:
        ax.set_xticks(range(len(key_labels)), [str(k) for k in key_labels] if keys else [],
                      rotation=90)
    if query_labels is not None:
        ax.set_yticks(range(len(query_labels)), [str(q) for q in query_labels] if queries else [])
    if keys:
        ax.set_xlabel("key (attended to)")
    if queries:
        ax.set_ylabel("query (attending)")


def plot_attention(weights, query_labels=None, key_labels=None, title="attention weights",
                   head_titles=None, max_cols: int = 4) -> Figure:
    """Heatmap of (T, S) attention weights, or a grid of heatmaps for (H, T, S).

    Rows are queries, columns keys; labels name the tokens.
    """
    weights = _as_array(weights)
    if weights.ndim == 2:
        weights = weights[None]
    if weights.ndim != 3:
        raise ValueError(f"weights must be (T, S) or (H, T, S), got shape {weights.shape}")
    n_heads = weights.shape[0]
    cols = min(n_heads, max_cols)
    rows = math.ceil(n_heads / cols)
    T, S = weights.shape[1:]
    width = (0.35 * S + 0.4) * cols + 2.5  # the panels, the query labels once, the colour bar
    height = (0.35 * T + 0.6) * rows + 1.4  # the panels and their titles, the key labels once
    fig, axes = plt.subplots(rows, cols, figsize=(width, height), squeeze=False,
                             layout="constrained")
    for h, ax in enumerate(axes.flat):
        if h >= n_heads:
            ax.axis("off")
            continue
        image = ax.imshow(weights[h], cmap="viridis", vmin=0.0, vmax=1.0)
        below = h + cols >= n_heads  # no panel under this one: its keys are labelled
        _label_axes(ax, query_labels, key_labels, keys=below, queries=h % cols == 0)
        if n_heads > 1:
            ax.set_title(head_titles[h] if head_titles else f"head {h}")
    fig.colorbar(image, ax=axes, shrink=0.8, label="weight")
    fig.suptitle(title)
    return fig


def plot_mask(mask, query_labels=None, key_labels=None, title="mask") -> Figure:
    """Picture of a (T, S) mask: bool masks as may attend / hidden, float masks by value."""
    mask = _as_array(mask)
    if mask.ndim != 2:
        raise ValueError(f"plot one (T, S) mask at a time, got shape {mask.shape}")
    T, S = mask.shape
    fig, ax = plt.subplots(figsize=(0.35 * S + 2.5, 0.35 * T + 1.5), layout="constrained")
    if mask.dtype == bool:
        ax.imshow(mask, cmap="Greens", vmin=-0.3, vmax=1.0)
        for t, s in zip(*np.nonzero(~mask), strict=True):
            ax.text(s, t, "x", ha="center", va="center", color="firebrick")
        ax.set_title(f"{title}\n(green: may attend, x: hidden)")
    else:
        finite = np.where(np.isfinite(mask), mask, np.nan)
        image = ax.imshow(finite, cmap="coolwarm_r")
        fig.colorbar(image, ax=ax, label="added to the score (blank: -inf)")
        ax.set_title(title)
    _label_axes(ax, query_labels, key_labels)
    return fig


def plot_positional_encoding(pe, title="sinusoidal positional encoding") -> Figure:
    """Heatmap of a (T, C) positional encoding: one row per position, one column per dimension."""
    pe = _as_array(pe)
    fig, ax = plt.subplots(figsize=(8, 4), layout="constrained")
    image = ax.imshow(pe, cmap="RdBu", vmin=-1.0, vmax=1.0, aspect="auto")
    fig.colorbar(image, ax=ax, label="value")
    ax.set_xlabel("dimension")
    ax.set_ylabel("position")
    ax.set_title(title)
    return fig


def plot_history(history, title="training") -> Figure:
    """Loss per step and held-out accuracy per evaluation, side by side."""
    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(10, 3.5), layout="constrained")
    loss_ax.plot(range(1, len(history.loss) + 1), history.loss)
    loss_ax.set_yscale("log")
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("loss (answer tokens)")
    loss_ax.set_title("training loss")
    acc_ax.plot(history.eval_steps, history.accuracy, marker="o")
    acc_ax.set_ylim(0.0, 1.02)
    acc_ax.set_xlabel("step")
    acc_ax.set_ylabel("sequence accuracy")
    acc_ax.set_title("held-out sequence accuracy")
    fig.suptitle(title)
    return fig
