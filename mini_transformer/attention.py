r"""Masked scaled dot-product attention, multi-head attention (chapter 4) and RoPE (chapter 2).

Chapter 4 is one formula, $\operatorname{softmax}(Q K^\top / \sqrt{d_k} + B + M)\,V$: $B$
an optional additive bias (ALiBi), $M$ the mask. A mask is **boolean**, ``True`` = *may
attend*, as in PyTorch; masked scores get ``torch.finfo(dtype).min``, not ``-inf`` (a row
with every key masked would give ``0/0 = NaN``) and not ``-2**30`` (``-inf`` in float16).
A query whose keys are all masked (a ``-inf`` bias counts as masked) gets zero weights and
a zero output, never NaN, on both the from-scratch and the fused path
(``masks.rows_with_keys``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import checks
from .alibi import ALiBi
from .checks import (
    check_bool,
    check_float,
    check_heads,
    check_instance,
    check_int,
    check_probability,
    check_scores,
    check_size,
    check_tensor,
)
from .masks import _known_all, causal_mask, combine_masks, rows_with_keys  # noqa: F401
from .masks import padding_mask as padding_mask  # noqa: F401 (the API contract names it here)

__all__ = ["scaled_dot_product_attention", "MultiHeadAttention", "RotaryEmbedding"]

# base < 1 would make wavelengths shorter than 2 pi (aliased angles); a tiny one overflows
BASE = {"low": 1, "what": "a finite number >= 1 (10000 in the paper)"}


def _split_bias(score_bias, mask):
    """Turn ``-inf`` bias entries into masked keys (and 0 in the bias), so a row that is
    ``-inf`` everywhere follows the masked-row rule instead of giving NaN."""
    blocked = score_bias == float("-inf")  # shape of the bias, e.g. (n_heads, T_q, T_k)
    if _known_all(~blocked):
        return score_bias, mask
    allowed = ~blocked if mask is None else mask & ~blocked
    return score_bias.masked_fill(blocked, 0.0), allowed


def _attend(q, k, v, mask, score_bias, scale, dropout_p):
    """The computation of :func:`scaled_dot_product_attention`, on checked arguments."""
    if score_bias is not None:
        score_bias, mask = _split_bias(score_bias, mask)
    if q.dtype == torch.float16:  # q k^T can exceed float16's 65504 before it is scaled
        q, k = q.float(), k.float()
    scores = (q @ k.transpose(-2, -1)) * scale  # S = q k^T / sqrt(d_k)      (..., T_q, T_k)
    if score_bias is not None:
        scores = scores + score_bias.to(scores.dtype)  # S = S + B (ALiBi)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)  # S_ij = finfo.min
    weights = torch.softmax(scores, dim=-1).to(v.dtype)  # W = softmax_j(S)   (..., T_q, T_k)
    used = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    out = used @ v  # out = W v                                          (..., T_q, d_v)
    if (has_key := rows_with_keys(mask)) is not None:  # fully masked rows: out_i = W_i = 0
        out, weights = out * has_key, weights * has_key
    return out, weights


def scaled_dot_product_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
    return_weights: bool = False, score_bias: torch.Tensor | None = None, *,
    scale: float | None = None, dropout_p: float = 0.0,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    r"""Scaled dot-product attention, written out step by step.

    $$S = \frac{q k^\top}{\sqrt{d_k}} + B, \quad S_{ij} \leftarrow \texttt{finfo.min}
    \text{ where mask}_{ij} = \text{False}, \quad W = \operatorname{softmax}_j(S),
    \quad \text{out} = W v.$$

    ``q`` is ``(..., T_q, d_k)``, ``k`` ``(..., T_k, d_k)``, ``v`` ``(..., T_k, d_v)``
    (leading dimensions broadcast); ``mask`` (bool) and ``score_bias`` (float, $B$) broadcast
    to ``(..., T_q, T_k)``. ``scale`` defaults to $1/\sqrt{d_k}$; ``dropout_p`` drops weights
    before they multiply ``v`` (the returned weights are those before dropout).

    Returns ``out`` ``(..., T_q, d_v)``, or ``(out, weights)`` with ``return_weights``.

    Example:
        >>> q = k = v = torch.randn(2, 5, 8)
        >>> out = scaled_dot_product_attention(q, k, v, mask=causal_mask(5))
    """
    scale, dropout_p = _check_inputs(q, k, v, mask, return_weights, score_bias, scale, dropout_p)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale  # 1 / sqrt(d_k)
    out, weights = _attend(q, k, v, mask, score_bias, scale, dropout_p)
    return (out, weights) if return_weights else out


def _check_inputs(q, k, v, mask, return_weights, score_bias, scale, dropout_p):
    check_tensor("q", q, floating=True, min_ndim=2, dims="(..., T, d)", nonempty=True)
    kw = {"floating": True, "nonempty": True, "dtype_of": q, "of": "q"}
    d_k = q.shape[-1]
    check_tensor("k", k, shape=(..., None, d_k), dims=f"(..., T_k, d_k={d_k} of q)", **kw)
    T_k = k.shape[-2]
    check_tensor("v", v, shape=(..., T_k, None), dims=f"(..., T_k={T_k} of k, d_v)", **kw)
    dropout_p = check_probability("dropout_p", dropout_p)
    check_bool("return_weights", return_weights)
    scale = scale if scale is None else check_float("scale", scale, low=0, low_open=True)
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        shapes = f"{tuple(q.shape)}, {tuple(k.shape)} and {tuple(v.shape)}"
        raise ValueError(f"the leading dimensions of q, k and v must broadcast: {shapes}") from None
    check_scores((*batch, q.shape[-2], k.shape[-2]), q.dtype, mask, score_bias)
    return scale, dropout_p


class RotaryEmbedding(nn.Module):
    r"""Rotary position embedding (RoPE, Su et al., 2021), applied to queries and keys.

    The vector at position ``pos`` is turned by the block rotation $R(pos)$ of
    :func:`~mini_transformer.positional.rotation_matrix`, pair by pair, with
    $\omega_i = base^{-2i/d_{head}}$. Then $q_m \cdot k_n = q^\top R(m)^\top R(n)\,k =
    q^\top R(n - m)\,k$ depends on the positions only through the offset $n - m$.
    (RoFormer writes each 2x2 block as its transpose; our sign makes RoPE applied to
    $PE_0 = (0, 1, 0, 1, \dots)$ give exactly the sinusoidal $PE_{pos}$.)

    The cos/sin cache is rebuilt longer when ``offset + T`` passes it: RoPE has no length limit.

    Shape: ``forward(x, offset=0)``, ``x`` ``(..., T, d_head)`` (in attention
    ``(B, n_heads, T, d_head)``) -> the same; ``offset`` is the position of the first token.
    """

    def __init__(self, d_head: int, base: float = 10000.0, max_len: int = 4096) -> None:
        super().__init__()
        self.d_head = check_int("d_head", d_head, low=1, even=True, why=" for a rotation")
        self.base = check_float("base", base, **BASE)
        self.max_len = check_int("max_len", max_len, low=1)
        self._dims = f"(B, n_heads, T, d_head={self.d_head})"
        i = np.arange(self.d_head // 2, dtype=np.float64)
        omega = torch.from_numpy(self.base ** (-2.0 * i / self.d_head))  # w_i = base^(-2i/d)
        self.register_buffer("omega", omega, persistent=False)
        self._build_cache(self.max_len, device=None)

    def _build_cache(self, length: int, device: torch.device | None) -> None:
        shape = (length, self.d_head // 2)
        check_size("the rotary cache (max_len or offset + T, d_head / 2)", shape, torch.float64)
        omega = self.omega if device is None else self.omega.to(device)
        angles = torch.arange(length, dtype=torch.float64, device=omega.device)[:, None] * omega
        self.register_buffer("cos_cached", angles.cos().float(), persistent=False)  # (L, d/2)
        self.register_buffer("sin_cached", angles.sin().float(), persistent=False)  # (L, d/2)

    def _check(self, x: torch.Tensor, offset: int = 0) -> None:
        check_tensor("x", x, floating=True, shape=(..., None, self.d_head), dims=self._dims)
        check_int("offset", offset, low=0)

    @checks.entry(_check)  # checked only when called directly, not inside a model
    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        T = x.shape[-2]
        if offset + T > self.cos_cached.shape[0] or self.cos_cached.device != x.device:
            self._build_cache(max(offset + T, self.cos_cached.shape[0]), device=x.device)
        if x.dtype == torch.float64:  # exact tables for float64 checks
            pos = torch.arange(offset, offset + T, dtype=torch.float64, device=x.device)
            angles = pos[:, None] * self.omega.to(x.device)  # theta = pos * w_i     (T, d/2)
            cos, sin, xf = angles.cos(), angles.sin(), x
        else:  # float32 tables; float16/bfloat16 inputs are rotated in float32
            cos = self.cos_cached[offset : offset + T]  # (T, d/2)
            sin = self.sin_cached[offset : offset + T]
            xf = x.float()
        x_even, x_odd = xf[..., 0::2], xf[..., 1::2]  # (..., T, d/2)
        out_even = x_even * cos + x_odd * sin  # x'_2i   =  x_2i cos(theta) + x_2i+1 sin(theta)
        out_odd = -x_even * sin + x_odd * cos  # x'_2i+1 = -x_2i sin(theta) + x_2i+1 cos(theta)
        out = torch.stack((out_even, out_odd), dim=-1).flatten(-2)  # (..., T, d_head)
        return out.to(dtype=x.dtype)

    def extra_repr(self) -> str:
        return f"d_head={self.d_head}, base={self.base}, max_len={self.max_len}"


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention, $\operatorname{Concat}(\text{head}_1, \dots, \text{head}_h) W^O$
    with $\text{head}_i = \operatorname{Attention}(X W_i^Q, M W_i^K, M W_i^V)$ ($M = X$ for
    self-attention), every head in one ``(B, h, T, d_head)`` tensor.

    ``fused_attention`` uses PyTorch's ``F.scaled_dot_product_attention`` unless weights are
    asked for (it agrees with the from-scratch path to rounding). ``rotary`` and ``alibi`` act
    inside attention, one instance shared by a model's layers. With ``keep_weights = True``
    every call keeps its weights in ``last_weights``: one forward leaves every layer's map.
    """

    def __init__(
        self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True,
        fused_attention: bool = True, rotary: torch.nn.Module | None = None,
        alibi: ALiBi | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        d_model = check_int("d_model", d_model, low=1)
        n_heads = check_int("n_heads", n_heads, low=1)
        check_heads(d_model, n_heads)
        self.d_head = d_model // n_heads
        check_bool("bias", bias)
        check_size("the projections (4, d_model, d_model)", (4, d_model, d_model), torch.float32)
        check_instance("rotary", rotary, (nn.Module, type(None)), "an nn.Module or None")
        if alibi is not None and not (isinstance(alibi, ALiBi) and alibi.n_heads == n_heads):
            raise ValueError(f"alibi must be None or an ALiBi with n_heads={n_heads}, got {alibi}")
        self.d_model, self.n_heads = d_model, n_heads
        self.dropout_p = check_probability("dropout", dropout)  # a rate, as in F.dropout
        self.fused_attention = check_bool("fused_attention", fused_attention)
        self.keep_weights, self.last_weights = False, None  # see the class docstring
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)  # W^Q
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)  # W^K
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)  # W^V
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O
        self.rotary = rotary  # shared module (no parameters): its buffers are not persistent
        self.alibi = alibi

    def extra_repr(self) -> str:
        d, h, p, fused = self.d_model, self.n_heads, self.dropout_p, self.fused_attention
        return f"d_model={d}, n_heads={h}, dropout={p}, fused_attention={fused}"

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        B, T, _ = t.shape
        return t.view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, h, T, d_head)

    def _check(
        self, x, memory=None, mask=None, causal=False, score_bias=None, return_weights=False
    ):
        dims = f"(B, T, d_model={self.d_model})"
        kw = {"floating": True, "dims": dims, "nonempty": True, "dtype_of": self.q_proj.weight}
        check_tensor("x", x, shape=(None, None, self.d_model), **kw)
        if memory is not None:  # (B, T_k, d_model)
            check_tensor("memory", memory, shape=(len(x), None, self.d_model), **kw)
        check_bool("causal", causal)
        check_bool("return_weights", return_weights)
        target = (len(x), self.n_heads, x.shape[1], (x if memory is None else memory).shape[1])
        check_scores(target, x.dtype, mask, score_bias, "(B, n_heads, T_q, T_k)")

    @checks.entry(_check)
    def forward(
        self, x: torch.Tensor, memory: torch.Tensor | None = None, mask: torch.Tensor | None = None,
        causal: bool = False, score_bias: torch.Tensor | None = None, return_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
        """Attend from ``x`` ``(B, T_q, d_model)`` to ``memory`` ``(B, T_k, d_model)`` (an
        encoder's output), or to ``x`` itself when ``memory`` is ``None``. ``mask`` (bool,
        ``True`` = may attend) and ``score_bias`` (float, added to the scaled scores and to
        ALiBi's) broadcast to ``(B, n_heads, T_q, T_k)``.

        Returns ``(out, weights)``: ``out`` ``(B, T_q, d_model)``; ``weights`` ``(B,
        n_heads, T_q, T_k)`` with ``return_weights``, else ``None``.
        """
        kv = x if memory is None else memory  # cross-attention: keys and values from memory
        (B, T_q, _), T_k = x.shape, kv.shape[1]
        if self.alibi is not None:  # bias_hij = -m_h |i - j|: (n_heads, T_q, T_k)
            alibi = self.alibi(T_q, T_k)
            score_bias = alibi if score_bias is None else score_bias + alibi

        # Three matmuls: one with the weights concatenated (as nn.MultiheadAttention) gave
        # no consistent gain in benchmarks/attention.py.
        q = self._heads(self.q_proj(x))  # Q = X W^Q    (B, h, T_q, d_head)
        k = self._heads(self.k_proj(kv))  # K = M W^K    (B, h, T_k, d_head)
        v = self._heads(self.v_proj(kv))  # V = M W^V    (B, h, T_k, d_head)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)  # q_p = R(p) q_p, k_p = R(p) k_p
        p = self.dropout_p if self.training else 0.0
        if self.fused_attention and not (return_weights or self.keep_weights):
            out, weights = _fused(q, k, v, mask, causal, score_bias, p), None
        else:
            if causal:
                mask = _and_causal(mask, T_q, T_k, x.device)
            scale = 1.0 / math.sqrt(self.d_head)
            out, weights = _attend(q, k, v, mask, score_bias, scale, p)  # softmax(QK^T/sqrt(d_k))V
            weights = weights.expand(B, self.n_heads, T_q, T_k)
        if self.keep_weights:  # for plotting: (B, n_heads, T_q, T_k), detached
            self.last_weights = weights.detach()
        out = out.transpose(1, 2).reshape(B, T_q, self.d_model)  # Concat(head_1..head_h)
        return self.out_proj(out), (weights if return_weights else None)  # ... W^O


def _and_causal(mask, T_q: int, T_k: int, device) -> torch.Tensor:
    """``combine_masks(mask, causal_mask(T_q, T_k))`` on checked arguments (a forward's)."""
    causal = torch.ones(T_q, T_k, dtype=torch.bool, device=device).tril()  # key j <= query i
    return causal if mask is None else mask & causal


def _fused(q, k, v, mask, causal, score_bias, p):
    """PyTorch's fused kernel, with the from-scratch path's rules for masked rows and -inf."""
    if mask is None and score_bias is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal)
    if score_bias is not None:  # -inf entries become masked keys, as in the scratch path
        score_bias, mask = _split_bias(score_bias, mask)
    T_q, T_k = q.shape[-2], k.shape[-2]
    full = _and_causal(mask, T_q, T_k, q.device) if causal else mask
    if (has_key := rows_with_keys(full)) is not None:  # the kernel sees a finite row,
        full = full | ~has_key  # zeroed below: the scratch path's rule
    attn_mask = full if score_bias is None else score_bias.to(q.dtype)
    if score_bias is not None and full is not None:  # the bias, finfo.min where masked
        attn_mask = torch.where(full, attn_mask, torch.finfo(q.dtype).min)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)
    return out if has_key is None else out * has_key
