"""What the chapters share around the model: set-up, tables and the attention heatmap.

Why functions and not copy-pasted cells: nbval compares every stored output, so each chapter
must start from the same random state and number of threads (float sums differ in the last
digits between one and two threads). matplotlib is imported only by the functions that draw.
"""

from __future__ import annotations

import contextlib
import html
import os
import random
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .checks import check_array, check_float, check_instance, check_int

__all__ = ["setup", "show_table", "show_heatmaps"]


def setup(seed: int = 0, threads: int = 1) -> np.random.Generator:
    """Seed ``random``, NumPy and torch, set ``threads`` torch threads, make matplotlib draw
    fixed-size PNG figures (SVG embeds a date, which breaks nbval); return ``default_rng(seed)``.

    >>> rng = setup(0)
    """
    seed = check_int("seed", seed, low=0)
    threads = check_int("threads", threads, low=1)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    np.set_printoptions(precision=4, suppress=True, linewidth=100)
    torch.set_printoptions(precision=4, sci_mode=False, linewidth=100)
    try:
        import matplotlib as mpl
    except ImportError:  # the package itself does not need matplotlib
        return np.random.default_rng(seed)
    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 3.6),
            "figure.dpi": 100,
            "savefig.dpi": 100,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "image.cmap": "RdBu_r",
        }
    )
    with contextlib.suppress(ImportError):  # in IPython: inline PNG, whatever MPLBACKEND says
        from IPython import get_ipython

        ip = get_ipython()
        if ip is not None:
            from matplotlib_inline.backend_inline import set_matplotlib_formats

            ip.run_line_magic("matplotlib", "inline")
            set_matplotlib_formats("png")
    return np.random.default_rng(seed)


# The only markup a cell may carry (chapter 3 writes ``0.68<br><small>0.67–0.69</small>``).
_ALLOWED = re.compile(r"&lt;(/?(?:br|small|b|i|em|strong|sub|sup|code))&gt;")


def html_table(header: Sequence[object], rows: Sequence[Sequence[object]]) -> str:
    """A small HTML table: the book renders it, nbval compares it as text (chapters 1 and 3).
    Cells are shown with ``str``, HTML-escaped; only the bare tags of ``_ALLOWED`` pass.

    >>> html_table(["a", "b"], [[1, 2]]).count("<td>")
    2
    """
    if isinstance(header, str) or not isinstance(header, Sequence):
        raise TypeError(f"header must be a sequence of column names, got {type(header).__name__}")
    for i, row in enumerate(rows):
        if isinstance(row, str) or not isinstance(row, Sequence) or len(row) != len(header):
            raise ValueError(f"rows[{i}] must be a sequence of {len(header)} cells, got {row!r}")

    def cell(tag: str, value: object) -> str:
        text = _ALLOWED.sub(r"<\1>", html.escape(str(value), quote=False))
        return f"<{tag}>{text}</{tag}>"

    head = "".join(cell("th", h) for h in header)
    body = "".join("<tr>" + "".join(cell("td", c) for c in row) + "</tr>" for row in rows)
    return f'<table class="table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def show_table(header: Sequence[object], rows: Sequence[Sequence[object]]) -> None:
    """Display ``html_table`` in a notebook."""
    from IPython.display import HTML, display

    display(HTML(html_table(header, rows)))


