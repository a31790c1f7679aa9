"""Position encodings: how a Transformer is told *where* a token is (chapters 1-3).

NumPy (float64) arrays ``(n_positions, dim)``, and the torch modules the model adds to its
embeddings, ``(B, T, d_model) -> (B, T, d_model)``; ``pos`` is the 0-based position, ``i``
the frequency index. RoPE acts on queries and keys (in :mod:`~mini_transformer.attention`);
MemN2N and ALiBi have modules of their own; all are importable from here.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from . import checks
from .alibi import ALiBi as ALiBi
from .alibi import alibi_bias as alibi_bias
from .alibi import alibi_slopes as alibi_slopes
from .attention import BASE
from .attention import RotaryEmbedding as RotaryEmbedding
from .checks import check_array, check_choice, check_float, check_int, check_rows, check_size
from .memn2n import MemN2NPositionalEncoding as MemN2NPositionalEncoding
from .memn2n import memn2n_encoding as memn2n_encoding

__all__ = [
    "index_encoding",
    "normalized_index_encoding",
    "binary_encoding",
    "sinusoidal_frequencies",
    "sinusoidal_encoding",
    "rotation_matrix",
    "encoding_properties",
    "offset_share",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
]

LAYOUTS = ("interleaved", "concat")


def index_encoding(n: int) -> np.ndarray:
    r"""The raw index, $PE_{pos} = pos$, shape ``(n, 1)``: unbounded, so a sentence longer
    than any seen in training gives values never seen."""
    n = check_int("n", n, low=1)
    check_size("the encoding (n, 1)", (n, 1), np.float64)
    return np.arange(n, dtype=np.float64)[:, None]


def normalized_index_encoding(n: int) -> np.ndarray:
    r"""$PE_{pos} = pos / N$ with $N = n$, shape ``(n, 1)``, values in $[0, 1 - 1/N]$.

    As the Korean blog post of chapter 1 ("I" -> 0/5, "love" -> 1/5). Bounded, but the same
    position gets a different value, and neighbours a different step $1/N$, in sentences of
    different length.
    """
    return index_encoding(n) / n  # pos / N


def binary_encoding(n: int, n_bits: int) -> np.ndarray:
    r"""Positions in binary, $PE_{pos,k} = \lfloor pos / 2^k \rfloor \bmod 2$, ``(n, n_bits)``.

    Bit ``k`` (least significant first) flips every $2^k$ positions: the discrete ancestor of
    the sinusoidal wavelengths. Rows are unique only for ``n <= 2**n_bits`` (the counter wraps).
    """
    n = check_int("n", n, low=1)
    n_bits = check_int("n_bits", n_bits, low=1)
    check_size("the encoding (n, n_bits)", (n, n_bits), np.float64)
    pos = np.arange(n, dtype=np.int64)[:, None]
    k = np.arange(n_bits, dtype=np.int64)[None, :]
    return ((pos >> k) & 1).astype(np.float64)


def sinusoidal_frequencies(d_model: int, base: float = 10000.0) -> np.ndarray:
    r"""$\omega_i = base^{-2i/d_{model}}$ for ``i < ceil(d_model / 2)``: wavelengths $2\pi/\omega_i$
    from $2\pi$ to almost $2\pi \cdot base$, a geometric progression."""
    d_model = check_int("d_model", d_model, low=1)
    base = check_float("base", base, **BASE)
    check_size("the frequencies (ceil(d_model / 2),)", ((d_model + 1) // 2,), np.float64)
    i = np.arange((d_model + 1) // 2, dtype=np.float64)
    return base ** (-2.0 * i / d_model)  # w_i = base^(-2i/d_model)


def sinusoidal_encoding(
    n_positions: int, d_model: int, base: float = 10000.0, layout: str = "interleaved"
) -> np.ndarray:
    r"""The sinusoidal encoding of Vaswani et al. (2017), ``(n_positions, d_model)``.

    $$PE_{(pos, 2i)} = \sin(pos\,\omega_i), \quad PE_{(pos, 2i+1)} = \cos(pos\,\omega_i),
    \quad \omega_i = base^{-2i/d_{model}}.$$

    ``layout="interleaved"`` is the paper's ``[sin w0, cos w0, sin w1, ...]``; ``"concat"``
    is the TensorFlow tutorial's (quoted in section 2.4) ``[sin w0, sin w1, ..., cos w0,
    ...]``: the same columns in another order. An odd ``d_model`` leaves the last sine
    without its cosine, so the norm is no longer constant.

    Example:
        >>> sinusoidal_encoding(5, 6, layout="concat").round(3)[1]
        array([0.841, 0.046, 0.002, 0.54 , 0.999, 1.   ])
    """
    n_positions = check_int("n_positions", n_positions, low=1)
    check_choice("layout", layout, LAYOUTS)
    omega = sinusoidal_frequencies(d_model, base)  # checks d_model, base       (ceil(d/2),)
    check_size("the encoding (n_positions, d_model)", (n_positions, d_model), np.float64)
    angles = np.arange(n_positions, dtype=np.float64)[:, None] * omega  # pos w_i (n, ceil(d/2))
    sin, cos = np.sin(angles), np.cos(angles[:, : d_model // 2])
    if layout == "concat":
        return np.concatenate([sin, cos], axis=1)
    pe = np.empty((n_positions, d_model), dtype=np.float64)
    pe[:, 0::2] = sin  # PE_(pos, 2i) = sin(pos w_i)
    pe[:, 1::2] = cos  # PE_(pos, 2i+1) = cos(pos w_i)
    return pe


def rotation_matrix(offset: float, d_model: int, base: float = 10000.0) -> np.ndarray:
    r"""The block-diagonal rotation $R(k)$ with $PE_{pos+k} = R(k)\,PE_{pos}$ for every ``pos``.

    Each interleaved pair is moved by the angle-addition formulas:

    $$\begin{bmatrix}\sin((pos+k)\omega_i)\\ \cos((pos+k)\omega_i)\end{bmatrix}
    = \begin{bmatrix}\cos k\omega_i & \sin k\omega_i\\ -\sin k\omega_i & \cos k\omega_i\end{bmatrix}
    \begin{bmatrix}\sin pos\,\omega_i\\ \cos pos\,\omega_i\end{bmatrix}.$$

    Column vectors: ``PE[pos + k] == R @ PE[pos]``, so for rows ``pe[k:] == pe[:-k] @ R.T``.
    $R(k)$ is orthogonal, $R(k)^\top = R(-k)$, $R(a)R(b) = R(a+b)$. ``offset`` is any real
    $k$; ``d_model`` must be even (a rotation needs pairs). Returns ``(d_model, d_model)``.
    """
    d_model = check_int("d_model", d_model, low=1, even=True, why=" for a rotation")
    check_float("offset", offset, what="a finite real number")
    check_size("the rotation (d_model, d_model)", (d_model, d_model), np.float64)
    theta = float(offset) * sinusoidal_frequencies(d_model, base)  # k w_i   (d/2,)
    c, s = np.cos(theta), np.sin(theta)
    R = np.zeros((d_model, d_model), dtype=np.float64)
    idx = np.arange(0, d_model, 2)
    R[idx, idx] = R[idx + 1, idx + 1] = c  # [[cos, sin],
    R[idx, idx + 1], R[idx + 1, idx] = s, -s  # [-sin, cos]] per pair
    return R


def encoding_properties(pe: np.ndarray, decimals: int = 12) -> dict:
    r"""The numbers chapter 1 scores an encoding with, from its rows $p_0, \dots, p_{n-1}$ (two
    or more): $\|p_{pos}\|$, $\|p_{pos+1} - p_{pos}\|$ and the neighbour angle (radians, over
    non-zero rows), each as ``_min``, ``_max``, ``_spread`` (0: the same at every position)."""
    pe = check_array("pe", pe, nonempty=False)
    decimals = check_int("decimals", decimals)
    if pe.ndim != 2 or pe.shape[0] < 2 or pe.shape[1] < 1:
        raise ValueError(f"pe must have shape (n_positions >= 2, dim >= 1), got shape {pe.shape}")
    norms = np.linalg.norm(pe, axis=1)
    dist = np.linalg.norm(pe[1:] - pe[:-1], axis=1)
    ok = (norms[:-1] > 0) & (norms[1:] > 0)
    cosang = (pe[:-1] * pe[1:]).sum(axis=1)[ok] / (norms[:-1] * norms[1:])[ok]
    angles = np.arccos(np.clip(cosang, -1.0, 1.0))
    n_unique = int(np.unique(pe.round(decimals), axis=0).shape[0])

    def stats(name: str, v: np.ndarray) -> dict:
        lo, hi = (float(v.min()), float(v.max())) if v.size else (math.nan, math.nan)
        return {f"{name}_min": lo, f"{name}_max": hi, f"{name}_spread": hi - lo}

    return {
        "n_positions": int(pe.shape[0]),
        "dim": int(pe.shape[1]),
        **stats("norm", norms),
        **stats("neighbour_distance", dist),
        **stats("neighbour_angle", angles),
        "unique": n_unique == pe.shape[0],
        "n_unique": n_unique,
        "value_min": float(pe.min()),
        "value_max": float(pe.max()),
        "max_abs": float(np.abs(pe).max()),
    }


def offset_share(S: np.ndarray, mask: np.ndarray | None = None) -> float:
    r"""How relative a table ``S`` ``(T, U)`` of scores or cosines is (chapters 2, 3): the $R^2$ of
    fitting each entry $S_{mn}$ by the mean of its offset $n - m$ (its diagonal), over the entries
    the boolean ``mask`` ``(T, U)`` selects (default all). 1 exactly when they depend on $n - m$
    alone; one mean per offset also fits noise: (offsets - 1) / (entries - 1) in expectation."""
    S = check_array("S", S, min_ndim=2, dims="(T, U)")
    sel = np.ones(S.shape, bool) if mask is None else np.asarray(mask)
    if S.ndim != 2 or sel.shape != S.shape or sel.dtype != bool:
        got = f"got S of shape {S.shape}, mask of dtype {sel.dtype} and shape {sel.shape}"
        raise ValueError(f"S must be 2-D (T, U) and mask a boolean array of its shape; {got}")
    off = (np.arange(S.shape[1]) - np.arange(S.shape[0])[:, None])[sel]  # n - m per entry
    if len(np.unique(off)) < 2 or np.ptp(S[sel]) == 0:  # nothing to fit, or nothing to explain
        raise ValueError("mask must select two offsets n - m at least, and S must vary there")
    v, o = S[sel], off - off.min()
    fit = (np.bincount(o, v) / np.maximum(np.bincount(o), 1))[o]  # each entry's offset mean
    return float(1 - ((v - fit) ** 2).sum() / ((v - v.mean()) ** 2).sum())


def _add_rows(x: torch.Tensor, table: torch.Tensor, offset: int, hint: str):
    """``x + table[offset : offset + T]`` for ``x`` ``(B, T, d_model)``, if those rows exist."""
    max_len, T = table.shape[0], x.shape[1]
    if (last := offset + T - 1) >= max_len:
        what = f"positions up to {last} requested (offset={offset}, T={T})"
        raise ValueError(f"{what} but max_len={max_len}{hint}")
    return x + table[offset : offset + T].to(dtype=x.dtype)  # (B, T, d) + (T, d)


class SinusoidalPositionalEncoding(nn.Module):
    r"""Adds the fixed sinusoidal encoding: ``x + PE[offset : offset + T]``.

    The table of :func:`sinusoidal_encoding`, computed in float64, is a float32 buffer
    ``(max_len, d_model)`` not saved in checkpoints (it is a function of the arguments).
    """

    def __init__(
        self, d_model: int, max_len: int = 4096, base: float = 10000.0, layout: str = "interleaved"
    ) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, low=1)
        self.max_len = check_int("max_len", max_len, low=1)
        check_size("the table (max_len, d_model)", (self.max_len, self.d_model), np.float64)
        pe = sinusoidal_encoding(self.max_len, self.d_model, base, layout)  # checks the rest
        self.base, self.layout = float(base), layout
        self.register_buffer("pe", torch.from_numpy(pe).float(), persistent=False)

    @checks.entry(check_rows)  # checked only when called directly, not inside a model
    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return _add_rows(x, self.pe, offset, "; build it with a larger max_len")

    def extra_repr(self) -> str:
        layout = self.layout
        return f"d_model={self.d_model}, max_len={self.max_len}, base={self.base}, {layout=}"


class LearnedPositionalEmbedding(nn.Module):
    r"""A learned absolute embedding per position: ``x + W[offset : offset + T]``.

    As in ConvS2S (Gehring et al., 2017), ``W`` ``(max_len, d_model)`` starts as
    $\mathcal{N}(0, \text{init\_std}^2)$. A position at or past ``max_len`` has no row, so it
    is a ValueError: a learned table cannot extrapolate.
    """

    def __init__(self, max_len: int, d_model: int, init_std: float = 0.1) -> None:
        super().__init__()
        self.max_len = check_int("max_len", max_len, low=1)
        self.d_model = check_int("d_model", d_model, low=1)
        self.init_std = check_float("init_std", init_std, low=0)
        check_size("the table (max_len, d_model)", (self.max_len, self.d_model), torch.float32)
        self.weight = nn.Parameter(torch.empty(self.max_len, self.d_model))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, mean=0.0, std=self.init_std)

    @checks.entry(check_rows)
    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        hint = ": a learned embedding has no row for unseen positions"
        return _add_rows(x, self.weight, offset, hint)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}, init_std={self.init_std}"
