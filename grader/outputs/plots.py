"""The class report's figures: PNG images, embedded in the page as data URIs.

matplotlib is imported when a figure is drawn (``new_figure``): 0.8 s that ``grade`` and every
command but ``report`` skip.
"""

import base64
import io
import math
from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from ..grading.results import exercise_name

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MAX_LABEL_CHARS = 60


def plot_label(text: str) -> str:
    """Text safe for a matplotlib label: short, and with no "$" to start math mode."""
    if len(text) > MAX_LABEL_CHARS:
        text = text[:MAX_LABEL_CHARS - 1] + "…"
    return text.replace("$", r"\$")


def new_figure(width: float, height: float) -> "Figure":
    """A matplotlib figure with constrained layout. matplotlib is imported here, when a figure
    is drawn: 0.8 s that `grade` and every command but report and feedback skip."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def png_data_uri(figure: "Figure") -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def score_distribution_figure(percents_by_lesson: dict[str, list[float]]) -> "Figure":
    """One histogram per lesson of its submissions' scores, as a percentage of the maximum."""
    from matplotlib import ticker  # see new_figure

    names = list(percents_by_lesson)
    columns = min(3, len(names))
    rows = math.ceil(len(names) / columns)
    figure = new_figure(4 * columns, 2.8 * rows)
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for ax, lesson in zip(axes, names, strict=False):
        percents = percents_by_lesson[lesson]
        ax.set_title(f"{plot_label(lesson)} ({len(percents)} submitted)", fontsize=10)
        if percents:
            ax.hist(percents, bins=np.linspace(0, 100, 11), color="#4878a8", edgecolor="white")
        else:
            ax.text(0.5, 0.5, "no submissions", ha="center", va="center",
                    transform=ax.transAxes, color="#888")
        ax.set_xlim(0, 100)
        ax.xaxis.set_major_formatter(ticker.PercentFormatter())
        ax.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
        ax.set_xlabel("score")
        ax.set_ylabel("submissions")
    for ax in axes[len(names):]:
        ax.set_visible(False)
    return figure


def pass_rate_figure(rates: list[tuple[str, str, int, int]]) -> "Figure":
    """Horizontal bars, one per exercise in notebook order, coloured by lesson."""
    from matplotlib import ticker  # see new_figure

    figure = new_figure(9, 0.32 * len(rates) + 1.6)
    ax = figure.subplots()
    positions = np.arange(len(rates))
    lessons = list(dict.fromkeys(lesson for lesson, *_ in rates))
    for index, lesson in enumerate(lessons):
        rows = [i for i, rate in enumerate(rates) if rate[0] == lesson]
        values = [rates[i][2] / rates[i][3] for i in rows]
        ax.barh(positions[rows], values, color=f"C{index % 10}", label=plot_label(lesson))
    for position, (_, _, passed, graded) in zip(positions, rates, strict=True):
        ax.text(passed / graded + 0.01, position, f"{passed}/{graded}", va="center", fontsize=8)
    ax.set_yticks(positions, [plot_label(exercise_name(grade_id)) for _, grade_id, *_ in rates])
    ax.invert_yaxis()
    ax.set_xlim(0, 1.1)
    ax.xaxis.set_major_formatter(ticker.PercentFormatter(1.0))
    ax.set_xlabel("graded submissions that pass")
    figure.legend(loc="outside upper center", ncols=min(3, len(lessons)), frameon=False)
    return figure


def mistakes_figure(mistakes: list[tuple[str, int, Counter]]) -> "Figure":
    from matplotlib import ticker  # see new_figure

    figure = new_figure(9, 0.32 * len(mistakes) + 1.2)
    ax = figure.subplots()
    positions = np.arange(len(mistakes))
    ax.barh(positions, [times for _, times, _ in mistakes], color="#c05050")
    ax.set_yticks(positions, [plot_label(mistake) for mistake, _, _ in mistakes])
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.set_xlabel("times diagnosed")
    return figure
