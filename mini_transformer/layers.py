"""LayerNorm, the position-wise feed-forward block, and the Transformer block (chapter 5).

Every module maps ``(B, T, d_model)`` to the same shape. Dropout on each sub-layer's output
before the residual sum (the paper), on the attention weights and on the feed-forward hidden
activation (options of the paper's code, tensor2tensor: off in its first base configuration,
0.1 from ``transformer_base_v2``); ``dropout=0.0`` (the default) is deterministic.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import checks
from .attention import MultiHeadAttention
from .checks import (
    check_bool,
    check_choice,
    check_float,
    check_instance,
    check_int,
    check_probability,
    check_tensor,
)

__all__ = ["LayerNorm", "FeedForward", "TransformerBlock", "residual_paths"]

NORM_POSITIONS = ("pre", "post")  # x + F(LN(x)) or LN(x + F(x))
ACTIVATIONS = ("gelu", "relu")  # exact (erf) GELU as F.gelu, or ReLU
EPS_MIN = torch.finfo(torch.float32).tiny  # float32's smallest normal number, ~1.18e-38


class LayerNorm(nn.Module):
    r"""Layer normalisation over the last dimension, written from scratch.

    For each token vector $x \in \mathbb{R}^{d}$, ``d = d_model`` (other dimensions batch):
    $$\mu = \tfrac{1}{d}\sum_i x_i, \quad \sigma^2 = \tfrac{1}{d}\sum_i (x_i - \mu)^2, \quad
    y_i = \gamma_i \frac{x_i - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta_i.$$

    The *biased* variance (divide by ``d``), as :class:`torch.nn.LayerNorm` and Ba et al.
    (2016); ``gamma`` and ``beta`` are ``.weight`` and ``.bias``, so a state dict loads into
    ``nn.LayerNorm(d_model, bias=bias)`` and back (``bias=False``: an unsaved zero buffer). Unlike
    BatchNorm, the statistics belong to one token, so it behaves the same in training and
    inference, for any batch size or length.
    """

    def __init__(self, d_model: int, eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, low=1)
        # Below float32's smallest normal number, eps is 0 wherever subnormals are flushed to
        # zero (torch.set_flush_denormal(True)): a constant vector gives 0 * rsqrt(0) = NaN.
        self.eps = check_float("eps", eps, low=EPS_MIN, what=f"a finite number >= {EPS_MIN:.3g}")
        self._dims = f"(..., d_model={self.d_model})"
        self.weight = nn.Parameter(torch.ones(d_model))  # gamma
        if check_bool("bias", bias):
            self.bias = nn.Parameter(torch.zeros(d_model))  # beta
        else:  # a constant zero, not in the state dict
            self.register_buffer("bias", torch.zeros(d_model), persistent=False)

    def _check(self, x: Tensor) -> None:
        check_tensor("x", x, floating=True, shape=(..., self.d_model), dims=self._dims)

    @checks.entry(_check)  # checked only when called directly, not inside a model
    def forward(self, x: Tensor) -> Tensor:
        # float16 overflows at 65504: (x - mu)^2 does once a feature is ~256 from the mean,
        # which zeroes the whole token. Statistics in float32, as torch.nn.LayerNorm does.
        out_dtype = torch.promote_types(x.dtype, self.weight.dtype)
        if x.dtype in (torch.float16, torch.bfloat16):
            x = x.float()
        mu = x.mean(dim=-1, keepdim=True)  # mu = mean_i x_i                   (..., 1)
        var = (x - mu).pow(2).mean(dim=-1, keepdim=True)  # sigma^2, biased    (..., 1)
        x_hat = (x - mu) * torch.rsqrt(var + self.eps)  # (x - mu) / sqrt(sigma^2 + eps)
        return (x_hat * self.weight + self.bias).to(out_dtype)  # y = gamma x_hat + beta

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"


class FeedForward(nn.Module):
    r"""The position-wise feed-forward block, $\mathrm{FFN}(x) = \phi(x W_1 + b_1)\, W_2 + b_2$.

    $W_1$ is ``(d_model, d_ff)``, $\phi$ GELU or ReLU (the original Transformer: ReLU, ``d_ff =
    4 d_model``). The same weights act on every position separately, so permuting the positions
    permutes the output. ``linear1``/``linear2``: the names of ``nn.TransformerEncoderLayer``.
    """

    def __init__(
        self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "gelu", bias=True
    ) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, low=1)
        self.d_ff = check_int("d_ff", d_ff, low=1)
        self.activation = check_choice("activation", activation, ACTIVATIONS)
        bias = check_bool("bias", bias)
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)  # W_1, b_1
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)  # W_2, b_2
        self.dropout = nn.Dropout(check_probability("dropout", dropout))

    def _check(self, x: Tensor) -> None:
        dims, w = f"(..., d_model={self.d_model})", self.linear1.weight
        check_tensor("x", x, floating=True, shape=(..., self.d_model), dims=dims, dtype_of=w)

    @checks.entry(_check)
    def forward(self, x: Tensor) -> Tensor:
        h = self.linear1(x)  # x W_1 + b_1                     (..., d_ff)
        h = F.gelu(h) if self.activation == "gelu" else F.relu(h)  # phi
        return self.linear2(self.dropout(h))  # phi(.) W_2 + b_2  (..., d_model)

    def extra_repr(self) -> str:
        return f"activation={self.activation!r}"


class TransformerBlock(nn.Module):
    r"""One Transformer block, wired from the parts it is given (as labml's implementations).

    Post-LN (Vaswani et al., 2017): $x \leftarrow \mathrm{LN}(x + \mathrm{Drop}(F(x)))$ for
    each sub-layer $F$. Pre-LN (Xiong et al., 2020; GPT-2): $x \leftarrow x +
    \mathrm{Drop}(F(\mathrm{LN}(x)))$; the residual stream is never normalised inside the
    block, so a Pre-LN stack needs one final LayerNorm. The sub-layers are ``attn``, then
    ``cross_attn`` (an encoder-decoder's decoder block, attending to ``memory``, the
    encoder's output), then ``ffn``; ``ln1``, ``ln_cross``, ``ln2`` are their LayerNorms.

    Example:
        >>> block = TransformerBlock(MultiHeadAttention(16, 4), FeedForward(16, 64), causal=True)
        >>> block(torch.randn(2, 5, 16)).shape
        torch.Size([2, 5, 16])
    """

    def __init__(
        self, attn: MultiHeadAttention, ffn: FeedForward, *,
        cross_attn: MultiHeadAttention | None = None, norm_position: str = "pre",
        causal: bool = False, dropout: float = 0.0, eps: float = 1e-5, bias: bool = True,
    ) -> None:  # fmt: skip
        super().__init__()
        check_instance("attn", attn, MultiHeadAttention, "a MultiHeadAttention")
        check_instance("ffn", ffn, FeedForward, "a FeedForward")
        mha = (MultiHeadAttention, type(None))
        check_instance("cross_attn", cross_attn, mha, "a MultiHeadAttention or None")
        self.d_model = d = attn.d_model
        for n, part in (("ffn", ffn), ("cross_attn", cross_attn)):
            if part is not None and part.d_model != d:
                raise ValueError(f"{n} must have the attention's d_model={d}, got {part.d_model}")
        self.norm_position = check_choice("norm_position", norm_position, NORM_POSITIONS)
        self.causal = check_bool("causal", causal)
        self.attn = attn
        self.ffn = ffn
        self.ln1 = LayerNorm(d, eps=eps, bias=bias)
        self.ln2 = LayerNorm(d, eps=eps, bias=bias)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        self.cross_attn = cross_attn
        self.ln_cross = LayerNorm(d, eps=eps, bias=bias) if cross_attn is not None else None

    def forward(
        self, x: Tensor, mask: Tensor | None = None, memory=None, memory_mask=None
    ) -> Tensor:
        """``mask`` (self-attention) and ``memory_mask`` (cross-attention, e.g. the source's
        padding) are boolean, ``True`` = may attend; the parts check them."""
        if (memory is None) != (self.cross_attn is None):
            raise ValueError("memory must be given exactly when the block has a cross_attn")

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


def residual_paths(n_blocks: int) -> list[tuple[int, ...]]:
    r"""The $2^n$ paths through ``n_blocks`` residual blocks (Veit et al., 2016), shortest first.

    Unrolling $x_i = x_{i-1} + f_i(x_{i-1})$ writes the output as a sum over one path per
    subset of blocks; Veit et al. read a residual network as an ensemble of them. A path is
    the increasing tuple of the (1-based) blocks it goes through, ``()`` the identity; at
    most 20 blocks (a million paths), since the list doubles with every block.

    Example:
        >>> residual_paths(2)
        [(), (1,), (2,), (1, 2)]
    """
    check_int("n_blocks", n_blocks, low=1, high=20, why=" (2**n_blocks paths are listed)")
    paths: list[tuple[int, ...]] = [()]
    for k in range(1, n_blocks + 1):
        paths = paths + [p + (k,) for p in paths]  # each path skips or passes block k
    return sorted(paths, key=lambda p: (len(p), p))
