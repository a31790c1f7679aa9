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
    """Draw a grid of matrices ``(rows, cols, n_q, n_k)`` (or ``(cols, n_q, n_k)``, ``(n_q,
    n_k)``, a list of them) on one colour scale: queries on the y axis, keys on the x axis
    (chapters 4 and 6). Returns ``(fig, axes)``, ``axes`` ``(rows, cols)``. Unlike d2l's, every
    panel shares the one colour bar, so a colour means the same number in every panel.
    ``annotate``: a format such as ``"{:.2f}"`` or strings of the matrices' shape; ``blank``:
    booleans of that shape, cells drawn grey, off the scale (a masked key, a zero gradient).

    >>> fig, axes = show_heatmaps(np.eye(3), xlabel="key", ylabel="query")
    >>> axes.shape, axes[0, 0].images[0].get_clim()
    ((1, 1), (0.0, 1.0))
    """
    import matplotlib.pyplot as plt

    args = (titles, xticklabels, yticklabels, vmin, vmax, annotate, blank, fontsize, figsize)
    m, blanks, lo, hi, texts, titles, xticks, yticks, figsize = _heatmap_inputs(
        matrices, xlabel, ylabel, *args
    )
    rows, cols, n_q, n_k = m.shape
    fig, axes = plt.subplots(rows, cols, figsize=figsize, squeeze=False, layout="constrained")
    colors = plt.colormaps["Blues"].with_extremes(bad="lightgrey")  # a grey Blues never takes
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


def _heatmap_inputs(matrices: Any, xlabel: str, ylabel: str, *options: Any) -> tuple:
    """:func:`show_heatmaps`' arguments checked: the matrices as ``(rows, cols, n_q, n_k)``,
    the blank cells, the colour scale ``lo..hi`` (its default leaves blank cells out: the
    palest colour would hide a small value among exact zeros), the texts, the labels, the size."""
    titles, xticklabels, yticklabels, vmin, vmax, annotate, blank, fontsize, figsize = options
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
    return m, blanks, lo, hi, texts, titles, xticks, yticks, figsize


