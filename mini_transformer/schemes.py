"""The positional schemes of :class:`~mini_transformer.model.TransformerLM`, one row each.

Six ways to tell the model where a token is (chapters 1-3). Four act on the token
embeddings before the first block (learned, sinusoidal, MemN2N, or nothing); two act inside
every attention layer (RoPE rotates queries and keys, ALiBi biases the scores). Everything
the model does differently per scheme is in that scheme's :class:`PositionalScheme` row of
:data:`SCHEMES`, so nothing else compares scheme names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .memn2n import MemN2NPositionalEncoding
from .positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding

# The rows read a model.TransformerConfig (``c.d_model``, ``c.block_size``); it is typed
# ``Config`` here so that this table does not import the model that imports it.
Config = Any

__all__ = ["PositionalScheme", "SCHEMES", "POSITIONAL_SCHEMES", "EXTRAPOLATING_SCHEMES", "MAX_LEN"]

#: Longest sequence a sinusoidal table is built for (at least ``block_size``).
MAX_LEN = 4096


@dataclass(frozen=True)
class PositionalScheme:
    """Where one positional scheme acts: the model reads its row of :data:`SCHEMES`, once.

    Attributes:
        input: config -> the module applied to the token embeddings before the first block
            (``None``: nothing acts on the input).
        rotary: the model builds one ``RotaryEmbedding`` and gives it to every attention layer.
        alibi: the model builds one ``ALiBi`` and gives it to every attention layer.
        scale_embeddings: multiply the token embeddings by :math:`\\sqrt{d_\\text{model}}`
            first (Vaswani et al., section 3.4).
        extrapolates: accepts sequences longer than ``block_size``.
        learned_table: the model holds a trained ``(block_size, d_model)`` table,
            ``pos_emb.weight``.
        table_floats: config -> float32 entries of the non-parameter tables it builds (what a
            checkpoint's declared config would allocate besides the weights).
    """

    input: Callable[[Config], torch.nn.Module | None] = lambda c: None
    rotary: bool = False
    alibi: bool = False
    scale_embeddings: bool = False
    extrapolates: bool = True
    learned_table: bool = False
    table_floats: Callable[[Config], int] = lambda c: 0


SCHEMES: dict[str, PositionalScheme] = {
    "none": PositionalScheme(),
    "learned": PositionalScheme(
        input=lambda c: LearnedPositionalEmbedding(c.block_size, c.d_model, init_std=0.02),
        extrapolates=False,
        learned_table=True,
    ),
    "sinusoidal": PositionalScheme(
        input=lambda c: SinusoidalPositionalEncoding(c.d_model, max_len=_sinusoidal_len(c)),
        scale_embeddings=True,
        table_floats=lambda c: 2 * _sinusoidal_len(c) * c.d_model,  # float64, then float32
    ),
    "memn2n": PositionalScheme(input=lambda c: MemN2NPositionalEncoding(c.d_model)),
    "rope": PositionalScheme(rotary=True, table_floats=lambda c: 2 * c.block_size * c.d_head),
    "alibi": PositionalScheme(alibi=True, table_floats=lambda c: c.n_heads * c.block_size**2),
}
"""One row per positional scheme, holding everything the model does differently for it."""

POSITIONAL_SCHEMES = tuple(SCHEMES)
"""The accepted values of ``TransformerConfig.positional``."""

#: Schemes whose forward pass accepts sequences longer than ``block_size``.
EXTRAPOLATING_SCHEMES = tuple(name for name, s in SCHEMES.items() if s.extrapolates)


def _sinusoidal_len(c: Config) -> int:
    return max(MAX_LEN, c.block_size)
