"""Notebook set-up shared by every chapter: seeds, thread count and figure defaults.

Why a function and not a copy-pasted cell: nbval compares every stored output when CI
re-executes the book, so each chapter must start from exactly the same random state and
the same number of threads (large float reductions differ in the last digits between one
and two threads). One function keeps the six chapters identical in this respect.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence

import numpy as np
import torch


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


def html_table(header: Sequence[object], rows: Sequence[Sequence[object]]) -> str:
    """A small HTML table of ``header`` and ``rows`` (cells shown with ``str``).

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
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def show_table(header: Sequence[object], rows: Sequence[Sequence[object]]) -> None:
    """Display :func:`html_table` in a notebook."""
    from IPython.display import HTML, display

    display(HTML(html_table(header, rows)))
