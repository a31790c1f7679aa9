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
  ``bias``, which is *added* to the scores.
- Masked scores are filled with ``torch.finfo(dtype).min``, the most negative finite number
  of the scores' dtype. Not ``-inf`` (a row with every key masked would give
  ``softmax([-inf, ..., -inf]) = 0/0 = NaN``) and not a fixed constant such as ``-2**30``
  (which overflows to ``-inf`` in float16, whose largest magnitude is 65504).
- A query row whose keys are *all* masked gets **zero weights and a zero output** (and zero
  gradient), never NaN. Both the from-scratch path and the fused path do this. An additive
  ``bias`` may hold ``-inf``: each ``-inf`` entry counts as a masked key, so a row that is
  ``-inf`` everywhere follows the same rule instead of giving ``0/0 = NaN``.
- Bad arguments raise ``TypeError``/``ValueError`` naming them (:mod:`mini_transformer.checks`):
  integer, bool or complex inputs, mixed dtypes, empty dimensions, a non-finite ``scale``, and
  score tensors too big to allocate. The checks read shapes and dtypes only (no GPU sync).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .checks import (
    check_bool,
    check_device,
    check_float,
    check_input_dtype,
    check_int,
    check_probability,
    check_same_dtype,
    check_size,
    check_tensor,
)
from .positional import ALiBi

__all__ = [
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    "combine_masks",
    "MultiHeadAttention",
    "additive_scores",
    "AdditiveAttention",
]


def _check_mask(mask: torch.Tensor, name: str = "mask") -> None:
    check_tensor(name, mask)
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a boolean tensor (True = may attend), got dtype {mask.dtype}; "
            "pass an additive float mask as `bias` (or `attn_bias`) instead"
        )


def _check_broadcast(t: torch.Tensor, target: tuple[int, ...], name: str, expected: str) -> None:
    """Raise ValueError unless ``t`` broadcasts to exactly ``target``."""
    ok = t.dim() <= len(target)
    if ok:
        try:
            ok = tuple(torch.broadcast_shapes(tuple(t.shape), target)) == tuple(target)
        except RuntimeError:
            ok = False
    if not ok:
        raise ValueError(
            f"{name} of shape {tuple(t.shape)} does not broadcast to {expected} = {tuple(target)}"
        )


def _check_bias(bias: object, name: str, target: tuple[int, ...], expected: str) -> None:
    if not isinstance(bias, torch.Tensor) or not bias.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor (it is added to the scores), got "
            + (f"dtype {bias.dtype}" if isinstance(bias, torch.Tensor) else type(bias).__name__)
        )
    _check_broadcast(bias, target, name, expected)


def _known_all(t: torch.Tensor) -> bool:
    """True if every entry of the bool tensor ``t`` is True, when that is free to know.

    On the CPU the answer costs one reduction. On a GPU, reading it would stall the host
    until the queued kernels finish (a sync on every call), so there the answer is "unknown"
    (``False``) and the caller takes the general path, which gives the same numbers.
    """
    if t.device.type != "cpu" or torch.compiler.is_compiling():
        return False
    return bool(t.all())


