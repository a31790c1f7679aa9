"""Position encodings: how a Transformer is told *where* a token is (chapters 1-3).

Two halves, tested against each other:

- **Pure math (NumPy, float64).** Each function returns an array of shape
  ``(n_positions, dim)``: :func:`index_encoding`, :func:`normalized_index_encoding`,
  :func:`binary_encoding`, :func:`sinusoidal_encoding`; plus :func:`rotation_matrix` (the
  linear map that shifts a sinusoidal encoding by an offset) and :func:`encoding_properties`
  (the numbers chapter 1 scores encodings with).
- **Torch modules** used by the model: :class:`SinusoidalPositionalEncoding` and
  :class:`LearnedPositionalEmbedding` (each maps ``(B, T, d_model) -> (B, T, d_model)``) and
  :class:`RotaryEmbedding` (applied to queries and keys of shape ``(B, n_heads, T, d_head)``
  inside attention).

Two schemes with a paper and an idea of their own live in their own modules and are
importable from here too: MemN2N's multiplicative encoding (:mod:`mini_transformer.memn2n`:
``memn2n_encoding``, ``memn2n_sentence``, ``MemN2NPositionalEncoding``) and ALiBi's linear
attention bias (:mod:`mini_transformer.alibi`: ``alibi_slopes``, ``alibi_bias``, ``ALiBi``).

Notation follows the book: ``pos`` (0-based position), ``i`` (frequency index),
``d_model``, ``T`` (sequence length), ``offset`` (a shift in positions).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

# Re-exported (the book's API contract names them here); documented in their own modules.
from .alibi import ALiBi as ALiBi
from .alibi import alibi_bias as alibi_bias
from .alibi import alibi_slopes as alibi_slopes
from .checks import check_array, check_choice, check_float, check_int, check_size, check_tensor
from .memn2n import MemN2NPositionalEncoding as MemN2NPositionalEncoding
from .memn2n import memn2n_encoding as memn2n_encoding
from .memn2n import memn2n_sentence as memn2n_sentence

__all__ = [
    "index_encoding",
    "normalized_index_encoding",
    "binary_encoding",
    "sinusoidal_frequencies",
    "sinusoidal_encoding",
    "rotation_matrix",
    "encoding_properties",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
]

LAYOUTS = ("interleaved", "concat")


# --------------------------------------------------------------------------- validation
def _check_int(
    name: str, value: object, minimum: int = 1, even: bool = False, why: str = ""
) -> int:
    """A positive (or ``>= minimum``) integer, via :func:`~mini_transformer.checks.check_int`."""
    return check_int(name, value, low=minimum, even=even, why=why)


def _check_base(base: object) -> float:
    """``base >= 1``: the wavelengths run from $2\\pi$ up to $2\\pi \\cdot base$.

    A base below 1 would make them *shorter* than $2\\pi$ (aliased angles), and a tiny one
    makes the frequencies overflow (``base=1e-320`` gives ``inf``).
    """
    return check_float("base", base, low=1, what="a finite number >= 1 (10000 in the paper)")


def _check_offset(offset: object, allow_negative: bool = True) -> int | float:
    if not allow_negative:
        return check_int("offset", offset, low=0)
    check_float("offset", offset, what="a finite real number")
    return offset  # type: ignore[return-value]


def _check_input(x: object, name: str, ndim: int, last: int, last_name: str) -> None:
    check_tensor(name, x, floating=True, ndim=ndim, dims=f"(B, T, {last_name})")
    if x.shape[-1] != last:  # type: ignore[union-attr]
        raise ValueError(
            f"the last dimension of {name} must be {last_name}={last}, got shape {tuple(x.shape)}"
        )  # type: ignore[union-attr]


# --------------------------------------------------------------------------- scalar encodings
def index_encoding(n: int) -> np.ndarray:
    r"""The raw position index as a one-dimensional encoding: $PE_{pos} = pos$.

    Unbounded: a sentence longer than any seen in training produces values never seen.

    Args:
        n: number of positions, ``n >= 1``.

    Returns:
        float64 array of shape ``(n, 1)`` holding ``0, 1, ..., n-1``.
    """
    n = _check_int("n", n)
    check_size("the encoding (n, 1)", (n, 1), np.float64)
    return np.arange(n, dtype=np.float64)[:, None]


def normalized_index_encoding(n: int) -> np.ndarray:
    r"""The position divided by the sentence length: $PE_{pos} = pos / N$ with $N = n$.

    This follows the Korean blog post of chapter 1 ("I" -> 0/5, "love" -> 1/5 for a
    five-word sentence), so values lie in $[0, 1 - 1/N]$ and the step between neighbours is
    $1/N$. (The other common choice, $pos/(N-1)$, reaches exactly 1; both share the flaw the
    book shows: the same position gets a different value, and neighbours a different step, in
    sentences of different length.)

    Args:
        n: sentence length ``N >= 1``.

    Returns:
        float64 array of shape ``(n, 1)``.
    """
    n = _check_int("n", n)
    check_size("the encoding (n, 1)", (n, 1), np.float64)
    return np.arange(n, dtype=np.float64)[:, None] / n


def binary_encoding(n: int, n_bits: int) -> np.ndarray:
    r"""Positions in binary, one bit per column: $PE_{pos,k} = \lfloor pos / 2^k \rfloor \bmod 2$.

    Column ``k`` (least significant first) flips every $2^k$ positions, so it has period
    $2^{k+1}$: the discrete ancestor of the sinusoidal encoding's geometric wavelengths.
    Rows repeat with period $2^{n\_bits}$ (the counter wraps), so they are unique only for
    ``n <= 2**n_bits``.

    Args:
        n: number of positions, ``n >= 1``.
        n_bits: number of bits (columns), ``n_bits >= 1``.

    Returns:
        float64 array of 0s and 1s, shape ``(n, n_bits)``.
    """
    n = _check_int("n", n)
    n_bits = _check_int("n_bits", n_bits)
    check_size("the encoding (n, n_bits)", (n, n_bits), np.float64)
    pos = np.arange(n, dtype=np.int64)[:, None]
    k = np.arange(n_bits, dtype=np.int64)[None, :]
    return ((pos >> k) & 1).astype(np.float64)


# --------------------------------------------------------------------------- sinusoidal
def sinusoidal_frequencies(d_model: int, base: float = 10000.0) -> np.ndarray:
    r"""Angular frequencies $\omega_i = base^{-2i/d_{model}}$, for pairs $i = 0, 1, \dots$

    The wavelength of pair ``i`` is $2\pi/\omega_i$: from $2\pi$ (``i = 0``) up to
    almost $2\pi \cdot base$ (the last pair), a geometric progression.

    Args:
        d_model: encoding dimension, ``d_model >= 1``.
        base: ``base >= 1`` (10000 in the paper).

    Returns:
        float64 array of shape ``(ceil(d_model / 2),)``.
    """
    d_model = _check_int("d_model", d_model)
    base = _check_base(base)
    check_size("the frequencies (ceil(d_model / 2),)", ((d_model + 1) // 2,), np.float64)
    i = np.arange((d_model + 1) // 2, dtype=np.float64)
    return base ** (-2.0 * i / d_model)


def sinusoidal_encoding(
    n_positions: int, d_model: int, base: float = 10000.0, layout: str = "interleaved"
) -> np.ndarray:
    r"""The sinusoidal encoding of Vaswani et al. (2017).

    $$PE_{(pos, 2i)} = \sin(pos\,\omega_i), \quad PE_{(pos, 2i+1)} = \cos(pos\,\omega_i),
    \quad \omega_i = base^{-2i/d_{model}}.$$

    Layouts (the same numbers, columns in a different order):

    - ``"interleaved"`` (the paper): sin in even columns, cos in odd columns,
      ``[sin w0, cos w0, sin w1, cos w1, ...]``.
    - ``"concat"`` (the TensorFlow tutorial code quoted in the Korean blog post of chapter 1):
      all sines, then all cosines, ``[sin w0, sin w1, ..., cos w0, cos w1, ...]``.

    Odd ``d_model``: the last frequency gets a sine column without its cosine partner
    (interleaved: the last column; concat: the sin block has one column more than the cos
    block). Then the norm is no longer constant; use an even ``d_model`` for the identities.

    Args:
        n_positions: number of positions ``pos = 0, ..., n_positions - 1``, at least 1.
        d_model: encoding dimension, at least 1.
        base: ``base >= 1``; 10000 in the paper.
        layout: ``"interleaved"`` or ``"concat"``.

    Returns:
        float64 array of shape ``(n_positions, d_model)``, values in ``[-1, 1]``.

    Example:
        >>> sinusoidal_encoding(5, 6, layout="concat").round(3)[1]
        array([0.841, 0.046, 0.002, 0.54 , 0.999, 1.   ])
    """
    n_positions = _check_int("n_positions", n_positions)
    check_choice("layout", layout, LAYOUTS)
    d_model = _check_int("d_model", d_model)
    check_size("the encoding (n_positions, d_model)", (n_positions, d_model), np.float64)
    omega = sinusoidal_frequencies(d_model, base)  # (ceil(d/2),)
    angles = np.arange(n_positions, dtype=np.float64)[:, None] * omega  # (n, ceil(d/2))
    sin, cos = np.sin(angles), np.cos(angles[:, : d_model // 2])
    if layout == "concat":
        return np.concatenate([sin, cos], axis=1)
    pe = np.empty((n_positions, d_model), dtype=np.float64)
    pe[:, 0::2] = sin
    pe[:, 1::2] = cos
    return pe


def rotation_matrix(offset: float, d_model: int, base: float = 10000.0) -> np.ndarray:
    r"""The block-diagonal rotation $R(k)$ with $PE_{pos+k} = R(k)\,PE_{pos}$ for every ``pos``.

    For the interleaved layout each pair $(\sin pos\,\omega_i, \cos pos\,\omega_i)$ is moved
    by the angle-addition formulas:

    $$\begin{bmatrix}\sin((pos+k)\omega_i)\\ \cos((pos+k)\omega_i)\end{bmatrix}
    = \begin{bmatrix}\cos k\omega_i & \sin k\omega_i\\ -\sin k\omega_i & \cos k\omega_i\end{bmatrix}
    \begin{bmatrix}\sin pos\,\omega_i\\ \cos pos\,\omega_i\end{bmatrix}.$$

    Convention: **column vectors**, ``PE[pos + k] == R @ PE[pos]``. For the rows of a matrix
    ``pe`` use the transpose: ``pe[k:] == pe[:-k] @ R.T``. $R(k)$ is orthogonal,
    $R(k)^\top = R(-k)$ and $R(a)R(b) = R(a+b)$. It does not depend on ``pos``.

    Args:
        offset: the shift $k$ in positions (any real number, negative shifts back).
        d_model: a positive even integer (a rotation needs (sin, cos) pairs).
        base: ``base >= 1``, as in :func:`sinusoidal_encoding`.

    Returns:
        float64 array of shape ``(d_model, d_model)``.
    """
    d_model = _check_int("d_model", d_model, even=True, why=" for a rotation")
    offset = _check_offset(offset)
    check_size("the rotation (d_model, d_model)", (d_model, d_model), np.float64)
    theta = float(offset) * sinusoidal_frequencies(d_model, base)  # (d/2,)
    c, s = np.cos(theta), np.sin(theta)
    R = np.zeros((d_model, d_model), dtype=np.float64)
    idx = np.arange(0, d_model, 2)
    R[idx, idx] = c
    R[idx, idx + 1] = s
    R[idx + 1, idx] = -s
    R[idx + 1, idx + 1] = c
    return R


# --------------------------------------------------------------------------- properties
def encoding_properties(pe: np.ndarray, decimals: int = 12) -> dict:
    r"""The numbers chapter 1 scores an encoding with, computed from its matrix.

    For rows $p_0, \dots, p_{n-1}$ of ``pe``:

    - ``norm_min``, ``norm_max``, ``norm_spread`` (max - min) of $\|p_{pos}\|$;
    - ``neighbour_distance_min/max/spread`` of $\|p_{pos+1} - p_{pos}\|$;
    - ``neighbour_angle_min/max/spread`` (radians) of the angle between $p_{pos}$ and
      $p_{pos+1}$, over the pairs where neither row is the zero vector (``nan`` if none);
    - ``unique`` (all rows distinct after rounding to ``decimals``) and ``n_unique``;
    - ``value_min``, ``value_max``, ``max_abs``: the range of the entries (whether that range
      stays *bounded* as ``n`` grows is seen by comparing two lengths);
    - ``n_positions``, ``dim``.

    A spread of 0 (up to rounding) means the quantity is the same for every position.

    Args:
        pe: array of shape ``(n_positions, dim)`` with ``n_positions >= 2``.
        decimals: rounding used to decide uniqueness.

    Returns:
        dict of Python floats, ints and a bool.
    """
    pe = check_array("pe", pe, nonempty=False)
    decimals = check_int("decimals", decimals)
    if pe.ndim != 2 or pe.shape[0] < 2 or pe.shape[1] < 1:
        raise ValueError(
            f"pe must have shape (n_positions, dim) with n_positions >= 2, got shape {pe.shape}"
        )
    norms = np.linalg.norm(pe, axis=1)
    dist = np.linalg.norm(pe[1:] - pe[:-1], axis=1)
    ok = (norms[:-1] > 0) & (norms[1:] > 0)
    cosang = (pe[:-1] * pe[1:]).sum(axis=1)[ok] / (norms[:-1] * norms[1:])[ok]
    angles = np.arccos(np.clip(cosang, -1.0, 1.0))
    n_unique = int(np.unique(pe.round(decimals), axis=0).shape[0])

    def stats(name: str, v: np.ndarray) -> dict:
        if v.size == 0:
            return {f"{name}_min": math.nan, f"{name}_max": math.nan, f"{name}_spread": math.nan}
        return {
            f"{name}_min": float(v.min()),
            f"{name}_max": float(v.max()),
            f"{name}_spread": float(v.max() - v.min()),
        }

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


# --------------------------------------------------------------------------- torch modules


def _check_positions(x: torch.Tensor, offset: int, d_model: int, max_len: int, hint: str) -> int:
    """Check ``x`` is ``(B, T, d_model)`` and positions ``offset .. offset+T-1`` exist; return T."""
    _check_input(x, "x", 3, d_model, "d_model")
    offset = _check_int("offset", offset, minimum=0)
    T = x.shape[1]
    if offset + T > max_len:
        raise ValueError(
            f"positions up to {offset + T - 1} requested (offset={offset}, T={T}) but "
            f"max_len={max_len}{hint}"
        )
    return T


class SinusoidalPositionalEncoding(nn.Module):
    r"""Adds the fixed sinusoidal encoding: ``x + PE[offset : offset + T]``.

    The table of :func:`sinusoidal_encoding` is computed once in float64, stored as a float32
    buffer of shape ``(max_len, d_model)`` (not saved in checkpoints: it is a function of
    the arguments) and cast to the input's dtype. It has no parameters and works for any
    ``T <= max_len``.

    Args:
        d_model: embedding dimension, at least 1.
        max_len: the longest ``offset + T`` supported, at least 1.
        base: ``base >= 1``.
        layout: ``"interleaved"`` (paper) or ``"concat"``.

    Shape:
        ``(B, T, d_model) -> (B, T, d_model)``.
    """

    def __init__(
        self, d_model: int, max_len: int = 4096, base: float = 10000.0, layout: str = "interleaved"
    ) -> None:
        super().__init__()
        self.d_model = _check_int("d_model", d_model)
        self.max_len = _check_int("max_len", max_len)
        self.base = _check_base(base)
        self.layout = check_choice("layout", layout, LAYOUTS)
        check_size("the table (max_len, d_model)", (self.max_len, self.d_model), np.float64)
        pe = sinusoidal_encoding(self.max_len, self.d_model, self.base, layout)
        self.register_buffer("pe", torch.from_numpy(pe).float(), persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        T = _check_positions(
            x,
            offset,
            self.d_model,
            self.max_len,
            "; build SinusoidalPositionalEncoding with a larger max_len",
        )
        return x + self.pe[offset : offset + T].to(dtype=x.dtype)  # (B, T, d) + (T, d)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, max_len={self.max_len}, base={self.base}, "
            f"layout={self.layout!r}"
        )


class LearnedPositionalEmbedding(nn.Module):
    r"""A learned absolute embedding per position: ``x + W[offset : offset + T]``.

    As in ConvS2S (Gehring et al., 2017), ``W`` of shape ``(max_len, d_model)`` starts as
    $\mathcal{N}(0, \text{init\_std}^2)$ with ``init_std = 0.1``. Positions at or past
    ``max_len`` have no row, so they raise a ValueError: a learned table cannot extrapolate.

    Args:
        max_len: number of positions with a learned row, at least 1.
        d_model: embedding dimension, at least 1.
        init_std: standard deviation of the initial weights, ``>= 0``.

    Shape:
        ``(B, T, d_model) -> (B, T, d_model)``.
    """

    def __init__(self, max_len: int, d_model: int, init_std: float = 0.1) -> None:
        super().__init__()
        self.max_len = _check_int("max_len", max_len)
        self.d_model = _check_int("d_model", d_model)
        self.init_std = check_float("init_std", init_std, low=0)
        check_size("the table (max_len, d_model)", (self.max_len, self.d_model), torch.float32)
        self.weight = nn.Parameter(torch.empty(self.max_len, self.d_model))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, mean=0.0, std=self.init_std)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        T = _check_positions(
            x,
            offset,
            self.d_model,
            self.max_len,
            ": a learned embedding has no row for unseen positions",
        )
        return x + self.weight[offset : offset + T].to(dtype=x.dtype)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}, init_std={self.init_std}"


class RotaryEmbedding(nn.Module):
    r"""Rotary position embedding (RoPE, Su et al., 2021) for queries and keys.

    The vector at position ``pos`` is multiplied by the block rotation $R(pos)$ of
    :func:`rotation_matrix`: each pair of features $(x_{2i}, x_{2i+1})$ becomes

    $$(x_{2i}\cos pos\,\omega_i + x_{2i+1}\sin pos\,\omega_i,\;
      -x_{2i}\sin pos\,\omega_i + x_{2i+1}\cos pos\,\omega_i).$$

    Then $q_m \cdot k_n = q^\top R(m)^\top R(n)\,k = q^\top R(n - m)\,k$ depends on the positions
    only through the offset $n - m$. (RoFormer writes the 2x2 block as its transpose, a
    rotation by $+pos\,\omega_i$; the relative property is the same. Our sign makes RoPE
    applied to $PE_0 = (0, 1, 0, 1, \dots)$ give exactly the sinusoidal $PE_{pos}$.)

    The cos/sin tables are cached for ``max_len`` positions (computed in float64, stored in
    float32) and recomputed, longer, when ``offset + T`` exceeds the cache: RoPE has no
    length limit. Inputs in float16/bfloat16 are rotated in float32 and cast back.

    Args:
        d_head: the per-head dimension, a positive even integer.
        base: ``base >= 1``.
        max_len: initial cache length, at least 1.

    Shape:
        ``forward(x, offset=0)``: ``x`` of shape ``(B, n_heads, T, d_head)`` (any shape
        ``(..., T, d_head)`` works) -> the same shape; ``offset`` is the position of the first
        token (for decoding with a cache).
    """

    def __init__(self, d_head: int, base: float = 10000.0, max_len: int = 4096) -> None:
        super().__init__()
        self.d_head = _check_int("d_head", d_head, even=True, why=" for a rotation")
        self.base = _check_base(base)
        self.max_len = _check_int("max_len", max_len)
        omega = torch.from_numpy(sinusoidal_frequencies(self.d_head, self.base))  # (d/2,) f64
        self.register_buffer("omega", omega, persistent=False)
        check_size(
            "the rotary cache (max_len, d_head / 2)",
            (self.max_len, self.d_head // 2),
            torch.float64,
        )
        self._build_cache(self.max_len, device=None)

    def _build_cache(self, length: int, device: torch.device | None) -> None:
        check_size(
            "the rotary cache (offset + T, d_head / 2)", (length, self.d_head // 2), torch.float64
        )
        omega = self.omega if device is None else self.omega.to(device)
        angles = torch.arange(length, dtype=torch.float64, device=omega.device)[:, None] * omega
        self.register_buffer("cos_cached", angles.cos().float(), persistent=False)  # (L, d/2)
        self.register_buffer("sin_cached", angles.sin().float(), persistent=False)  # (L, d/2)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        check_tensor("x", x, floating=True, min_ndim=2, dims="(B, n_heads, T, d_head)")
        if x.shape[-1] != self.d_head:
            raise ValueError(
                f"the last dimension of x must be d_head={self.d_head}, got shape {tuple(x.shape)}"
            )
        offset = _check_int("offset", offset, minimum=0)
        T = x.shape[-2]
        if offset + T > self.cos_cached.shape[0] or self.cos_cached.device != x.device:
            self._build_cache(max(offset + T, self.cos_cached.shape[0]), device=x.device)
        if x.dtype == torch.float64:  # exact tables for float64 checks
            angles = torch.arange(offset, offset + T, dtype=torch.float64, device=x.device)[
                :, None
            ] * self.omega.to(x.device)
            cos, sin = angles.cos(), angles.sin()  # (T, d/2)
            xf = x
        else:  # float32 tables; float16/bfloat16 inputs are rotated in float32
            cos = self.cos_cached[offset : offset + T]  # (T, d/2)
            sin = self.sin_cached[offset : offset + T]
            xf = x.float()
        # theta = pos * omega_i; each pair (x_2i, x_2i+1) is turned by R(theta):
        x_even, x_odd = xf[..., 0::2], xf[..., 1::2]  # (..., T, d/2)
        out_even = x_even * cos + x_odd * sin  # x'_2i   =  x_2i cos(theta) + x_2i+1 sin(theta)
        out_odd = -x_even * sin + x_odd * cos  # x'_2i+1 = -x_2i sin(theta) + x_2i+1 cos(theta)
        out = torch.stack((out_even, out_odd), dim=-1).flatten(-2)  # (..., T, d_head)
        return out.to(dtype=x.dtype)

    def extra_repr(self) -> str:
        return f"d_head={self.d_head}, base={self.base}, max_len={self.max_len}"