def _labels(name: str, labels: object, n: int, what: str) -> list[str] | None:
    """``None``, or a non-string sequence of exactly ``n`` labels (shown with ``str``)."""
    if labels is None:
        return None
    if isinstance(labels, str) or not isinstance(labels, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be None or a sequence of {n} {what}, got {labels!r}")
    if len(labels) != n:
        raise ValueError(f"{name} must hold {n} {what}, got {len(labels)}")
    return [str(label) for label in labels]


def _cells(name: str, value: Any, m: np.ndarray, given: tuple, what: str) -> np.ndarray:
    """``value``, an array of the shape of ``matrices``, reshaped like the panels ``m``."""
    a = np.asarray(value.detach().cpu() if torch.is_tensor(value) else value)
    if a.shape not in (given, m.shape):
        raise ValueError(f"{name} must be {what} of the shape of matrices {given}, got {a.shape}")
    return a.reshape(m.shape)


def show_heatmaps(
    matrices: Any,
    *,
    xlabel: str,
    ylabel: str,
    titles: Sequence[str] | None = None,
    xticklabels: Sequence[object] | None = None,
    yticklabels: Sequence[object] | None = None,
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: Any = None,
    blank: Any = None,
    fontsize: float | None = None,
    figsize: tuple[float, float] | None = None,
) -> tuple[Any, np.ndarray]:
    """Draw a grid of matrices (attention weights, gradient norms) on one colour scale
    (chapters 4 and 6); return ``(fig, axes)``, ``axes`` of shape ``(rows, cols)``.

    Why one scale: panels are compared with each other ("the scaled rows are softer"), so a
    colour must mean the same number in every panel and the one colour bar must be true for all
    of them (d2l's ``show_heatmaps`` lets each panel scale itself and draws the last one's bar).

    - ``matrices``: ``(rows, cols, n_q, n_k)``, ``(cols, n_q, n_k)`` or ``(n_q, n_k)``, a
      tensor, an array or a list of them; rows are queries (y axis), columns keys (x axis).
    - ``annotate``: a format string such as ``"{:.2f}"``, or strings of the shape of
      ``matrices`` (e.g. ``"X"`` where masked).
    - ``blank``: booleans of the shape of ``matrices``; True cells are drawn light grey, off the
      scale. Why: the palest colour of a scale from 0 is hard to tell from a small value's, so
      cells that are *exactly* zero (a masked key, a gradient that cannot flow) are set apart.

    >>> fig, axes = show_heatmaps(np.eye(3), xlabel="key", ylabel="query")
    >>> axes.shape, axes[0, 0].images[0].get_clim()
    ((1, 1), (0.0, 1.0))
    """
    import matplotlib as mpl
    import matplotlib.pyplot as plt

    if isinstance(matrices, (list, tuple)):  # a list of tensors (that may require grad)
        matrices = [t.detach().cpu().numpy() if torch.is_tensor(t) else t for t in matrices]
    m = check_array("matrices", matrices, min_ndim=2, dims="(rows, cols, n_q, n_k)")
    if m.ndim > 4:
        raise ValueError(f"matrices must have 2, 3 or 4 dimensions, got shape {m.shape}")
    m, given = m.reshape((1,) * (4 - m.ndim) + m.shape), m.shape
    rows, cols, n_q, n_k = m.shape
    check_instance("xlabel", xlabel, str, "a string")
    check_instance("ylabel", ylabel, str, "a string")
    titles = _labels("titles", titles, rows * cols, "panel titles (rows * cols)")
    xticks = _labels("xticklabels", xticklabels, n_k, "labels (one per key, n_k)")
    yticks = _labels("yticklabels", yticklabels, n_q, "labels (one per query, n_q)")
    blanks = None if blank is None else _cells("blank", blank, m, given, "booleans")
    if blanks is not None and blanks.dtype != np.bool_:
        raise TypeError(f"blank must be None or a boolean array, got dtype {blanks.dtype}")
    shown = m[~blanks] if blanks is not None and not blanks.all() else m  # the scale's entries
    lo = float(shown.min()) if vmin is None else check_float("vmin", vmin)
    hi = float(shown.max()) if vmax is None else check_float("vmax", vmax)
    if lo >= hi and (vmin is not None or vmax is not None):
        raise ValueError(
            "vmin must be smaller than vmax (the largest entry when vmax is not given), "
            f"got vmin={lo!r}, vmax={hi!r}"
        )
    texts = annotate
    if isinstance(annotate, str):
        texts = np.vectorize(annotate.format, otypes=[object])(m)
    elif annotate is not None:
        what = "a format string such as '{:.2f}' or strings"
        texts = _cells("annotate", np.asarray(annotate, dtype=object), m, given, what)
    if fontsize is not None:
        check_float("fontsize", fontsize, low=0, low_open=True)
    if figsize is None:
        figsize = (1.2 + 2.6 * cols, 0.6 + 2.4 * rows)
    elif isinstance(figsize, str) or not isinstance(figsize, Sequence) or len(figsize) != 2:
        raise TypeError(f"figsize must be None or (width, height) in inches, got {figsize!r}")
    for name, inches in zip(("figsize width", "figsize height"), figsize, strict=True):
        check_float(name, inches, low=0, low_open=True)
    fig, axes = plt.subplots(rows, cols, figsize=figsize, squeeze=False, layout="constrained")
    colors = mpl.colormaps["Blues"].with_extremes(bad="lightgrey")  # a grey Blues never takes
    for (r, c), ax in np.ndenumerate(axes):
        panel = m[r, c] if blanks is None else np.ma.masked_array(m[r, c], mask=blanks[r, c])
        im = ax.imshow(panel, cmap=colors, vmin=lo, vmax=hi)
        ax.grid(False)
        ax.set_title(titles[r * cols + c] if titles else "")
        if xticks:
            slant = {"rotation": 30, "ha": "right"} if max(map(len, xticks)) > 2 else {}
            ax.set_xticks(range(n_k), xticks, fontsize=fontsize, **slant)
        if yticks:
            ax.set_yticks(range(n_q), yticks, fontsize=fontsize)
        ax.set_xlabel(xlabel if r == rows - 1 else "")
        ax.set_ylabel(ylabel if c == 0 else "")
        for (i, j), text in np.ndenumerate(texts[r, c] if texts is not None else []):
            color = "white" if m[r, c, i, j] - lo > 0.6 * (hi - lo) else "black"  # on dark cells
            ax.text(j, i, text, ha="center", va="center", fontsize=fontsize, color=color)
    fig.colorbar(im, ax=axes, shrink=0.8)
    return fig, axes


def draw_norm_placement():
    """Draw one Post-LN and one Pre-LN block side by side (Xiong et al.'s Figure 1), input at
    the bottom, each residual shortcut on the right; returns ``(fig, axes)``."""
    import matplotlib.pyplot as plt

    fill = {"LayerNorm": "#f6e27f", "attention": "#f4b183", "feed-forward": "#9dc3e6"}
    panels = (
        ("Post-LN", ["x", "attention", "+", "LayerNorm", "feed-forward", "+", "LayerNorm"], 2, 5),
        ("Pre-LN", ["x", "LayerNorm", "attention", "+", "LayerNorm", "feed-forward", "+"], 3, 6),
    )
    fig, axes = plt.subplots(1, 2, figsize=(6.4, 4.4))
    for ax, (title, items, plus, plus2) in zip(axes, panels, strict=True):
        ax.set(xlim=(-1.3, 1.6), ylim=(-0.5, len(items) + 0.5), title=title)
        ax.axis("off")
        for i, name in enumerate([*items, "out"]):
            if i:  # the main path, bottom to top
                ax.annotate("", (0, i - 0.26), (0, i - 0.74), arrowprops={"arrowstyle": "->"})
            box = {"boxstyle": "circle" if name == "+" else "round", "fc": fill.get(name, "w")}
            text = {"x": "input $x$", "out": "to the next block"}.get(name, name)
            ax.text(
                0,
                i,
                text,
                ha="center",
                va="center",
                bbox=box if name in fill or name == "+" else None,
            )
        for a, b in ((0, plus), (3, plus2)):  # the shortcuts
            ax.plot([0, 1.1, 1.1], [a + 0.5, a + 0.5, b], "k-", lw=1)
            ax.annotate("", (0.25, b), (1.1, b), arrowprops={"arrowstyle": "->"})
    axes[1].text(0, -0.45, "(a final LayerNorm follows the last block)", ha="center", fontsize=8)
    return fig, axes
