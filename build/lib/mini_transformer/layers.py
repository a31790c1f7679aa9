"""LayerNorm, the position-wise feed-forward block, and Transformer blocks in both placements.

Every module here maps a tensor of shape ``(B, T, d_model)`` (batch, positions, features)
to a tensor of the same shape. The pieces (chapter 5):

- :class:`LayerNorm`: written from scratch; normalises each token's feature vector
  (statistics over the last dimension), then applies a learned per-feature affine map.
  It equals :class:`torch.nn.LayerNorm` (tested).
- :class:`FeedForward`: ``Linear -> activation -> Linear``, applied to every position
  independently with the same weights ("position-wise").
- :class:`TransformerBlock`: self-attention and a feed-forward block, each wrapped in a
  residual connection, with LayerNorm placed either after the residual sum (Post-LN, the
  original Transformer) or at the entrance of each sub-layer (Pre-LN, GPT-2 and most
  models since).
- :class:`DecoderBlock`: causal self-attention, cross-attention on an encoder's output
  (``memory``), and a feed-forward block, in either placement.
- :class:`TransformerStack`: ``n_layers`` blocks, plus the final LayerNorm that a Pre-LN
  stack needs (its residual stream is never normalised otherwise).

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
    "DecoderBlock",
    "TransformerStack",
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


# --------------------------------------------------------------------------- validation


def _check_block_args(
    d_model: int, n_heads: int, d_ff: int, norm_position: str, dropout: float
) -> tuple[int, str, float]:
    """The checks every block constructor makes: ``(d_model, norm_position, dropout)``."""
    check_int("n_heads", n_heads, low=1)
    check_int("d_ff", d_ff, low=1)
    norm_position = check_choice("norm_position", norm_position, NORM_POSITIONS)
    dropout = check_probability("dropout", dropout)
    return check_int("d_model", d_model, low=1), norm_position, dropout


def _check_input(x: object, d_model: int, name: str = "x") -> None:
    check_tensor(name, x, floating=True)
    if x.dim() == 0 or x.shape[-1] != d_model:  # type: ignore[union-attr]
        raise ValueError(
            f"{name} must have last dimension d_model={d_model}, got shape {tuple(x.shape)}"
        )


def _check_sequence(x: object, d_model: int, name: str = "x") -> None:
    _check_input(x, d_model, name)
    if x.dim() != 3:  # type: ignore[union-attr]
        raise ValueError(
            f"{name} must have shape (B, T, d_model={d_model}), got {tuple(x.shape)}"  # type: ignore[union-attr]
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
    r"""One encoder (or decoder-only) block: self-attention and FFN with residuals.

    Post-LN (Vaswani et al., 2017), LayerNorm after each residual sum:

    .. math::

        x \leftarrow \mathrm{LN}_1\big(x + \mathrm{Drop}(\mathrm{Attn}(x))\big), \qquad
        x \leftarrow \mathrm{LN}_2\big(x + \mathrm{Drop}(\mathrm{FFN}(x))\big).

    Pre-LN (Xiong et al., 2020; GPT-2), LayerNorm at the entrance of each sub-layer, the
    residual stream itself is never normalised inside the block:

    .. math::

        x \leftarrow x + \mathrm{Drop}(\mathrm{Attn}(\mathrm{LN}_1(x))), \qquad
        x \leftarrow x + \mathrm{Drop}(\mathrm{FFN}(\mathrm{LN}_2(x))).

    A stack of Pre-LN blocks therefore needs one final LayerNorm (see
    :class:`TransformerStack`).

    Args:
        d_model: model width, a positive integer divisible by ``n_heads``.
        n_heads: number of attention heads.
        d_ff: hidden size of the feed-forward block.
        dropout: probability in ``[0, 1)`` for residual, attention and FFN dropout.
        norm_position: ``"pre"`` or ``"post"``.
        causal: if ``True`` position ``t`` attends only to positions ``<= t``.
        fused: use PyTorch's fused attention kernel (``False``: the from-scratch path).
        activation: FFN activation, ``"gelu"`` or ``"relu"``.
        eps: LayerNorm epsilon.
        bias: biases in every linear layer and LayerNorm of the block (``False``: none).
        rotary, alibi: positional schemes inside the self-attention, as
            :class:`~mini_transformer.attention.MultiHeadAttention` (``None``: none).

    Attributes:
        attn: the :class:`~mini_transformer.attention.MultiHeadAttention` sub-layer.
        ffn: the :class:`FeedForward` sub-layer.
        ln1: the :class:`LayerNorm` around the attention sub-layer.
        ln2: the :class:`LayerNorm` around the feed-forward sub-layer.
        dropout: dropout on each sub-layer's output.

    Shape:
        ``x``: ``(B, T, d_model)`` -> ``(B, T, d_model)``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_position: str = "pre",
        causal: bool = False,
        fused: bool = True,
        activation: str = "gelu",
        eps: float = 1e-5,
        bias: bool = True,
        rotary: torch.nn.Module | None = None,
        alibi: torch.nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.d_model, self.norm_position, p = _check_block_args(
            d_model, n_heads, d_ff, norm_position, dropout
        )
        self.causal = check_bool("causal", causal)
        self.attn = MultiHeadAttention(
            d_model, n_heads, dropout=p, bias=bias, fused=fused, rotary=rotary, alibi=alibi
        )
        self.ffn = FeedForward(d_model, d_ff, dropout=p, activation=activation, bias=bias)
        self.ln1 = LayerNorm(d_model, eps=eps, bias=bias)
        self.ln2 = LayerNorm(d_model, eps=eps, bias=bias)
        self.dropout = nn.Dropout(p)

    def _self_attn(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self.attn(x, mask=mask, is_causal=self.causal)[0]

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """Apply the block.

        Args:
            x: ``(B, T, d_model)``.
            mask: optional boolean attention mask, ``True`` = may attend, broadcastable to
                ``(B, n_heads, T, T)``; combined with the causal mask when ``causal=True``.

        Returns:
            ``(B, T, d_model)``.
        """
        _check_sequence(x, self.d_model)
        if self.norm_position == "pre":
            x = x + self.dropout(self._self_attn(self.ln1(x), mask))
            x = x + self.dropout(self.ffn(self.ln2(x)))
        else:
            x = self.ln1(x + self.dropout(self._self_attn(x, mask)))
            x = self.ln2(x + self.dropout(self.ffn(x)))
        return x

    def extra_repr(self) -> str:
        return f"norm_position={self.norm_position!r}, causal={self.causal}"


class DecoderBlock(TransformerBlock):
    r"""A :class:`TransformerBlock` with cross-attention: the decoder of an encoder-decoder.

    Causal self-attention (``attn``, also reachable as ``self_attn``), then cross-attention
    whose queries come from the decoder stream ``x`` (length ``T``) and keys and values from
    ``memory`` (the encoder's output, length ``S``), then the feed-forward block. Pre-LN:

    .. math::

        x \leftarrow x + \mathrm{Drop}(\mathrm{SelfAttn}(\mathrm{LN}_1(x))),\;
        x \leftarrow x + \mathrm{Drop}(\mathrm{CrossAttn}(\mathrm{LN}_c(x), m)),\;
        x \leftarrow x + \mathrm{Drop}(\mathrm{FFN}(\mathrm{LN}_2(x))),

    and Post-LN puts each LayerNorm after its residual sum instead. Arguments as
    :class:`TransformerBlock` (self-attention is always causal; ``rotary`` and ``alibi`` act
    on it only, since source and target positions are not comparable).

    Attributes:
        cross_attn: :class:`~mini_transformer.attention.MultiHeadAttention` from ``x`` to
            ``memory``; ``ln_cross`` the :class:`LayerNorm` around it. The rest as
            :class:`TransformerBlock`.

    Shape:
        ``x``: ``(B, T, d_model)``, ``memory``: ``(B, S, d_model)`` -> ``(B, T, d_model)``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_position: str = "pre",
        fused: bool = True,
        activation: str = "gelu",
        eps: float = 1e-5,
        bias: bool = True,
        rotary: torch.nn.Module | None = None,
        alibi: torch.nn.Module | None = None,
    ) -> None:
        super().__init__(
            d_model,
            n_heads,
            d_ff,
            dropout,
            norm_position,
            causal=True,
            fused=fused,
            activation=activation,
            eps=eps,
            bias=bias,
            rotary=rotary,
            alibi=alibi,
        )
        p = self.dropout.p
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=p, bias=bias, fused=fused)
        self.ln_cross = LayerNorm(d_model, eps=eps, bias=bias)

    @property
    def self_attn(self) -> MultiHeadAttention:
        """The causal self-attention (``attn``), by the name encoder-decoder texts use."""
        return self.attn

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> Tensor:
        """Apply the block.

        Args:
            x: decoder stream ``(B, T, d_model)``.
            memory: encoder output ``(B, S, d_model)``; ``S`` may differ from ``T``.
            mask: optional extra boolean mask for the self-attention (``True`` = may
                attend), combined with the causal mask.
            memory_mask: optional boolean mask ``(B or 1, 1, T or 1, S)`` for the
                cross-attention, e.g. padding of the source.

        Returns:
            ``(B, T, d_model)``.
        """
        _check_sequence(x, self.d_model, "x")
        _check_sequence(memory, self.d_model, "memory")
        if memory.shape[0] != x.shape[0]:
            raise ValueError(
                f"memory must have the same batch size as x, got {memory.shape[0]} and {x.shape[0]}"
            )

        def cross(h: Tensor) -> Tensor:
            return self.cross_attn(h, context=memory, mask=memory_mask)[0]

        if self.norm_position == "pre":
            x = x + self.dropout(self._self_attn(self.ln1(x), mask))
            x = x + self.dropout(cross(self.ln_cross(x)))
            x = x + self.dropout(self.ffn(self.ln2(x)))
        else:
            x = self.ln1(x + self.dropout(self._self_attn(x, mask)))
            x = self.ln_cross(x + self.dropout(cross(x)))
            x = self.ln2(x + self.dropout(self.ffn(x)))
        return x


class TransformerStack(nn.Module):
    r"""``n_layers`` :class:`TransformerBlock` s, with the final LayerNorm Pre-LN needs.

    .. math::

        h_0 = x, \qquad h_\ell = \mathrm{Block}_\ell(h_{\ell-1}), \qquad
        y = \begin{cases} \mathrm{LN}_f(h_L) & \text{Pre-LN} \\ h_L & \text{Post-LN} \end{cases}

    In Post-LN every block already ends with a LayerNorm; in Pre-LN the residual stream
    ``h_L`` is a sum of ``2L + 1`` un-normalised terms, so ``ln_f`` normalises it once
    before the output head.

    Args:
        n_layers: number of blocks, a positive integer.
        d_model, n_heads, d_ff, dropout, norm_position, causal, fused, activation, eps, bias:
            as :class:`TransformerBlock`.
        rotary, alibi: as :class:`TransformerBlock`, one instance shared by every block.

    Attributes:
        blocks: ``nn.ModuleList`` of :class:`TransformerBlock`.
        ln_f: the final :class:`LayerNorm` for ``"pre"``; ``None`` for ``"post"``.

    Shape:
        ``(B, T, d_model) -> (B, T, d_model)``.
    """

    def __init__(
        self,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_position: str = "pre",
        causal: bool = False,
        fused: bool = True,
        activation: str = "gelu",
        eps: float = 1e-5,
        bias: bool = True,
        rotary: torch.nn.Module | None = None,
        alibi: torch.nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.n_layers = check_int("n_layers", n_layers, low=1)
        self.d_model = check_int("d_model", d_model, low=1)
        self.norm_position = check_choice("norm_position", norm_position, NORM_POSITIONS)
        block = dict(dropout=dropout, norm_position=norm_position, causal=causal, fused=fused)
        block |= dict(activation=activation, eps=eps, bias=bias, rotary=rotary, alibi=alibi)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, n_heads, d_ff, **block) for _ in range(n_layers)
        )
        self.ln_f = LayerNorm(d_model, eps=eps, bias=bias) if norm_position == "pre" else None

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """Apply every block in turn, then ``ln_f`` for Pre-LN. ``(B, T, d_model)`` in and out."""
        _check_sequence(x, self.d_model)
        for block in self.blocks:
            x = block(x, mask=mask)
        if self.ln_f is not None:
            x = self.ln_f(x)
        return x
