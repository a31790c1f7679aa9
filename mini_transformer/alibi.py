r"""ALiBi, attention with linear biases (Press et al., 2022; chapter 3).

ALiBi adds no vector to the tokens. It adds $-m_h\,|i - j|$ to the attention score of query
$i$ and key $j$ in head $h$: a penalty linear in distance, with a fixed slope per head. It
therefore acts *inside* attention, like RoPE, and is given to
:class:`~mini_transformer.attention.MultiHeadAttention` at construction.

- :func:`alibi_slopes`: the per-head slopes $m_h$.
- :func:`alibi_bias`: the bias tensor ``(n_heads, T_q, T_k)``.
- :class:`ALiBi`: the bias as a module with a cached table, shared by every layer.

:mod:`mini_transformer.positional` re-exports these names.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .checks import check_int, check_size

__all__ = ["alibi_slopes", "alibi_bias", "ALiBi"]


def _check_int(name: str, value: object) -> int:
    return check_int(name, value, low=1)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    r"""The per-head slopes $m_h$ of ALiBi (Press et al., 2021).

    For ``n_heads`` a power of two, a geometric sequence that starts at $2^{-8/n}$ with ratio
    $2^{-8/n}$: $m_h = 2^{-8h/n}$, $h = 1, \dots, n$ (for 8 heads: 1/2, 1/4, ..., 1/256).
    Otherwise the paper's rule: take the slopes of the closest power of two $m < n$, then
    append every other slope of $2m$ heads until there are $n$.

    Args:
        n_heads: ``n_heads >= 1``.

    Returns:
        float32 tensor of shape ``(n_heads,)`` in ``(0, 1)``, in the paper's order: decreasing
        for a power of two; otherwise the ``p`` slopes of the closest smaller power of two,
        then the interleaved ones (``alibi_slopes(6)`` starts 0.25, 0.0625, ..., then 0.5).
    """
    n_heads = _check_int("n_heads", n_heads)
    check_size("the slopes (n_heads,)", (n_heads,), torch.float32)

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    if n_heads & (n_heads - 1) == 0:
        slopes = power_of_two(n_heads)
    else:
        m = 2 ** math.floor(math.log2(n_heads))
        slopes = power_of_two(m) + power_of_two(2 * m)[0::2][: n_heads - m]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(n_heads: int, T_q: int, T_k: int | None = None) -> torch.Tensor:
    r"""ALiBi's additive attention bias, $b_{h,i,j} = -m_h\,|i - j|$.

    For $j \le i$ (the keys a causal query may see) this is $-m_h (i - j)$, the paper's
    linear penalty on distance; for $j > i$ it is the symmetric $-m_h (j - i)$, which a causal
    mask removes anyway (masking is separate: combine with ``attention.causal_mask``). When
    ``T_k > T_q`` the queries are taken to be the *last* ``T_q`` of ``T_k`` positions (as when
    decoding with a cache): query ``i`` sits at position ``i + T_k - T_q``.

    Args:
        n_heads: ``n_heads >= 1``.
        T_q: number of queries, ``T_q >= 1``.
        T_k: number of keys, ``T_k >= T_q`` (default ``T_q``).

    Returns:
        float32 tensor of shape ``(n_heads, T_q, T_k)``, to be added to the attention scores.
    """
    T_q = _check_int("T_q", T_q)
    T_k = T_q if T_k is None else _check_int("T_k", T_k)
    if T_k < T_q:
        raise ValueError(
            f"T_k must be >= T_q (queries are the last T_q of T_k positions), "
            f"got T_q={T_q}, T_k={T_k}"
        )
    n_heads = _check_int("n_heads", n_heads)
    check_size("the bias (n_heads, T_q, T_k)", (n_heads, T_q, T_k), torch.float32)
    slopes = alibi_slopes(n_heads)  # m_h = 2^(-8h/n) for n a power of two     (h,)
    i = torch.arange(T_k - T_q, T_k, dtype=torch.float32)[:, None]  # query positions (T_q, 1)
    j = torch.arange(T_k, dtype=torch.float32)[None, :]  # key positions            (1, T_k)
    return -slopes[:, None, None] * (i - j).abs()  # B_hij = -m_h |i - j|  (h, T_q, T_k)


class ALiBi(nn.Module):
    r"""ALiBi's bias :func:`alibi_bias` as a module attention holds (Press et al., 2022).

    The table for ``max_len`` positions is built once and sliced per call (the bias depends
    on ``i - j`` only, so slicing is exact); longer sequences get a table built for them.
    One instance is shared by every attention layer of a model, as :class:`RotaryEmbedding`.

    Shape:
        ``forward(T_q, T_k=None)`` -> ``(n_heads, T_q, T_k)``, the queries being the last
        ``T_q`` of ``T_k`` positions.
    """

    def __init__(self, n_heads: int, max_len: int) -> None:
        super().__init__()
        self.n_heads = _check_int("n_heads", n_heads)
        self.max_len = _check_int("max_len", max_len)
        shape = (self.n_heads, self.max_len, self.max_len)
        check_size("the ALiBi table (n_heads, max_len, max_len)", shape, torch.float32)
        self.register_buffer("bias", alibi_bias(n_heads, max_len), persistent=False)

    def forward(self, T_q: int, T_k: int | None = None) -> torch.Tensor:
        T_q = _check_int("T_q", T_q)
        T_k = T_q if T_k is None else _check_int("T_k", T_k)
        if T_k < T_q:
            raise ValueError(f"T_k must be >= T_q, got T_q={T_q}, T_k={T_k}")
        if T_k <= self.bias.shape[-1]:
            return self.bias[:, T_k - T_q : T_k, :T_k]  # (n_heads, T_q, T_k)
        return alibi_bias(self.n_heads, T_q, T_k).to(self.bias.device)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, max_len={self.max_len}"
