"""LayerNorm, the position-wise feed-forward block, and Transformer blocks in both placements.

Every module here maps a tensor of shape ``(B, T, d_model)`` (batch, positions, features)
to a tensor of the same shape. The pieces (chapter 5):

- :class:`LayerNorm`: written from scratch; normalises each token's feature vector
  (statistics over the last dimension), then applies a learned per-feature affine map.
  It equals :class:`torch.nn.LayerNorm` (tested).
- :class:`FeedForward`: ``Linear -> activation -> Linear``, applied to every position
  independently with the same weights ("position-wise").
- :class:`TransformerBlock`: built from the attention and feed-forward modules it is given,
  each wrapped in a residual connection, with LayerNorm placed either after the residual
  sum (Post-LN, the original Transformer) or at the entrance of each sub-layer (Pre-LN,
  GPT-2 and most models since); with ``cross_attn=`` it is an encoder-decoder's decoder
  block. A stack is an ``nn.ModuleList`` of blocks, plus one final LayerNorm for Pre-LN.

Dropout placement follows the original Transformer: dropout on each sub-layer's output
before it is added to the residual stream ("residual dropout"), plus dropout on the
attention weights (inside :class:`~mini_transformer.attention.MultiHeadAttention`) and on
the feed-forward block's hidden activation. With ``dropout=0.0`` (the default) every
module is deterministic.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import MultiHeadAttention
from .checks import (
    check_bool,
    check_choice,
    check_float,
    check_input_dtype,
    check_instance,
    check_int,
    check_probability,
    check_tensor,
)

# Counting residual paths (chapter 5) lives in paths.py; importable from here too.
from .paths import count_paths_by_length as count_paths_by_length
from .paths import residual_paths as residual_paths

__all__ = [
    "LayerNorm",
    "FeedForward",
    "TransformerBlock",
    "NORM_POSITIONS",
    "ACTIVATIONS",
    "EPS_MIN",
]

NORM_POSITIONS = ("pre", "post")
"""The two LayerNorm placements, ``"pre"`` (x + F(LN(x))) and ``"post"`` (LN(x + F(x)))."""

ACTIVATIONS = ("gelu", "relu")
"""The feed-forward activations, exact GELU (erf form, as ``F.gelu``) or ReLU."""

EPS_MIN = torch.finfo(torch.float32).tiny
"""The smallest LayerNorm ``eps``: float32's smallest normal number, about 1.18e-38."""


def _check_input(x: object, d_model: int, name: str = "x") -> None:
    check_tensor(name, x, floating=True, min_ndim=1, dims="(..., d_model)")
    if x.shape[-1] != d_model:  # type: ignore[union-attr]
        raise ValueError(
            f"{name} must have last dimension d_model={d_model}, got shape {tuple(x.shape)}"
        )


# --------------------------------------------------------------------------- LayerNorm


