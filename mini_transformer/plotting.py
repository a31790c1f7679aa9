"""What the chapters share around the model: set-up, tables and the attention heatmap.

Why a function and not a copy-pasted cell: nbval compares every stored output when CI
re-executes the book, so each chapter must start from exactly the same random state and
the same number of threads (large float reductions differ in the last digits between one
and two threads). One function keeps the six chapters identical in this respect. The same
reasoning holds for figures: chapters 4 and 6 draw grids of attention (and gradient) maps
with :func:`show_heatmaps` instead of repeating the ``imshow`` code in each cell.

matplotlib is imported inside the functions that draw: the package itself does not need it.
"""

from __future__ import annotations

import html
import os
import random
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .checks import check_array, check_bool, check_float, check_instance


def setup(seed: int = 0, threads: int = 1) -> np.random.Generator:
    """Make a notebook reproducible and return a seeded NumPy generator.

    Seeds Python's ``random``, NumPy's legacy global state and torch; sets torch to
    ``threads`` intra-op threads; and sets matplotlib to PNG figures of a fixed size
    (SVG output embeds a date, which would break nbval's comparison).

    Args:
        seed: a non-negative integer seed.
        threads: number of torch threads, at least 1. One thread makes float sums bit-stable.

    Returns:
        ``np.random.default_rng(seed)``, the generator a chapter should draw from.

    Example:
        >>> rng = setup(0)
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
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
    try:  # inside IPython: PNG only (SVG breaks nbval, see TOOLCHAIN notes)
        from IPython import get_ipython

        ip = get_ipython()
        if ip is not None:
            from matplotlib_inline.backend_inline import set_matplotlib_formats

            ip.run_line_magic("matplotlib", "inline")  # even if MPLBACKEND says otherwise

            set_matplotlib_formats("png")
    except ImportError:
        pass
    return np.random.default_rng(seed)


#: The only markup a cell may carry (chapter 3 writes ``0.68<br><small>0.67–0.69</small>``).
TABLE_TAGS = ("br", "small", "b", "i", "em", "strong", "sub", "sup", "code")
_ALLOWED = re.compile(r"&lt;(/?(?:" + "|".join(TABLE_TAGS) + r"))&gt;")


def _cell(value: object) -> str:
    """``str(value)`` HTML-escaped, except the bare tags of :data:`TABLE_TAGS`."""
    return _ALLOWED.sub(r"<\1>", html.escape(str(value), quote=False))


def html_table(header: Sequence[object], rows: Sequence[Sequence[object]]) -> str:
    """A small HTML table of ``header`` and ``rows`` (cells shown with ``str``, escaped).

    Cell text is HTML-escaped (``<``, ``>``, ``&``), so a cell shows what it holds; only
    the bare tags of :data:`TABLE_TAGS` (``<br>``, ``<small>``, ...) pass as markup.

    Chapters 1 and 3 show their result tables this way rather than as wide printed text:
    the book renders the HTML, and nbval compares it as text.

    Example:
        >>> html_table(["a", "b"], [[1, 2]]).count("<td>")
        2
    """
    if isinstance(header, str) or not isinstance(header, Sequence):
        raise TypeError(f"header must be a sequence of column names, got {type(header).__name__}")
    for i, row in enumerate(rows):
        if isinstance(row, str) or not isinstance(row, Sequence) or len(row) != len(header):
            raise ValueError(f"rows[{i}] must be a sequence of {len(header)} cells, got {row!r}")
    head = "".join(f"<th>{_cell(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def show_table(header: Sequence[object], rows: Sequence[Sequence[object]]) -> None:
    """Display :func:`html_table` in a notebook."""
    from IPython.display import HTML, display

    display(HTML(html_table(header, rows)))


def _panels(matrices: Any) -> tuple[np.ndarray, tuple[int, ...]]:
    """``matrices`` as a float array of shape (rows, cols, n_q, n_k), and the shape given."""
    if isinstance(matrices, (list, tuple)):  # a list of tensors (that may require grad)
        matrices = [
            t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else t for t in matrices
        ]
    m = check_array("matrices", matrices, min_ndim=2, dims="(rows, cols, n_q, n_k)")
    if m.ndim > 4:
        raise ValueError(
            f"matrices must have 2, 3 or 4 dimensions (rows, cols, n_q, n_k), got shape {m.shape}"
        )
    return m.reshape((1,) * (4 - m.ndim) + m.shape), m.shape


def _check_labels(name: str, labels: object, n: int, what: str) -> list[str] | None:
    """``None``, or a non-string sequence of exactly ``n`` labels (shown with ``str``)."""
    if labels is None:
        return None
    if isinstance(labels, str) or not isinstance(labels, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be None or a sequence of {n} {what}, got {labels!r}")
    if len(labels) != n:
        raise ValueError(f"{name} must hold {n} {what}, got {len(labels)}")
    return [str(label) for label in labels]


def _annotations(annotate: object, m: np.ndarray, given: tuple[int, ...]) -> np.ndarray | None:
    """The text of every cell, shape ``m.shape``: from a format string, or as given."""
    if annotate is None:
        return None
    if isinstance(annotate, str):
        return np.vectorize(annotate.format, otypes=[object])(m)
    texts = np.asarray(annotate, dtype=object)
    if texts.shape not in (given, m.shape):
        raise ValueError(
            f"annotate must be a format string such as '{{:.2f}}' or strings of the shape of "
            f"matrices {given}, got shape {texts.shape}"
        )
    return texts.reshape(m.shape)


def _blank_cells(
    blank: object, m: np.ndarray, given: tuple[int, ...], color: object
) -> np.ndarray | None:
    """``blank`` as a boolean array of shape ``m.shape`` (None: no blank cell)."""
    from matplotlib.colors import is_color_like

    if not is_color_like(color):
        raise ValueError(
            f"blank_color must be a matplotlib colour such as 'lightgrey', got {color!r}"
        )
    if blank is None:
        return None
    if isinstance(blank, torch.Tensor):
        blank = blank.detach().cpu().numpy()
    cells = np.asarray(blank)
    if cells.dtype != np.bool_:
        raise TypeError(f"blank must be None or a boolean array, got dtype {cells.dtype}")
    if cells.shape not in (given, m.shape):
        raise ValueError(f"blank must have the shape of matrices {given}, got shape {cells.shape}")
    return cells.reshape(m.shape)


def _color_limits(
    m: np.ndarray, vmin: object, vmax: object, blank: np.ndarray | None
) -> tuple[float, float]:
    """The shared colour scale: ``vmin``/``vmax`` where given, else the min/max of the
    entries on the scale (all of them, or those not ``blank`` when any is not)."""
    shown = m[~blank] if blank is not None and not blank.all() else m
    lo = float(shown.min()) if vmin is None else check_float("vmin", vmin)
    hi = float(shown.max()) if vmax is None else check_float("vmax", vmax)
    if lo >= hi and (vmin is not None or vmax is not None):
        raise ValueError(
            f"vmin must be smaller than vmax (the largest entry when vmax is not given), "
            f"got vmin={lo!r}, vmax={hi!r}"
        )
    return lo, hi


def show_heatmaps(
    matrices: Any,
    *,
    xlabel: str,
    ylabel: str,
    titles: Sequence[str] | None = None,
    xticklabels: Sequence[object] | None = None,
    yticklabels: Sequence[object] | None = None,
    cmap: str = "Blues",
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: Any = None,
    blank: Any = None,
    blank_color: str = "lightgrey",
    fontsize: float | None = None,
    colorbar: bool = True,
    figsize: tuple[float, float] | None = None,
) -> tuple[Any, np.ndarray]:
    """Draw a grid of matrices (attention weights, gradient norms) on one colour scale.

    Why one colour scale: panels are compared with each other ("the scaled rows are softer"),
    so a colour must mean the same number in every panel, and the one colour bar must be true
    for all of them (d2l's ``show_heatmaps`` lets each panel scale itself and draws the bar of
    the last one). By default the scale runs from the smallest to the largest entry of all the
    matrices; attention weights pass ``vmin=0, vmax=1``.

    Chapter 4 draws attention weights, gradient maps and cross-attention heads with it, chapter
    6 the heads of a trained model.

    Args:
        matrices: array-like (tensor, array, or list of them) of shape ``(rows, cols, n_q,
            n_k)``, ``(cols, n_q, n_k)`` (one row) or ``(n_q, n_k)`` (one panel). A matrix's
            rows are queries (y axis), its columns keys (x axis).
        xlabel: the x-axis label, under each panel of the bottom row.
        ylabel: the y-axis label, left of each panel of the first column.
        titles: one title per panel, ``rows * cols`` of them in row-major order.
        xticklabels: ``n_k`` labels, one per key (words, characters); labels longer than two
            characters are slanted so that neighbours do not overlap.
        yticklabels: ``n_q`` labels, one per query.
        cmap: a matplotlib colormap name.
        vmin: the low end of the shared colour scale (default: the smallest entry).
        vmax: the high end of the shared colour scale (default: the largest entry).
        annotate: text written in every cell: a format string such as ``"{:.2f}"`` applied to
            each entry, or strings of the shape of ``matrices`` (e.g. ``"X"`` where masked).
        blank: ``None``, or booleans of the shape of ``matrices``: True cells are drawn in
            ``blank_color``, off the colour scale. Why: the palest colour of a scale starting
            at 0 (Blues' ``#f7fbff``) is hard to tell from a small value's, so cells that are
            *exactly* zero (a masked key, a gradient that cannot flow) are better set apart,
            e.g. ``blank=G == 0``. The default limits then come from the other cells.
        blank_color: a matplotlib colour for the blank cells (default: light grey, a neutral
            colour that a hued colormap such as Blues never takes).
        fontsize: size of the tick labels and annotations (``None``: matplotlib's default).
        colorbar: draw one colour bar for the whole grid.
        figsize: figure size in inches (``None``: 2.6 per column and 2.4 per row, plus margins).

    Returns:
        ``(fig, axes)``, ``axes`` a NumPy array of shape ``(rows, cols)``.

    Example:
        >>> fig, axes = show_heatmaps(np.eye(3), xlabel="key", ylabel="query")
        >>> axes.shape, axes[0, 0].images[0].get_clim()
        ((1, 1), (0.0, 1.0))
    """
    import matplotlib as mpl
    import matplotlib.pyplot as plt

    m, given = _panels(matrices)
    rows, cols, n_q, n_k = m.shape
    check_instance("xlabel", xlabel, str, "a string")
    check_instance("ylabel", ylabel, str, "a string")
    titles = _check_labels("titles", titles, rows * cols, "panel titles (rows * cols)")
    xticks = _check_labels("xticklabels", xticklabels, n_k, "labels (one per key, n_k)")
    yticks = _check_labels("yticklabels", yticklabels, n_q, "labels (one per query, n_q)")
    if not (isinstance(cmap, str) and cmap in mpl.colormaps):
        raise ValueError(f"cmap must be a matplotlib colormap name such as 'Blues', got {cmap!r}")
    blanks = _blank_cells(blank, m, given, blank_color)
    lo, hi = _color_limits(m, vmin, vmax, blanks)
    texts = _annotations(annotate, m, given)
    if fontsize is not None:
        check_float("fontsize", fontsize, low=0, low_open=True)
    check_bool("colorbar", colorbar)
    if figsize is None:
        figsize = (1.2 + 2.6 * cols, 0.6 + 2.4 * rows)
    elif isinstance(figsize, str) or not isinstance(figsize, Sequence) or len(figsize) != 2:
        raise TypeError(f"figsize must be None or (width, height) in inches, got {figsize!r}")
    for name, inches in zip(("figsize width", "figsize height"), figsize, strict=True):
        check_float(name, inches, low=0, low_open=True)
    fig, axes = plt.subplots(rows, cols, figsize=figsize, squeeze=False, layout="constrained")
    colors = mpl.colormaps[cmap].with_extremes(bad=blank_color)
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
            dark = m[r, c, i, j] - lo > 0.6 * (hi - lo)  # white text on the dark cells
            color = "white" if dark else "black"
            ax.text(j, i, text, ha="center", va="center", fontsize=fontsize, color=color)
    if colorbar:
        fig.colorbar(im, ax=axes, shrink=0.8)
    return fig, axes
