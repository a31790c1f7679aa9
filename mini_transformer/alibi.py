r"""ALiBi, attention with linear biases (Press et al., 2022; chapter 3).

ALiBi adds no vector to the tokens: it adds $-m_h\,|i - j|$ to the score of query $i$ and
key $j$ in head $h$, a penalty linear in distance with a fixed slope per head. So it acts
*inside* attention, like RoPE, and is given to
:class:`~mini_transformer.attention.MultiHeadAttention` at construction.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from . import checks
from .checks import check_int, check_size

__all__ = ["alibi_slopes", "alibi_bias", "ALiBi"]


def alibi_slopes(n_heads: int) -> torch.Tensor:
    r"""The per-head slopes $m_h$, float32 ``(n_heads,)`` in the paper's order.

    For ``n_heads`` a power of two, $m_h = 2^{-8h/n}$, $h = 1, \dots, n$ (8 heads: 1/2, 1/4,
    ..., 1/256). Otherwise the paper's rule: the slopes of the closest power of two $m < n$,
    then every other slope of $2m$ heads until there are $n$ (``alibi_slopes(6)`` starts
    0.25, 0.0625, ..., then 0.5).
    """
    n_heads = check_int("n_heads", n_heads, low=1)
    check_size("the slopes (n_heads,)", (n_heads,), torch.float32)

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]  # m_h = 2^(-8h/n)

    if n_heads & (n_heads - 1) == 0:
        slopes = power_of_two(n_heads)
    else:
        m = 2 ** math.floor(math.log2(n_heads))
        slopes = power_of_two(m) + power_of_two(2 * m)[0::2][: n_heads - m]
    return torch.tensor(slopes, dtype=torch.float32)


def _check_lengths(T_q: int, T_k: int | None = None) -> tuple[int, int]:
    T_q, why = check_int("T_q", T_q, low=1), " (queries are the last T_q)"
    return T_q, T_q if T_k is None else check_int("T_k", T_k, low=T_q, why=why)


def alibi_bias(n_heads: int, T_q: int, T_k: int | None = None) -> torch.Tensor:
    r"""ALiBi's additive bias $b_{h,i,j} = -m_h\,|i - j|$, float32 ``(n_heads, T_q, T_k)``.

    For the keys a causal query sees ($j \le i$) this is the paper's $-m_h (i - j)$; the
    symmetric $j > i$ half is removed by a causal mask. With ``T_k > T_q`` (decoding with a
    cache) the queries are the *last* ``T_q`` of ``T_k`` positions.
    """
    T_q, T_k = _check_lengths(T_q, T_k)
    slopes = alibi_slopes(n_heads)  # m_h, checks n_heads                      (h,)
    check_size("the bias (n_heads, T_q, T_k)", (len(slopes), T_q, T_k), torch.float32)
    i = torch.arange(T_k - T_q, T_k, dtype=torch.float32)[:, None]  # query positions (T_q, 1)
    j = torch.arange(T_k, dtype=torch.float32)[None, :]  # key positions            (1, T_k)
    return -slopes[:, None, None] * (i - j).abs()  # B_hij = -m_h |i - j|  (h, T_q, T_k)


class ALiBi(nn.Module):
    r""":func:`alibi_bias` as a module, one instance shared by every attention layer.

    The table for ``max_len`` positions is built once and sliced per call (the bias depends on
    ``i - j`` only, so a slice equals :func:`alibi_bias`'s own bit for bit); longer sequences
    get :func:`alibi_bias`'s. ``forward(T_q, T_k=None)`` -> ``(n_heads, T_q, T_k)``.
    """

    def __init__(self, n_heads: int, max_len: int) -> None:
        super().__init__()
        self.n_heads = check_int("n_heads", n_heads, low=1)
        self.max_len = check_int("max_len", max_len, low=1)
        shape = (self.n_heads, self.max_len, self.max_len)
        check_size("the ALiBi table (n_heads, max_len, max_len)", shape, torch.float32)
        self.register_buffer("bias", alibi_bias(n_heads, max_len), persistent=False)

    @checks.entry(lambda self, T_q, T_k=None: _check_lengths(T_q, T_k))  # either way: a slice
    def forward(self, T_q: int, T_k: int | None = None) -> torch.Tensor:
        T_k = T_q if T_k is None else T_k
        if T_k > self.bias.shape[-1]:
            return alibi_bias(self.n_heads, T_q, T_k).to(self.bias.device)
        return self.bias[:, T_k - T_q : T_k, :T_k]  # (n_heads, T_q, T_k)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, max_len={self.max_len}"