class LayerNorm(nn.Module):
    r"""Layer normalisation over the last dimension, written from scratch.

    For each token vector :math:`x \in \mathbb{R}^{d}` (``d = d_model``; every other
    dimension is a batch dimension):

    .. math::

        \mu = \frac{1}{d}\sum_{i=1}^{d} x_i, \qquad
        \sigma^2 = \frac{1}{d}\sum_{i=1}^{d} (x_i - \mu)^2, \qquad
        y_i = \gamma_i \, \frac{x_i - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta_i .

    The variance is the *biased* one (divide by ``d``, not ``d - 1``), as in
    :class:`torch.nn.LayerNorm` and Ba et al. (2016). ``gamma`` and ``beta`` are shared
    by all tokens and stored as ``.weight`` (initialised to ones) and ``.bias``
    (initialised to zeros), so a state dict loads into ``nn.LayerNorm(d_model)`` and back.

    Contrast with BatchNorm, which normalises each *feature* with statistics over the
    batch (and positions); LayerNorm's statistics belong to one token, so it behaves the
    same in training and inference and for any batch size or sequence length.

    float16 and bfloat16 inputs are normalised in float32, as :class:`torch.nn.LayerNorm`
    does: in float16 :math:`(x_i - \mu)^2` overflows (max 65504) once a feature is about
    256 away from the mean, and the whole token would come out as zeros.

    Args:
        d_model: size of the last dimension, a positive integer.
        eps: constant added to the variance (avoids division by zero for a constant
            vector), finite and at least ``EPS_MIN`` (float32's smallest normal number).
        bias: learn ``beta``; ``False`` keeps ``.bias`` as a constant zero buffer (not a
            parameter, not in the state dict), as a model without biases wants.

    Shape:
        ``(..., d_model) -> (..., d_model)``, typically ``(B, T, d_model)``.

    Example:
        >>> ln = LayerNorm(8)
        >>> ln(torch.randn(2, 5, 8)).shape
        torch.Size([2, 5, 8])
    """

    def __init__(self, d_model: int, eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, low=1)
        # eps is added to a float32 (or float64) variance: below float32's smallest normal
        # number it rounds away, and a constant vector gives 0 * rsqrt(0) = NaN.
        self.eps = check_float("eps", eps, low=EPS_MIN, what=f"a finite number >= {EPS_MIN:.3g}")
        self.weight = nn.Parameter(torch.ones(d_model))  # gamma
        if check_bool("bias", bias):
            self.bias = nn.Parameter(torch.zeros(d_model))  # beta
        else:
            self.register_buffer("bias", torch.zeros(d_model), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        _check_input(x, self.d_model)
        # float16 overflows at 65504: (x - mu)^2 does once a feature is ~256 from the mean,
        # which zeroes the whole token. Statistics in float32, as torch.nn.LayerNorm does.
        out_dtype = torch.promote_types(x.dtype, self.weight.dtype)
        if x.dtype in (torch.float16, torch.bfloat16):
            x = x.float()
        mu = x.mean(dim=-1, keepdim=True)  # (..., 1)
        var = (x - mu).pow(2).mean(dim=-1, keepdim=True)  # (..., 1), biased
        x_hat = (x - mu) * torch.rsqrt(var + self.eps)  # (..., d_model)
        return (x_hat * self.weight + self.bias).to(out_dtype)

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"


# --------------------------------------------------------------------------- FFN


class FeedForward(nn.Module):
    r"""The position-wise feed-forward block.

    .. math::

        \mathrm{FFN}(x) = \phi(x W_1 + b_1)\, W_2 + b_2,
        \qquad W_1 \in \mathbb{R}^{d_\text{model} \times d_\text{ff}},\;
        W_2 \in \mathbb{R}^{d_\text{ff} \times d_\text{model}},

    with :math:`\phi` = GELU or ReLU (the original Transformer used ReLU and
    ``d_ff = 4 d_model``). The same weights act on every position separately: permuting
    the positions of the input permutes the output the same way, and a token gives the
    same output wherever it stands. Dropout (if any) acts on the hidden activation.

    Args:
        d_model: input and output size, a positive integer.
        d_ff: hidden size, a positive integer.
        dropout: probability in ``[0, 1)`` for the hidden activation.
        activation: ``"gelu"`` (exact, erf form) or ``"relu"``.
        bias: whether the two linear layers have biases ``b_1``, ``b_2``.

    Shape:
        ``(..., d_model) -> (..., d_model)``; ``linear1`` and ``linear2`` are the two
        :class:`torch.nn.Linear` layers (the names :class:`torch.nn.TransformerEncoderLayer`
        uses).
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "gelu",
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, low=1)
        self.d_ff = check_int("d_ff", d_ff, low=1)
        self.activation = check_choice("activation", activation, ACTIVATIONS)
        bias = check_bool("bias", bias)
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)  # W_1, b_1
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)  # W_2, b_2
        self.dropout = nn.Dropout(check_probability("dropout", dropout))

    def forward(self, x: Tensor) -> Tensor:
        _check_input(x, self.d_model)
        check_input_dtype("x", x, self.linear1.weight)
        h = self.linear1(x)  # (..., d_ff)
        h = F.gelu(h) if self.activation == "gelu" else F.relu(h)
        return self.linear2(self.dropout(h))  # (..., d_model)

    def extra_repr(self) -> str:
        return f"activation={self.activation!r}"


# --------------------------------------------------------------------------- blocks


class TransformerBlock(nn.Module):
    r"""One Transformer block, wired from the parts it is given (as labml's implementations).

    Post-LN (Vaswani et al., 2017), LayerNorm after each residual sum:

    .. math::

        x \leftarrow \mathrm{LN}_1\big(x + \mathrm{Drop}(\mathrm{Attn}(x))\big), \qquad
        x \leftarrow \mathrm{LN}_2\big(x + \mathrm{Drop}(\mathrm{FFN}(x))\big).

    Pre-LN (Xiong et al., 2020; GPT-2), LayerNorm at the entrance of each sub-layer, the
    residual stream itself is never normalised inside the block (so a stack of Pre-LN blocks
    needs one final LayerNorm, as :class:`~mini_transformer.model.TransformerLM` has):

    .. math::

        x \leftarrow x + \mathrm{Drop}(\mathrm{Attn}(\mathrm{LN}_1(x))), \qquad
        x \leftarrow x + \mathrm{Drop}(\mathrm{FFN}(\mathrm{LN}_2(x))).

    With ``cross_attn`` it is the decoder block of an encoder-decoder: between the two, a
    third sub-layer attends from the decoder stream to ``memory`` (the encoder's output),
    :math:`x \leftarrow x + \mathrm{Drop}(\mathrm{CrossAttn}(\mathrm{LN}_c(x), m))` in Pre-LN.

    Args:
        attn: the self-attention, a :class:`~mini_transformer.attention.MultiHeadAttention`
            (its ``rotary``/``alibi`` are the block's positional scheme, if any).
        ffn: the :class:`FeedForward` block, of the same ``d_model``.
        cross_attn: optional :class:`~mini_transformer.attention.MultiHeadAttention` from
            the stream to ``memory``; ``None`` for an encoder or decoder-only block.
        norm_position: ``"pre"`` or ``"post"``.
        causal: position ``t`` attends only to positions ``<= t`` in the self-attention.
        dropout: residual dropout on each sub-layer's output, in ``[0, 1)``.
        eps: LayerNorm epsilon.
        bias: whether the block's LayerNorms learn a shift ``beta``.

    The parts given are kept as ``attn``, ``ffn`` and ``cross_attn``; ``ln1``, ``ln2`` (and
    ``ln_cross`` with ``cross_attn``) are the :class:`LayerNorm` around each, and ``dropout``
    is the residual dropout.

    Shape:
        ``x``: ``(B, T, d_model)`` (and ``memory``: ``(B, S, d_model)``) -> ``(B, T, d_model)``.

    Example:
        >>> block = TransformerBlock(MultiHeadAttention(16, 4), FeedForward(16, 64), causal=True)
        >>> block(torch.randn(2, 5, 16)).shape
        torch.Size([2, 5, 16])
    """

    def __init__(
        self,
        attn: MultiHeadAttention,
        ffn: FeedForward,
        *,
        cross_attn: MultiHeadAttention | None = None,
        norm_position: str = "pre",
        causal: bool = False,
        dropout: float = 0.0,
        eps: float = 1e-5,
        bias: bool = True,
    ) -> None:
        super().__init__()
        check_instance("attn", attn, MultiHeadAttention, "a MultiHeadAttention")
        check_instance("ffn", ffn, FeedForward, "a FeedForward")
        if cross_attn is not None:
            check_instance("cross_attn", cross_attn, MultiHeadAttention, "a MultiHeadAttention")
        for name, part in (("ffn", ffn), ("cross_attn", cross_attn)):
            if part is not None and part.d_model != attn.d_model:
                raise ValueError(
                    f"{name} must have the attention's d_model={attn.d_model}, got {part.d_model}"
                )
        self.norm_position = check_choice("norm_position", norm_position, NORM_POSITIONS)
        self.causal = check_bool("causal", causal)
        self.d_model = d = attn.d_model
        self.attn = attn
        self.ffn = ffn
        self.ln1 = LayerNorm(d, eps=eps, bias=bias)
        self.ln2 = LayerNorm(d, eps=eps, bias=bias)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        self.cross_attn = cross_attn
        self.ln_cross = LayerNorm(d, eps=eps, bias=bias) if cross_attn is not None else None

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> Tensor:
        """Apply the block. Each input is checked by the part that reads it first.

        Args:
            x: ``(B, T, d_model)``.
            mask: optional boolean self-attention mask, ``True`` = may attend, broadcastable
                to ``(B, n_heads, T, T)``; combined with the causal mask when ``causal``.
            memory: the encoder output ``(B, S, d_model)``; required with ``cross_attn``.
            memory_mask: optional boolean mask for the cross-attention, broadcastable to
                ``(B, n_heads, T, S)``, e.g. the source's padding.

        Returns:
            ``(B, T, d_model)``.
        """
        if (memory is None) != (self.cross_attn is None):
            raise ValueError(
                "memory must be given exactly when the block has a cross_attn, got "
                f"memory={'None' if memory is None else 'a tensor'} and "
                f"cross_attn={'None' if self.cross_attn is None else 'a module'}"
            )

        def attn(h: Tensor) -> Tensor:
            return self.attn(h, mask=mask, causal=self.causal)[0]

        def cross(h: Tensor) -> Tensor:
            return self.cross_attn(h, memory=memory, mask=memory_mask)[0]

        drop = self.dropout
        if self.norm_position == "pre":  # x + F(LN(x))
            x = x + drop(attn(self.ln1(x)))
            if self.cross_attn is not None:
                x = x + drop(cross(self.ln_cross(x)))
            return x + drop(self.ffn(self.ln2(x)))
        x = self.ln1(x + drop(attn(x)))  # post: LN(x + F(x))
        if self.cross_attn is not None:
            x = self.ln_cross(x + drop(cross(x)))
        return self.ln2(x + drop(self.ffn(x)))

    def extra_repr(self) -> str:
        return f"norm_position={self.norm_position!r}, causal={self.causal}"
