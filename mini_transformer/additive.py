"""Additive (Bahdanau) attention, the score function chapter 4 compares with dot products.

Vaswani et al. (2017, section 3.2.1) chose the scaled dot product for speed and memory, and
report that additive attention beats the *unscaled* dot product for larger :math:`d_k`;
:mod:`mini_transformer.scoring` repeats that comparison in miniature.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .checks import check_bool, check_int, check_size, check_tensor
from .masks import rows_with_keys

__all__ = ["AdditiveAttention"]


class AdditiveAttention(nn.Module):
    """Single-head additive (Bahdanau) attention.

    .. math::

        e_{ij} = w^\\top \\tanh(W_q x_i + W_k c_j), \\qquad
        a_{ij} = \\operatorname{softmax}_j(e_{ij}), \\qquad o_i = \\sum_j a_{ij} v_j ,

    the "additive attention" of Vaswani et al. (section 3.2.1): a feed-forward network with
    one hidden layer of width ``d_attn`` (the :math:`d_k` of the comparison). The values are
    used as given; masks as in :func:`~mini_transformer.attention.scaled_dot_product_attention`.
    """

    def __init__(self, d_query: int, d_key: int, d_attn: int) -> None:
        super().__init__()
        for name, n in (("d_query", d_query), ("d_key", d_key), ("d_attn", d_attn)):
            check_int(name, n, low=1)
        self.d_attn = d_attn
        self.q_proj = nn.Linear(d_query, d_attn, bias=False)
        self.k_proj = nn.Linear(d_key, d_attn, bias=True)
        self.w = nn.Parameter(torch.empty(d_attn).uniform_(-1, 1) / math.sqrt(d_attn))

    def scores(self, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        r"""$e_{ij} = w^\top \tanh(W_q x_i + W_k c_j + b)$, ``(..., T_q, T_k)``.

        Bahdanau et al. (2015, appendix A.1.2) write $v_a^\top \tanh(W_a s_{i-1} + U_a h_j)$.
        The score needs the ``(..., T_q, T_k, d_attn)`` tensor of sums, not one matrix
        product: that is why it is slower and uses more memory than a dot product (Vaswani et
        al., section 3.2.1). $|e_{ij}| \le \lVert w \rVert_1$ since $|\tanh| \le 1$.
        """
        q, k = self.q_proj(x), self.k_proj(context)  # W_q x_i, W_k c_j + b   (..., T, d_attn)
        try:
            lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
        except RuntimeError:
            shapes = f"x {tuple(x.shape)} and context {tuple(context.shape)}"
            raise ValueError(f"the leading dimensions of {shapes} must broadcast") from None
        shape = (*lead, q.shape[-2], k.shape[-2], self.d_attn)
        check_size("the (..., T_q, T_k, d_attn) sums", shape, q.dtype)
        hidden = torch.tanh(q.unsqueeze(-2) + k.unsqueeze(-3))  # (..., T_q, T_k, d_attn)
        return hidden @ self.w  # e_ij = w^T tanh(...)   (..., T_q, T_k)

    def forward(
        self, x: torch.Tensor, context: torch.Tensor, value: torch.Tensor | None = None,
        mask: torch.Tensor | None = None, return_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """Attend from ``x`` ``(..., T_q, d_query)`` to ``context`` ``(..., T_k, d_key)``;
        ``value`` ``(..., T_k, d_v)`` defaults to ``context``. Returns ``out`` ``(..., T_q,
        d_v)``, or ``(out, weights)``."""
        kw = {"floating": True, "dtype_of": self.q_proj.weight}
        d_q, d_k = self.q_proj.in_features, self.k_proj.in_features
        check_tensor("x", x, shape=(..., None, d_q), dims="(..., T, d_query)", **kw)
        check_tensor("context", context, shape=(..., None, d_k), dims="(..., T_k, d_key)", **kw)
        check_bool("return_weights", return_weights)
        value, T_k = context if value is None else value, context.shape[-2]
        dims = f"(..., T_k={T_k}, d_v)"
        check_tensor("value", value, floating=True, shape=(..., T_k, None), dims=dims)
        scores = self.scores(x, context)  # (..., T_q, T_k)
        if mask is not None:  # masked as in mini_transformer.attention
            dims = "(..., T_q, T_k)"
            check_tensor("mask", mask, boolean=True, broadcast_to=tuple(scores.shape), dims=dims)
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1)
        out = weights @ value  # (..., T_q, d_v)
        if (has_key := rows_with_keys(mask)) is not None:  # fully masked rows: 0
            out, weights = out * has_key, weights * has_key
        return (out, weights) if return_weights else out

    def extra_repr(self) -> str:
        return f"d_attn={self.d_attn}"
