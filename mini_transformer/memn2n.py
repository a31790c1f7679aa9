r"""MemN2N's position encoding (Sukhbaatar et al., 2015; chapter 3).

End-To-End Memory Networks weight word $j$ of a $J$-word sentence element-wise by a vector
$l_j$ before summing the words into one memory vector: a *multiplicative* encoding, relative
to the sentence length, unlike the additive sinusoidal and learned ones.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from . import checks
from .checks import check_int, check_rows, check_size

__all__ = ["memn2n_encoding", "MemN2NPositionalEncoding"]


def memn2n_encoding(sentence_length: int, d_model: int) -> np.ndarray:
    r"""The position encoding of End-To-End Memory Networks (Sukhbaatar et al., 2015).

    $$l_{kj} = \left(1 - \frac{j}{J}\right) - \frac{k}{d}\left(1 - \frac{2j}{J}\right),
    \quad j = 1, \dots, J, \; k = 1, \dots, d$$

    with the paper's 1-based $j$ and $k$: a float64 ``(J, d)`` array, ``out[j-1, k-1] =
    l_kj``. It depends on ``J``: the same position gets another vector in another length.
    """
    J = check_int("sentence_length", sentence_length, low=1)
    d = check_int("d_model", d_model, low=1)
    check_size("the encoding (sentence_length, d_model)", (J, d), np.float64)
    j = np.arange(1, J + 1, dtype=np.float64)[:, None]
    k = np.arange(1, d + 1, dtype=np.float64)[None, :]
    return (1 - j / J) - (k / d) * (1 - 2 * j / J)


class MemN2NPositionalEncoding(nn.Module):
    r"""MemN2N's multiplicative encoding: ``x * l`` with $l$ from :func:`memn2n_encoding`.

    ``(B, T, d_model) -> (B, T, d_model)`` with ``J = T``, so the same position is scaled
    differently in sequences of different length; summing over ``T`` gives MemN2N's sentence
    vector $m = \sum_j l_j \odot x_j$.
    """

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, low=1)

    @checks.entry(check_rows)  # checked only when called directly, not inside a model
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        J, d = x.shape[1], self.d_model
        j = torch.arange(1, J + 1, dtype=torch.float64, device=x.device)[:, None]
        k = torch.arange(1, d + 1, dtype=torch.float64, device=x.device)[None, :]
        l = (1 - j / J) - (k / d) * (1 - 2 * j / J)  # (J, d), the paper's l_kj
        return x * l.to(dtype=x.dtype)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}"