def draw_head_split(T: int = 3, d_model: int = 8, n_heads: int = 2) -> Any:
    """Draw how multi-head attention splits ``(B, T, d_model)`` into ``(B, h, T, d_head)`` (one
    batch element; chapter 4); return the figure. Why drawn from data: each cell shows the
    memory position ``t * d_model + f`` of an entry, read from a real
    ``view(B, T, h, d_head).transpose(1, 2)``, so the picture is what the code does; the
    lower left draws the wrong ``reshape(B, h, T, d_head)``, whose "heads" mix positions.

    >>> draw_head_split().axes[0].get_title()
    '(B, T, d_model) = (1, 3, 8)  ->  (B, h, T, d_head) = (1, 2, 3, 4)'
    """
    import matplotlib.pyplot as plt

    T, d = check_int("T", T, low=1, high=8), check_int("d_model", d_model, low=1, high=16)
    h = check_int("n_heads", n_heads, low=1, high=d)
    if d % h:
        raise ValueError(f"d_model must be divisible by n_heads, got {d} and {h}")
    k = d // h
    x = torch.arange(T * d).view(1, T, d)  # (1, T, d): entry (t, f) = t * d + f, memory order
    viewed = x.view(1, T, h, k)[0]  # (T, h, d_head)
    split = x.view(1, T, h, k).transpose(1, 2)[0]  # (h, T, d_head): head i, position t
    x2, x3 = d + 5, 2 * d + (h - 1) * 0.4 + 10
    fig, ax = plt.subplots(figsize=(0.4 * (x3 + k + 2), 0.4 * (h * (T + 1.6) + 1.5)))
    colors = plt.get_cmap("tab10").colors

    def grid(x0, y0, values, label, rows="t="):  # rows: prefix of the row labels, "" for none
        for (t, j), f in np.ndenumerate(values.numpy()):
            cell = {"fc": colors[f % d // k % 10], "alpha": 0.45, "ec": "black", "lw": 0.6}
            ax.add_patch(plt.Rectangle((x0 + j, y0 - t - 1), 1, 1, **cell))
            ax.text(x0 + j + 0.5, y0 - t - 0.5, str(f), ha="center", va="center", fontsize=8)
            if j == 0 and rows:
                ax.text(x0 - 0.15, y0 - t - 0.5, f"{rows}{t}", ha="right", va="center", fontsize=7)
        ax.text(x0, y0 + 0.15, label, va="bottom", fontsize=8)

    grid(0, 0, x[0], "x[b]: (T, d_model), entry t * d_model + f")
    wrong = x.reshape(1, h, T, k)[0]  # same shape as the split, but each "head" runs on in memory
    for i in range(h):  # drawn below x: "head" i is the i-th run of T * d_head numbers
        names = ("", "") if i else ("WRONG: reshape(B, h, T, d_head)", "row ")  # rows: not t
        grid(i * (k + 1), -T - 1.6, wrong[i], *names)
    for i in range(h):  # the view: the same memory, read as h blocks of d_head
        grid(x2 + i * (k + 0.4), 0, viewed[:, i], "" if i else "(T, h, d_head)", "" if i else "t=")
    for i in range(h):  # the transpose: head i's block of every position, one (T, d_head) grid
        grid(x3, -i * (T + 1.6), split[i], f"head {i}: (T, d_head)")
    arrows = ((d + 0.3, x2 - 1.3, "view"), (x3 - 4.5, x3 - 1.3, "transpose(1, 2)"))
    for a, b, what in arrows:
        ax.annotate("", (b, -T / 2), (a, -T / 2), arrowprops={"arrowstyle": "->"})
        ax.text((a + b) / 2, -T / 2 - 0.3, what, ha="center", va="top", fontsize=8)
    ax.set_title(f"(B, T, d_model) = (1, {T}, {d})  ->  (B, h, T, d_head) = (1, {h}, {T}, {k})")
    ax.set_xlim(-1.2, x3 + k + 0.2)
    ax.set_ylim(-h * (T + 1.6) + 0.5, 1.0)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig


def draw_decoder_lm(model: torch.nn.Module) -> Any:
    """Draw the data flow of a :class:`~mini_transformer.model.TransformerLM` (chapter 6), from
    token ids to logits and loss, with the shapes; return the figure. Why from a model: the
    names, sizes, positional scheme, norm placement and weight tying are read from ``model``
    (its modules are the ones ``forward`` calls), so the drawing cannot drift from the code.

    >>> from mini_transformer.model import TransformerConfig, TransformerLM
    >>> cfg = TransformerConfig(vocab_size=10, block_size=8, d_model=16, n_heads=2, n_layers=1)
    >>> draw_decoder_lm(TransformerLM(cfg)).axes[0].get_title()
    'TransformerLM.forward: 1 Pre-LN block, d_model = 16, V = 10'
    """
    import matplotlib.pyplot as plt

    c = getattr(model, "config", None)
    if c is None or not hasattr(model, "blocks"):
        raise TypeError(f"model must be a TransformerLM, got {type(model).__name__}")
    pre, d, V = c.norm_position == "pre", c.d_model, c.vocab_size
    fig, ax = plt.subplots(figsize=(8.2, 7.4))
    style = {"ha": "center", "va": "center", "fontsize": 9}

    def box(x, y, text, fc="white"):
        ax.text(x, y, text, bbox={"boxstyle": "round", "fc": fc, "ec": "0.3"}, **style)

    def arrow(a, b, **kw):
        ax.annotate("", b, a, arrowprops={"arrowstyle": "->", "shrinkA": 11, "shrinkB": 11, **kw})

    rope = c.positional in ("rope", "alibi")  # inside attention; the others touch x once
    emb = f"tok_emb: Embedding({V}, {d})" + ("" if rope else f"\n+ {c.positional} positions")
    ax.add_patch(plt.Rectangle((-2.3, -7.0), 7.6, 4.6, fc="0.95", ec="0.5", ls="--"))
    rule = "x + F(LN(x))" if pre else "LN(x + F(x))"
    ax.text(5.2, -6.9, f"blocks: {c.n_layers} × [{rule}]", ha="right", va="bottom", fontsize=9)
    ln_f = "ln_f: LayerNorm" if pre else "ln_f: Identity (Post-LN)"
    main = [(0, 0, "idx (B, T): token ids"), (0, -1.5, emb), (0, -7.8, ln_f)]
    main += [(0, -9.1, f"lm_head: Linear({d}, {V})"), (0, -10.4, "logits (B, T, V)")]
    for x, y, text in main:
        box(x, y, text, "#dbe9f6")
    for a, b in zip(main[:-1], main[1:], strict=True):
        if a[1] != -1.5:
            arrow(a[:2], b[:2])
    attn = f"{'ln1 -> ' if pre else ''}attn: {c.n_heads} heads, causal"
    attn += "\nRoPE turns q, k" if c.positional == "rope" else ""
    ffn = f"{'ln2 -> ' if pre else ''}ffn: {d} -> {c.d_ff} -> {d}"
    points = [(0, -1.5), (0, -4.1), (0, -6.2), (0, -7.8)]
    for y, text in ((-3.4, attn), (-5.5, ffn)):
        box(3, y, text, "#fde7c8")
        arrow((0, y + 0.7), (3, y), shrinkA=0, connectionstyle="angle,angleA=0,angleB=90")
        arrow((3, y), (0, y - 0.7), shrinkB=6, connectionstyle="angle,angleA=-90,angleB=0")
        ax.text(0, y - 0.7, "+", **{**style, "fontsize": 14})
    for a, b in zip(points[:-1], points[1:], strict=True):
        arrow(a, b, shrinkA=8 if a[1] < -2 else 11, shrinkB=8 if b[1] > -7 else 11)
    for y, shape in ((-0.75, "(B, T)"), (-2.05, "(B, T, d_model)"), (-8.5, "(B, T, d_model)")):
        ax.text(0.15, y, shape, fontsize=8, color="0.35")
    if model.lm_head.weight is model.tok_emb.weight:
        arrow((-1.9, -9.1), (-1.9, -1.5), ls=":", connectionstyle="arc3,rad=-0.3")
        ax.text(-3.3, -5.3, "the same\nweight\n(tied)", ha="center", fontsize=8)
    box(3.6, -10.4, "targets (B, T)")
    box(1.8, -11.6, "cross-entropy in float32 -> loss (mean over targets != -100)", "#e3f1dd")
    arrow((0, -10.4), (1.8, -11.6))
    arrow((3.6, -10.4), (1.8, -11.6))
    kind = "Pre" if pre else "Post"
    blocks = "block" if c.n_layers == 1 else "blocks"
    ax.set_title(f"TransformerLM.forward: {c.n_layers} {kind}-LN {blocks}, d_model = {d}, V = {V}")
    ax.set_xlim(-4, 6.5)
    ax.set_ylim(-12.2, 0.5)
    ax.axis("off")
    return fig


def draw_norm_placement():
    """Draw one Post-LN and one Pre-LN block side by side (Xiong et al.'s Figure 1), input at
    the bottom, the residual shortcuts (the identity path) in green on the right; Pre-LN's
    stack ends in one final LayerNorm (dashed); dropout omitted. Returns ``(fig, axes)``."""
    import matplotlib.pyplot as plt

    fill = {"LayerNorm": "#f6e27f", "attention": "#f4b183", "feed-forward": "#9dc3e6"}
    post = ["x", "attention", "+", "LayerNorm", "feed-forward", "+", "LayerNorm"]
    pre = ["x", "LayerNorm", "attention", "+", "LayerNorm", "feed-forward", "+", "LayerNorm"]
    fig, axes = plt.subplots(1, 2, figsize=(6.4, 4.8))
    for ax, items, plus in zip(axes, (post, pre), ((2, 5), (3, 6)), strict=True):
        ax.set(xlim=(-1.3, 1.6), ylim=(-0.6, 8.6), title=f"{'Pre' if 3 in plus else 'Post'}-LN")
        ax.axis("off")
        for i, name in enumerate([*items, "out"]):
            if i:  # the main path, bottom to top
                ax.annotate("", (0, i - 0.26), (0, i - 0.74), arrowprops={"arrowstyle": "->"})
            final = i == 7 and 3 in plus  # Pre-LN: once, after the last block
            box = {"boxstyle": "circle" if name == "+" else "round", "fc": fill.get(name, "w")}
            text = {"x": "input $x$", "out": "output"}.get(name, name)
            ax.text(
                0,
                i,
                "final LayerNorm\n(after the stack)" if final else text,
                ha="center",
                va="center",
                fontsize=9,
                bbox={**box, "ls": "--" if final else "-"} if name in fill or name == "+" else None,
            )
        for a, b in ((0, plus[0]), (3, plus[1])):  # the shortcuts: the identity path
            ax.plot([0, 1.1, 1.1], [a + 0.5, a + 0.5, b], "-", color="C2", lw=2)
            ax.annotate("", (0.25, b), (1.1, b), arrowprops={"arrowstyle": "->", "color": "C2"})
    fig.text(0.5, 0.02, "green: the identity (shortcut) path; dropout omitted", ha="center")
    return fig, axes