def _split_bias(bias: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Read ``-inf`` entries of an additive bias as "may not attend" (no data read, no sync).

    ``softmax`` of a row that is ``-inf`` everywhere is ``0/0 = NaN``. Turning each ``-inf``
    into a ``False`` in the boolean mask (and a 0 in the bias) sends such rows through the
    masked-row rule instead: zero weights and a zero output, on both paths. Finite entries
    are untouched, so a finite bias gives exactly the same numbers as before.

    Returns:
        ``(bias, mask)``: the bias with ``-inf`` replaced by 0, and the combined bool mask.
    """
    blocked = bias == float("-inf")  # shape of the bias, e.g. (n_heads, T_q, T_k)
    if _known_all(~blocked):
        return bias, mask
    allowed = ~blocked if mask is None else mask & ~blocked
    return bias.masked_fill(blocked, 0.0), allowed


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    return_weights: bool = False,
    bias: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, written out step by step.

    .. math::

        S = \\frac{q k^\\top}{\\sqrt{d_k}} + \\text{bias}, \\qquad
        S_{ij} \\leftarrow \\texttt{finfo.min} \\text{ where } \\text{mask}_{ij} = \\text{False},
        \\qquad W = \\operatorname{softmax}_j(S), \\qquad \\text{out} = W v .

    Args:
        q: queries ``(..., T_q, d_k)``.
        k: keys ``(..., T_k, d_k)``.
        v: values ``(..., T_k, d_v)``. Leading dimensions of q, k, v broadcast.
        mask: optional **bool** tensor broadcastable to ``(..., T_q, T_k)``; ``True`` = the
            query may attend to the key. A non-bool mask raises ``TypeError``.
        return_weights: also return the attention weights ``(..., T_q, T_k)``.
        bias: optional float tensor broadcastable to ``(..., T_q, T_k)``, added to the scaled
            scores before masking (e.g. ALiBi). ``-inf`` entries act as masked keys.
        scale: the factor applied to :math:`q k^\\top`, a finite number ``> 0``; default
            :math:`1/\\sqrt{d_k}`.
        dropout_p: dropout probability applied to the weights before they multiply ``v``
            (the returned weights are those before dropout). Use 0 at evaluation time.

    Returns:
        ``out`` of shape ``(..., T_q, d_v)``, or ``(out, weights)`` if ``return_weights``.
        Each row of ``weights`` sums to 1, masked keys get exactly 0, and a row whose keys
        are all masked is all zeros (so its output is the zero vector), never NaN.

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
    d_k = q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d_k)
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
        _check_mask(mask)
        _check_broadcast(mask, target, "mask", "(..., T_q, T_k)")
    if bias is not None:
        _check_bias(bias, "bias", target, "(..., T_q, T_k)")
        bias, mask = _split_bias(bias, mask)

    scores = (q @ k.transpose(-2, -1)) * scale  # (..., T_q, T_k)
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    row_has_key = None
    if mask is not None:
        # The most negative *finite* number of this dtype: exp(fill - max) underflows to 0,
        # yet a fully masked row stays finite (it becomes uniform, and is zeroed below).
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        row_has_key = mask.any(dim=-1, keepdim=True)  # (..., T_q, 1)
    weights = torch.softmax(scores, dim=-1)
    if row_has_key is not None and not _known_all(row_has_key):
        weights = weights * row_has_key  # fully masked rows: zero weights, zero output
    used = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    out = used @ v  # (..., T_q, d_v)
    return (out, weights) if return_weights else out


def causal_mask(
    T: int, T_k: int | None = None, device: torch.device | str | None = None
) -> torch.Tensor:
    """The causal (look-ahead) mask: query ``i`` may attend to key ``j`` iff ``j <= i``.

    Args:
        T: number of queries (and keys, unless ``T_k`` is given), a positive integer.
        T_k: number of keys; default ``T``. The diagonal is anchored at the top left, as in
            PyTorch's ``is_causal=True``.
        device: where to create the mask.

    Returns:
        bool tensor ``(T, T_k)``, lower triangular (``True`` on and below the diagonal).

    Example:
        >>> causal_mask(3).int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 1, 1]], dtype=torch.int32)
    """
    T = check_int("T", T, low=1)
    T_k = T if T_k is None else check_int("T_k", T_k, low=1)
    check_device("device", device)
    check_size("the mask (T, T_k)", (T, T_k), torch.bool)
    return torch.ones(T, T_k, dtype=torch.bool, device=device).tril()


def padding_mask(
    lengths: Sequence[int] | torch.Tensor, T: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """Key-padding mask for a batch of sequences padded to length ``T``.

    Sequence ``b`` has ``lengths[b]`` real tokens followed by padding; no query may attend to
    a padding key.

    Args:
        lengths: ``B`` integers, each in ``[0, T]``: Python or NumPy ints, or an integer
            tensor (``1.5`` is a ``TypeError``, never read as 1).
        T: the padded length, a positive integer.
        device: where to create the mask (default: that of ``lengths`` if it is a tensor).

    Returns:
        bool tensor of shape ``(B, 1, 1, T)``: ``mask[b, 0, 0, j] = j < lengths[b]`` (``True``
        for real tokens). It broadcasts to ``(B, n_heads, T_q, T)``.

    Example:
        >>> padding_mask([2, 3], 3)[:, 0, 0].int()
        tensor([[1, 1, 0],
                [1, 1, 1]], dtype=torch.int32)
    """
    T = check_int("T", T, low=1)
    check_device("device", device)
    if isinstance(lengths, torch.Tensor):
        if (
            lengths.dtype == torch.bool
            or not (lengths.dtype.is_signed or lengths.dtype == torch.uint8)
            or lengths.is_floating_point()
            or lengths.is_complex()
        ):
            raise TypeError(f"lengths must hold integers, got dtype {lengths.dtype}")
        device = lengths.device if device is None else device
        lengths = lengths.to(device=device, dtype=torch.long)
    else:
        if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__iter__"):
            raise TypeError(
                f"lengths must be a sequence of B integers, got {type(lengths).__name__}"
            )
        values = list(lengths)
        for b, n in enumerate(values):  # 1.5 is never read as 1
            check_int(f"lengths[{b}]", n, low=0, high=T)
        lengths = torch.as_tensor([int(n) for n in values], dtype=torch.long, device=device)
    if lengths.dim() != 1 or lengths.numel() == 0:
        raise ValueError(
            "lengths must be a non-empty 1-D sequence of B integers, "
            f"got shape {tuple(lengths.shape)}"
        )
    if bool((lengths < 0).any()) or bool((lengths > T).any()):
        raise ValueError(f"every length must be in [0, T] = [0, {T}], got {lengths.tolist()}")
    positions = torch.arange(T, device=lengths.device)
    return (positions[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, T)


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of boolean masks, with broadcasting; ``None`` entries are skipped.

    A key may be attended to only if *every* mask allows it, e.g.
    ``combine_masks(causal_mask(T), padding_mask(lengths, T))`` has shape ``(B, 1, T, T)``.

    Returns:
        the combined bool mask, or ``None`` if every argument is ``None``.
    """
    out = None
    for i, m in enumerate(masks):
        if m is None:
            continue
        _check_mask(m, name=f"mask {i}")
        if out is None:
            out = m
            continue
        try:
            out = out & m
        except RuntimeError as err:
            raise ValueError(
                f"masks of shapes {tuple(out.shape)} and {tuple(m.shape)} do not broadcast"
            ) from err
    return out


