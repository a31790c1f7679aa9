"""Masked scaled dot-product attention and multi-head attention (chapter 4).

The whole chapter is one formula,

.. math::

    \\operatorname{Attention}(Q, K, V) = \\operatorname{softmax}\\!\\left(
        \\frac{Q K^\\top}{\\sqrt{d_k}} + B + M\\right) V ,

where :math:`B` is an optional additive bias (ALiBi) and :math:`M` is the mask: 0 where a
query may attend to a key, a very negative number where it may not.

Conventions (the same as PyTorch's ``F.scaled_dot_product_attention``):

- A mask is a **boolean** tensor, ``True`` = *may attend*. It broadcasts against the score
  tensor ``(..., T_q, T_k)``; in :class:`MultiHeadAttention` against ``(B, n_heads, T_q, T_k)``.
  Additive float masks are not accepted as ``mask`` (a ``TypeError`` says so): pass them as
  ``score_bias``, which is *added* to the scores (``bias`` always means a Linear layer's bias).
- Masked scores are filled with ``torch.finfo(dtype).min``, the most negative finite number
  of the scores' dtype. Not ``-inf`` (a row with every key masked would give
  ``softmax([-inf, ..., -inf]) = 0/0 = NaN``) and not a fixed constant such as ``-2**30``
  (which overflows to ``-inf`` in float16, whose largest magnitude is 65504).
- A query row whose keys are *all* masked gets **zero weights and a zero output** (and zero
  gradient), never NaN. Both the from-scratch path and the fused path do this. An additive
  ``score_bias`` may hold ``-inf``: each ``-inf`` entry counts as a masked key, so a row that is
  ``-inf`` everywhere follows the same rule instead of giving ``0/0 = NaN``.
- Bad arguments raise ``TypeError``/``ValueError`` naming them (:mod:`mini_transformer.checks`):
  integer, bool or complex inputs, mixed dtypes, empty dimensions, a non-finite ``scale``, and
  score tensors too big to allocate. The checks read shapes and dtypes only (no GPU sync),
  and each input is checked once, where it enters: :class:`MultiHeadAttention` checks its
  arguments and then calls the unchecked core ``_attend`` that the public function
  shares.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .alibi import ALiBi
from .checks import (
    check_bool,
    check_broadcast,
    check_float,
    check_input_dtype,
    check_int,
    check_mask,
    check_probability,
    check_same_dtype,
    check_size,
    check_tensor,
)

# causal_mask, padding_mask and combine_masks live in masks.py; the book's API contract (and
# every chapter) imports them from here too.
from .masks import causal_mask, combine_masks
from .masks import padding_mask as padding_mask

__all__ = [
    "scaled_dot_product_attention",
    "MultiHeadAttention",
]


def _check_score_bias(score_bias: object, target: tuple[int, ...], expected: str) -> None:
    if not isinstance(score_bias, torch.Tensor) or not score_bias.is_floating_point():
        got = score_bias.dtype if isinstance(score_bias, torch.Tensor) else type(score_bias)
        raise TypeError(
            "score_bias must be a floating-point tensor (it is added to the scores), got "
            + (f"dtype {got}" if isinstance(score_bias, torch.Tensor) else got.__name__)
        )
    check_broadcast("score_bias", score_bias, target, expected)


def _known_all(t: torch.Tensor) -> bool:
    """True if every entry of the bool tensor ``t`` is True, when that is free to know.

    On the CPU the answer costs one reduction. On a GPU, reading it would stall the host
    until the queued kernels finish (a sync on every call), so there the answer is "unknown"
    (``False``) and the caller takes the general path, which gives the same numbers.
    """
    if t.device.type != "cpu" or torch.compiler.is_compiling():
        return False
    return bool(t.all())


def _split_bias(
    score_bias: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Read ``-inf`` entries of a score bias as "may not attend" (no data read, no sync).

    ``softmax`` of a row that is ``-inf`` everywhere is ``0/0 = NaN``. Turning each ``-inf``
    into a ``False`` in the boolean mask (and a 0 in the bias) sends such rows through the
    masked-row rule instead: zero weights and a zero output, on both paths. Finite entries
    are untouched, so a finite bias gives exactly the same numbers.

    Returns:
        ``(score_bias, mask)``: the bias with ``-inf`` replaced by 0, and the combined mask.
    """
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
        scores = scores + score_bias.to(scores.dtype)  # S + B (ALiBi)
    row_has_key = None
    if mask is not None:
        # S_ij = finfo.min where mask_ij is False: the most negative *finite* number of this
        # dtype, so exp(fill - max) underflows to 0, yet a fully masked row stays finite.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        row_has_key = mask.any(dim=-1, keepdim=True)  # (..., T_q, 1)
    weights = torch.softmax(scores, dim=-1).to(v.dtype)  # W = softmax_j(S)   (..., T_q, T_k)
    if row_has_key is not None and not _known_all(row_has_key):
        weights = weights * row_has_key  # fully masked rows: zero weights, zero output
    used = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return used @ v, weights  # out = W v                              (..., T_q, d_v)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    return_weights: bool = False,
    score_bias: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, written out step by step.

    .. math::

        S = \\frac{q k^\\top}{\\sqrt{d_k}} + B, \\qquad
        S_{ij} \\leftarrow \\texttt{finfo.min} \\text{ where } \\text{mask}_{ij} = \\text{False},
        \\qquad W = \\operatorname{softmax}_j(S), \\qquad \\text{out} = W v .

    Args:
        q: queries ``(..., T_q, d_k)``.
        k: keys ``(..., T_k, d_k)``.
        v: values ``(..., T_k, d_v)``. Leading dimensions of q, k, v broadcast.
        mask: optional **bool** tensor broadcastable to ``(..., T_q, T_k)``; ``True`` = the
            query may attend to the key. A non-bool mask raises ``TypeError``.
        return_weights: also return the attention weights ``(..., T_q, T_k)``.
        score_bias: optional float tensor :math:`B` broadcastable to ``(..., T_q, T_k)``,
            added to the scaled scores before masking (e.g. ALiBi). ``-inf`` entries act as
            masked keys.
        scale: the factor applied to :math:`q k^\\top`, a finite number ``> 0``; default
            :math:`1/\\sqrt{d_k}`.
        dropout_p: dropout probability applied to the weights before they multiply ``v``
            (the returned weights are those before dropout). Use 0 at evaluation time.

    Returns:
        ``out`` of shape ``(..., T_q, d_v)``, or ``(out, weights)`` if ``return_weights``.
        Each row of ``weights`` sums to 1, masked keys get exactly 0, and a row whose keys
        are all masked is all zeros (so its output is the zero vector), never NaN. For
        float16 inputs the scores and softmax are computed in float32 (``q k^T`` can exceed
        float16's range before it is scaled); the weights come back as float16.

    Example:
        >>> q = k = v = torch.randn(2, 5, 8)
        >>> out = scaled_dot_product_attention(q, k, v, mask=causal_mask(5))
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, floating=True, min_ndim=2, dims="(..., T, d)", nonempty=True)
    check_same_dtype(q=q, k=k, v=v)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dimension d_k, got {q.shape[-1]} and {k.shape[-1]}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of keys T_k, got {k.shape[-2]} and {v.shape[-2]}"
        )
    dropout_p = check_probability("dropout_p", dropout_p)
    check_bool("return_weights", return_weights)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    else:
        scale = check_float("scale", scale, low=0, low_open=True)
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading dimensions of q, k and v must broadcast, got shapes {tuple(q.shape)}, "
            f"{tuple(k.shape)} and {tuple(v.shape)}"
        ) from None
    target = (*batch, q.shape[-2], k.shape[-2])
    check_size("the attention scores (..., T_q, T_k)", target, q.dtype)
    if mask is not None:
        check_mask("mask", mask)
        check_broadcast("mask", mask, target, "(..., T_q, T_k)")
    if score_bias is not None:
        _check_score_bias(score_bias, target, "(..., T_q, T_k)")
    out, weights = _attend(q, k, v, mask, score_bias, scale, dropout_p)
    return (out, weights) if return_weights else out


