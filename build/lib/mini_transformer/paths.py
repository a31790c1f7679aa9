r"""The paths through a stack of residual blocks (Veit et al., 2016; chapter 5).

Unrolling :math:`x_i = x_{i-1} + f_i(x_{i-1})` over :math:`n` blocks writes the output as a
sum over :math:`2^n` paths, one per subset of the blocks; Veit et al. read a residual
network as an ensemble of these paths. Chapter 5 lists and counts them.
:mod:`mini_transformer.layers` re-exports both names.
"""

from __future__ import annotations

import math

from .checks import check_int

__all__ = ["residual_paths", "count_paths_by_length"]


def residual_paths(n_blocks: int) -> list[tuple[int, ...]]:
    r"""The paths through an unrolled stack of ``n_blocks`` residual blocks.

    Unrolling :math:`x_{i} = x_{i-1} + f_i(x_{i-1})` writes the output as a sum over
    :math:`2^n` paths, one per subset of blocks a signal passes through (Veit et al.,
    2016). Each path is returned as the increasing tuple of block indices (1-based) it
    goes through; ``()`` is the identity path.

    Example:
        >>> residual_paths(2)
        [(), (1,), (2,), (1, 2)]

    ``n_blocks`` is at most 20 (a million paths): the list doubles with every block.
    """
    check_int("n_blocks", n_blocks, low=1, high=20, why=" (2**n_blocks paths are listed)")
    paths: list[tuple[int, ...]] = [()]
    for k in range(1, n_blocks + 1):
        paths = paths + [p + (k,) for p in paths]
    return sorted(paths, key=lambda p: (len(p), p))


def count_paths_by_length(n_blocks: int) -> list[int]:
    r"""How many of the :math:`2^n` residual paths pass through exactly ``k`` blocks.

    The answer is the binomial coefficient :math:`\binom{n}{k}`, for ``k = 0..n``;
    ``n_blocks`` is at most 1000 (the coefficients grow to hundreds of digits).
    """
    check_int("n_blocks", n_blocks, low=1, high=1000)
    return [math.comb(n_blocks, k) for k in range(n_blocks + 1)]