class MultiHeadAttention(nn.Module):
    """Multi-head attention for self-attention and cross-attention.

    .. math::

        \\operatorname{MultiHead}(X, C) = \\operatorname{Concat}(\\text{head}_1, \\dots,
        \\text{head}_h) W^O, \\quad \\text{head}_i = \\operatorname{Attention}(X W_i^Q,
        C W_i^K, C W_i^V),

    with :math:`C = X` for self-attention. The ``h`` heads are computed at once: the
    projections give ``(B, T, d_model)``, which is viewed as ``(B, T, h, d_head)`` and
    transposed to ``(B, h, T, d_head)``.

    Args:
        d_model: model width, divisible by ``n_heads``.
        n_heads: number of heads; each has ``d_head = d_model // n_heads``.
        dropout: dropout probability on the attention weights (training mode only).
        bias: whether the four projections have biases.
        fused: ``True`` computes attention with ``torch.nn.functional.scaled_dot_product_attention``
            (unless ``need_weights``); ``False`` with :func:`scaled_dot_product_attention`.
            The two agree to float rounding (tested).
        rotary: a module with ``forward(t)`` (e.g. ``RotaryEmbedding``) applied to ``q`` and
            ``k`` of shape ``(B, n_heads, T, d_head)`` on every call (positions ``0..T-1``).
        alibi: an :class:`~mini_transformer.positional.ALiBi` whose ``(n_heads, T_q, T_k)``
            bias is added to the scaled scores on every call.

    The positional schemes that act inside attention are given here, once, so no caller
    threads them through every forward; a model shares one instance across its layers.

    Submodules ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` are ``nn.Linear(d_model, d_model)``.

    Setting ``keep_weights = True`` makes every call compute the weights (from-scratch path)
    and keep them, detached, in ``last_weights`` ``(B, n_heads, T_q, T_k)``: a model's
    attention maps after one ordinary forward pass, for plotting.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        fused: bool = True,
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
        dropout = check_probability("dropout", dropout)
        check_bool("bias", bias)
        check_bool("fused", fused)
        check_size("the projections (4, d_model, d_model)", (4, d_model, d_model), torch.float32)
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.dropout = dropout
        self.fused = fused
        self.keep_weights = False  # True: every call stores its weights in last_weights
        self.last_weights: torch.Tensor | None = None
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        if rotary is not None and not isinstance(rotary, nn.Module):
            raise TypeError(f"rotary must be an nn.Module or None, got {type(rotary).__name__}")
        if alibi is not None and not (isinstance(alibi, ALiBi) and alibi.n_heads == n_heads):
            raise ValueError(f"alibi must be None or an ALiBi with n_heads={n_heads}, got {alibi}")
        self.rotary = rotary  # shared module (no parameters): its buffers are not persistent
        self.alibi = alibi

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, "
            f"dropout={self.dropout}, fused={self.fused}"
        )

    def _check_input(self, t: torch.Tensor, name: str) -> None:
        check_tensor(name, t, floating=True)
        if t.dim() != 3:
            raise ValueError(f"{name} must have shape (B, T, d_model), got {tuple(t.shape)}")
        if t.numel() == 0:
            raise ValueError(f"{name} must have B >= 1 and T >= 1, got shape {tuple(t.shape)}")
        check_input_dtype(name, t, self.q_proj.weight)
        if t.shape[-1] != self.d_model:
            raise ValueError(
                f"{name} must have last dimension d_model={self.d_model}, "
                f"got shape {tuple(t.shape)}"
            )

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        B, T, _ = t.shape
        return t.view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, h, T, d_head)

    def _project(self, x: torch.Tensor, context: torch.Tensor | None):
        c = x if context is None else context
        # Three matmuls. One matmul with the three weights concatenated (as
        # nn.MultiheadAttention does) gave no consistent gain in benchmarks/attention.py:
        # a tie on CPU; on an H100 faster only for short T, with a higher memory peak.
        return (
            self._split_heads(self.q_proj(x)),  # (B, h, T_q, d_head)
            self._split_heads(self.k_proj(c)),  # (B, h, T_k, d_head)
            self._split_heads(self.v_proj(c)),
        )

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        attn_bias: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``x`` to ``context`` (or to ``x`` itself).

        Args:
            x: queries' input ``(B, T_q, d_model)``.
            context: keys' and values' input ``(B, T_k, d_model)`` for cross-attention;
                ``None`` for self-attention (``T_k = T_q``).
            mask: bool, broadcastable to ``(B, n_heads, T_q, T_k)``, ``True`` = may attend
                (e.g. :func:`padding_mask`, :func:`causal_mask`).
            is_causal: also apply :func:`causal_mask` ``(T_q, T_k)``.
            attn_bias: float, broadcastable to ``(B, n_heads, T_q, T_k)`` (e.g. ALiBi's
                ``(n_heads, T_q, T_k)``), added to the scaled scores (and to the ``alibi``
                given at construction, if any).
            need_weights: also return the per-head weights ``(B, n_heads, T_q, T_k)``
                (computed with the from-scratch path).

        Returns:
            ``(out, weights)``: ``out`` is ``(B, T_q, d_model)``; ``weights`` is ``None``
            unless ``need_weights``. Queries whose keys are all masked give
            ``out_proj(0)`` (zero attention output), never NaN.
        """
        self._check_input(x, "x")
        B, T_q, _ = x.shape
        if context is not None:
            self._check_input(context, "context")
            if context.shape[0] != B:
                raise ValueError(
                    f"context must have the same batch size as x ({B}), got {context.shape[0]}"
                )
        T_k = T_q if context is None else context.shape[1]
        target = (B, self.n_heads, T_q, T_k)
        if mask is not None:
            _check_mask(mask)
            _check_broadcast(mask, target, "mask", "(B, n_heads, T_q, T_k)")
        if attn_bias is not None:
            _check_bias(attn_bias, "attn_bias", target, "(B, n_heads, T_q, T_k)")
        check_bool("is_causal", is_causal)
        check_bool("need_weights", need_weights)
        check_size("the attention scores (B, n_heads, T_q, T_k)", target, x.dtype)
        if self.alibi is not None:  # (n_heads, T_q, T_k)
            alibi = self.alibi(T_q, T_k)
            attn_bias = alibi if attn_bias is None else attn_bias + alibi

        q, k, v = self._project(x, context)  # (B, h, T, d_head)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        p = self.dropout if self.training else 0.0

        if self.fused and not (need_weights or self.keep_weights):
            out = self._fused(q, k, v, mask, is_causal, attn_bias, p)
            weights = None
        else:
            full = combine_masks(
                mask, causal_mask(T_q, T_k, device=x.device) if is_causal else None
            )
            out, weights = scaled_dot_product_attention(
                q, k, v, mask=full, bias=attn_bias, return_weights=True, dropout_p=p
            )
            if weights.shape != target:
                weights = weights.expand(target)
        if self.keep_weights:  # for plotting: (B, n_heads, T_q, T_k), detached
            self.last_weights = weights.detach()
        out = out.transpose(1, 2).reshape(B, T_q, self.d_model)  # concat heads: (B, T_q, d_model)
        return self.out_proj(out), (weights if need_weights else None)

    @staticmethod
    def _fused(q, k, v, mask, is_causal, attn_bias, p):
        if mask is None and attn_bias is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=is_causal)
        if attn_bias is not None:  # -inf entries become masked keys, as in the scratch path
            attn_bias, mask = _split_bias(attn_bias, mask)
        T_q, T_k = q.shape[-2], k.shape[-2]
        full = combine_masks(mask, causal_mask(T_q, T_k, device=q.device) if is_causal else None)
        row_has_key = None
        if full is not None:
            row_has_key = full.any(dim=-1, keepdim=True)  # (..., T_q, 1)
            if _known_all(row_has_key):
                row_has_key = None
            else:  # let the kernel see a finite row, then zero it: same as the scratch path
                full = full | ~row_has_key
        if attn_bias is None:
            attn_mask = full
        else:
            attn_mask = attn_bias.to(q.dtype)
            if full is not None:
                attn_mask = torch.where(full, attn_mask, torch.finfo(q.dtype).min)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)
        if row_has_key is not None:
            out = out * row_has_key
        return out