class MultiHeadAttention(nn.Module):
    """Multi-head attention for self-attention and cross-attention.

    .. math::

        \\operatorname{MultiHead}(X, M) = \\operatorname{Concat}(\\text{head}_1, \\dots,
        \\text{head}_h) W^O, \\quad \\text{head}_i = \\operatorname{Attention}(X W_i^Q,
        M W_i^K, M W_i^V),

    with :math:`M = X` for self-attention. The ``h`` heads are computed at once: the
    projections give ``(B, T, d_model)``, which is viewed as ``(B, T, h, d_head)`` and
    transposed to ``(B, h, T, d_head)``.

    Args:
        d_model: model width, divisible by ``n_heads``.
        n_heads: number of heads; each has ``d_head = d_model // n_heads``.
        dropout: dropout probability on the attention weights (training mode only).
        bias: whether the four projections have biases.
        fused_attention: ``True`` computes attention with PyTorch's fused
            ``F.scaled_dot_product_attention`` (unless weights are asked for); ``False`` with
            :func:`scaled_dot_product_attention`. The two agree to float rounding (tested).
        rotary: a module with ``forward(t)`` (e.g. ``RotaryEmbedding``) applied to ``q`` and
            ``k`` of shape ``(B, n_heads, T, d_head)`` on every call (positions ``0..T-1``).
        alibi: an :class:`~mini_transformer.alibi.ALiBi` whose ``(n_heads, T_q, T_k)``
            bias is added to the scaled scores on every call.

    The positional schemes that act inside attention are given here, once, so no caller
    threads them through every forward; a model shares one instance across its layers.

    Submodules ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` are ``nn.Linear(d_model, d_model)``.

    Attention maps: setting ``keep_weights = True`` makes every call compute the weights
    (from-scratch path) and keep them, detached, in ``last_weights`` ``(B, n_heads, T_q, T_k)``,
    so one ordinary forward pass of a whole model leaves every layer's map behind (what
    :meth:`~mini_transformer.model.TransformerLM.attention_weights` does); ``return_weights``
    returns one call's weights.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        fused_attention: bool = True,
        rotary: torch.nn.Module | None = None,
        alibi: torch.nn.Module | None = None,
    ) -> None:
        super().__init__()
        d_model = check_int("d_model", d_model, low=1)
        n_heads = check_int("n_heads", n_heads, low=1)
        if d_model % n_heads != 0:
            raise ValueError(
                f"d_model must be divisible by n_heads, got d_model={d_model} and n_heads={n_heads}"
            )
        check_bool("bias", bias)
        check_bool("fused_attention", fused_attention)
        check_size("the projections (4, d_model, d_model)", (4, d_model, d_model), torch.float32)
        if rotary is not None and not isinstance(rotary, nn.Module):
            raise TypeError(f"rotary must be an nn.Module or None, got {type(rotary).__name__}")
        if alibi is not None and not (isinstance(alibi, ALiBi) and alibi.n_heads == n_heads):
            raise ValueError(f"alibi must be None or an ALiBi with n_heads={n_heads}, got {alibi}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.dropout = check_probability("dropout", dropout)
        self.fused_attention = fused_attention
        self.keep_weights = False  # True: every call stores its weights in last_weights
        self.last_weights: torch.Tensor | None = None
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)  # W^Q
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)  # W^K
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)  # W^V
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O
        self.rotary = rotary  # shared module (no parameters): its buffers are not persistent
        self.alibi = alibi

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, "
            f"dropout={self.dropout}, fused_attention={self.fused_attention}"
        )

    def _check_input(self, t: torch.Tensor, name: str) -> None:
        dims, shape = f"(B, T, d_model={self.d_model})", (None, None, self.d_model)
        check_tensor(name, t, floating=True, shape=shape, dims=dims, nonempty=True)
        check_input_dtype(name, t, self.q_proj.weight)

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        B, T, _ = t.shape
        return t.view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, h, T, d_head)

    def _project(self, x: torch.Tensor, memory: torch.Tensor | None):
        m = x if memory is None else memory
        # Three matmuls. One matmul with the three weights concatenated (as
        # nn.MultiheadAttention does) gave no consistent gain in benchmarks/attention.py.
        return (
            self._split_heads(self.q_proj(x)),  # Q = X W^Q    (B, h, T_q, d_head)
            self._split_heads(self.k_proj(m)),  # K = M W^K    (B, h, T_k, d_head)
            self._split_heads(self.v_proj(m)),  # V = M W^V    (B, h, T_k, d_head)
        )

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        score_bias: torch.Tensor | None = None,
        return_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``x`` to ``memory`` (or to ``x`` itself).

        Args:
            x: queries' input ``(B, T_q, d_model)``.
            memory: keys' and values' input ``(B, T_k, d_model)`` for cross-attention (an
                encoder's output); ``None`` for self-attention (``T_k = T_q``).
            mask: bool, broadcastable to ``(B, n_heads, T_q, T_k)``, ``True`` = may attend
                (e.g. :func:`~mini_transformer.masks.padding_mask`,
                :func:`~mini_transformer.masks.causal_mask`).
            causal: also apply :func:`~mini_transformer.masks.causal_mask` ``(T_q, T_k)``.
            score_bias: float, broadcastable to ``(B, n_heads, T_q, T_k)`` (e.g. ALiBi's
                ``(n_heads, T_q, T_k)``), added to the scaled scores (and to the ``alibi``
                given at construction, if any).
            return_weights: also return the per-head weights ``(B, n_heads, T_q, T_k)``
                (computed with the from-scratch path).

        Returns:
            ``(out, weights)``: ``out`` is ``(B, T_q, d_model)``; ``weights`` is ``None``
            unless ``return_weights``. Queries whose keys are all masked give
            ``out_proj(0)`` (zero attention output), never NaN.
        """
        self._check_input(x, "x")
        B, T_q, _ = x.shape
        if memory is not None:
            self._check_input(memory, "memory")
            if memory.shape[0] != B:
                raise ValueError(
                    f"memory must have the same batch size as x ({B}), got {memory.shape[0]}"
                )
        T_k = T_q if memory is None else memory.shape[1]
        target = (B, self.n_heads, T_q, T_k)
        if mask is not None:
            check_mask("mask", mask)
            check_broadcast("mask", mask, target, "(B, n_heads, T_q, T_k)")
        if score_bias is not None:
            _check_score_bias(score_bias, target, "(B, n_heads, T_q, T_k)")
        check_bool("causal", causal)
        check_bool("return_weights", return_weights)
        check_size("the attention scores (B, n_heads, T_q, T_k)", target, x.dtype)
        if self.alibi is not None:  # B = -m_h (i - j): (n_heads, T_q, T_k)
            alibi = self.alibi(T_q, T_k)
            score_bias = alibi if score_bias is None else score_bias + alibi

        q, k, v = self._project(x, memory)  # (B, h, T, d_head)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)  # q_p <- R(p) q_p, k_p <- R(p) k_p
        p = self.dropout if self.training else 0.0

        if self.fused_attention and not (return_weights or self.keep_weights):
            out, weights = _fused(q, k, v, mask, causal, score_bias, p), None
        else:
            if causal:
                mask = combine_masks(mask, causal_mask(T_q, T_k, device=x.device))
            scale = 1.0 / math.sqrt(self.d_head)
            out, weights = _attend(q, k, v, mask, score_bias, scale, p)  # head_i
            if weights.shape != target:
                weights = weights.expand(target)
        if self.keep_weights:  # for plotting: (B, n_heads, T_q, T_k), detached
            self.last_weights = weights.detach()
        out = out.transpose(1, 2).reshape(B, T_q, self.d_model)  # Concat(head_1..head_h)
        return self.out_proj(out), (weights if return_weights else None)  # ... W^O


def _fused(q, k, v, mask, causal, score_bias, p):
    """PyTorch's fused kernel, with the from-scratch path's rules for masked rows and -inf."""
    if mask is None and score_bias is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal)
    if score_bias is not None:  # -inf entries become masked keys, as in the scratch path
        score_bias, mask = _split_bias(score_bias, mask)
    T_q, T_k = q.shape[-2], k.shape[-2]
    full = combine_masks(mask, causal_mask(T_q, T_k, device=q.device) if causal else None)
    row_has_key = None
    if full is not None:
        row_has_key = full.any(dim=-1, keepdim=True)  # (..., T_q, 1)
        if _known_all(row_has_key):
            row_has_key = None
        else:  # let the kernel see a finite row, then zero it: same as the scratch path
            full = full | ~row_has_key
    if score_bias is None:
        attn_mask = full
    else:
        attn_mask = score_bias.to(q.dtype)
        if full is not None:
            attn_mask = torch.where(full, attn_mask, torch.finfo(q.dtype).min)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)
    if row_has_key is not None:
        out = out * row_has_key
    return out