# --- Additive (Bahdanau) attention -----------------------------------------------------------
# Appended as a unit: the score function Vaswani et al. compare scaled dot-product attention
# with (section 3.2.1), used in chapter 4's comparison.


def additive_scores(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Additive (Bahdanau) scores of already projected queries and keys.

    .. math::

        e_{ij} = w^\\top \\tanh(q_i + k_j),

    where :math:`q_i = W_a s_i` and :math:`k_j = U_a h_j` are the projected query and key
    (Bahdanau et al., 2015, appendix A.1.2, writes :math:`v_a^\\top \\tanh(W_a s_{i-1}
    + U_a h_j)`). Unlike a dot product, the score needs the ``(..., T_q, T_k, d_a)`` tensor of
    sums, so it is not one matrix product: that is why it is slower and uses more memory than
    dot-product attention for the same ``d_a`` (Vaswani et al., section 3.2.1).

    Args:
        q: projected queries ``(..., T_q, d_a)``.
        k: projected keys ``(..., T_k, d_a)``; leading dimensions broadcast with ``q``'s.
        w: the vector :math:`w` (Bahdanau's :math:`v_a`) of shape ``(d_a,)``.

    Returns:
        scores ``(..., T_q, T_k)``; each lies in :math:`[-\\lVert w \\rVert_1, \\lVert w
        \\rVert_1]` because :math:`\\tanh` is bounded by 1.
    """
    check_tensor("q", q, floating=True, min_ndim=2, dims="(..., T_q, d_a)", nonempty=True)
    check_tensor("k", k, floating=True, min_ndim=2, dims="(..., T_k, d_a)", nonempty=True)
    check_tensor("w", w, floating=True, ndim=1, dims="(d_a,)", nonempty=True)
    check_same_dtype(q=q, k=k, w=w)
    if not q.shape[-1] == k.shape[-1] == w.shape[0]:
        raise ValueError(
            "q, k and w must share the attention width d_a, got "
            f"{q.shape[-1]}, {k.shape[-1]} and {w.shape[0]}"
        )
    try:
        lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading dimensions of q {tuple(q.shape)} and k {tuple(k.shape)} must broadcast"
        ) from None
    check_size(
        "the (..., T_q, T_k, d_a) sums", (*lead, q.shape[-2], k.shape[-2], w.shape[0]), q.dtype
    )
    hidden = torch.tanh(q.unsqueeze(-2) + k.unsqueeze(-3))  # (..., T_q, T_k, d_a)
    return hidden @ w  # (..., T_q, T_k)


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last dim with the conventions of :func:`scaled_dot_product_attention`."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    _check_mask(mask)
    _check_broadcast(mask, tuple(scores.shape), "mask", "(..., T_q, T_k)")
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(filled, dim=-1) * mask.any(dim=-1, keepdim=True)  # empty rows -> 0


class AdditiveAttention(nn.Module):
    """Single-head additive (Bahdanau) attention.

    .. math::

        e_{ij} = w^\\top \\tanh(W_q x_i + W_k c_j), \\qquad
        a_{ij} = \\operatorname{softmax}_j(e_{ij}), \\qquad o_i = \\sum_j a_{ij} v_j ,

    the "additive attention" of Vaswani et al. (section 3.2.1), which "computes the
    compatibility function using a feed-forward network with a single hidden layer" of width
    ``d_attn``. Masks follow :func:`scaled_dot_product_attention` (bool, ``True`` = may
    attend; a fully masked row gives zero weights and a zero output).

    Args:
        d_query: width of the queries' input ``x``.
        d_key: width of the keys' input ``c``.
        d_attn: width of the hidden layer (:math:`W_q, W_k` map to it; the :math:`d_k` of the
            comparison with dot-product attention).

    Submodules ``q_proj`` (``d_query -> d_attn``) and ``k_proj`` (``d_key -> d_attn``, with
    the hidden layer's bias) and the parameter ``w`` of shape ``(d_attn,)``. The values are
    used as given (project them outside if needed).
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
        """``x`` (..., T_q, d_query), ``context`` (..., T_k, d_key) -> scores (..., T_q, T_k)."""
        return additive_scores(self.q_proj(x), self.k_proj(context), self.w)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor,
        value: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        return_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend from ``x`` to ``context``.

        Args:
            x: queries' input ``(..., T_q, d_query)``.
            context: keys' input ``(..., T_k, d_key)``.
            value: values ``(..., T_k, d_v)``; default ``context``.
            mask: optional bool mask broadcastable to ``(..., T_q, T_k)``, ``True`` = may attend.
            return_weights: also return the weights ``(..., T_q, T_k)``.

        Returns:
            ``out`` ``(..., T_q, d_v)``, or ``(out, weights)``.
        """
        check_tensor("x", x, floating=True, min_ndim=2, dims="(..., T_q, d_query)")
        check_tensor("context", context, floating=True, min_ndim=2, dims="(..., T_k, d_key)")
        for name, t, width in (
            ("x", x, self.q_proj.in_features),
            ("context", context, self.k_proj.in_features),
        ):
            if t.shape[-1] != width:
                raise ValueError(
                    f"{name} must have {width} features in its last dimension, "
                    f"got shape {tuple(t.shape)}"
                )
        check_input_dtype("x", x, self.q_proj.weight)
        check_input_dtype("context", context, self.k_proj.weight)
        check_bool("return_weights", return_weights)
        value = context if value is None else value
        check_tensor("value", value, floating=True, min_ndim=2, dims="(..., T_k, d_v)")
        if value.shape[-2] != context.shape[-2]:
            raise ValueError(
                "value and context must have the same number of keys T_k, got "
                f"{value.shape[-2]} and {context.shape[-2]}"
            )
        weights = _masked_softmax(self.scores(x, context), mask)
        out = weights @ value  # (..., T_q, d_v)
        return (out, weights) if return_weights else out

    def extra_repr(self) -> str:
        return f"d_attn={self.d_attn}"
