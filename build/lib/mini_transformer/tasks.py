"""Synthetic order-sensitive tasks for chapter 3's length-extrapolation lab.

Each task is a language-modelling problem in the shape ``TransformerLM.forward(idx, targets)``
expects: ``idx`` and ``targets`` are ``(n_samples, length)`` LongTensors, and ``targets`` holds
``IGNORE_INDEX`` (-100, the default ``ignore_index`` of ``F.cross_entropy``) wherever nothing
is scored. The target at position ``t`` is predicted from ``idx[:, : t + 1]`` (a causal model
sees no further), so no task ever asks for a token the model has not been shown. ``length`` is
the total sequence length ``T``: a model trained with ``length <= L`` can be evaluated at 2L.
Every task is a pure function of its arguments and ``generator`` (a seed or a
``torch.Generator``), so the book's results are reproducible.

:mod:`mini_transformer.data` re-exports these names (the book's API contract lists them there).
"""

from __future__ import annotations

import numpy as np
import torch

from .checks import check_int, check_size

__all__ = [
    "IGNORE_INDEX",
    "SYNTHETIC_TASKS",
    "copy_offset_task",
    "reverse_task",
    "sort_task",
    "order_task",
]

IGNORE_INDEX = -100
"""Target value that the loss and the accuracy skip (PyTorch's default ``ignore_index``)."""


def _task_generator(generator: int | torch.Generator | None) -> torch.Generator:
    if generator is None:
        return torch.Generator().manual_seed(0)
    if isinstance(generator, torch.Generator):
        return generator
    what = "a torch.Generator or a non-negative integer seed"
    if isinstance(generator, (bool, np.bool_)) or not isinstance(generator, (int, np.integer)):
        raise TypeError(f"generator must be {what}, got {generator!r}")
    if generator < 0:
        raise ValueError(f"generator must be {what}, got {generator!r}")
    return torch.Generator().manual_seed(int(generator))


def _check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    return check_int(name, value, low=low, high=high)


def _check_task_size(n_samples: int, length: int) -> None:
    check_size("the task (2, n_samples, length)", (2, n_samples, length), torch.long)


def copy_offset_task(
    n_samples: int,
    length: int,
    vocab_size: int = 16,
    offset: int = 2,
    generator: int | torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Copy the token ``offset`` steps back: ``targets[:, t] = idx[:, t - offset]``.

    The tokens are i.i.d. uniform on ``{0, ..., vocab_size - 1}``, so the answer at position
    ``t`` cannot be guessed from content: the model must find the position exactly
    ``offset`` before the current one. That is a *relative* rule, the same at every ``t``:
    an encoding in which attention scores depend on ``i - j`` (RoPE, ALiBi) can apply it
    at positions never seen in training; an absolute one must have learned it per position.
    The first ``offset`` positions have no answer and are ignored.

    Args:
        n_samples: number of sequences, >= 1.
        length: sequence length ``T``, > ``offset``.
        vocab_size: number of distinct tokens, >= 2 (chance accuracy is ``1 / vocab_size``).
        offset: how far back to copy from, >= 1.
        generator: a ``torch.Generator`` or an integer seed (``None`` means seed 0).

    Returns:
        ``(idx, targets)``, both LongTensors of shape ``(n_samples, length)``.

    Example:
        >>> idx, targets = copy_offset_task(1, 6, vocab_size=10, offset=2, generator=0)
        >>> bool((targets[0, 2:] == idx[0, :-2]).all())
        True
    """
    _check_int("n_samples", n_samples, 1)
    _check_int("offset", offset, 1)
    _check_int("vocab_size", vocab_size, 2)
    check_int("length", length, low=offset + 1, why=f" (greater than offset={offset})")
    _check_task_size(n_samples, length)
    g = _task_generator(generator)
    idx = torch.randint(0, vocab_size, (n_samples, length), generator=g)
    targets = torch.full_like(idx, IGNORE_INDEX)
    targets[:, offset:] = idx[:, :-offset]
    return idx, targets


def _answer_after_separator(
    n_samples: int, length: int, vocab_size: int, generator, order
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shared layout of reverse/sort: ``x (n tokens), SEP, answer[:-1]``; answer scored."""
    _check_int("n_samples", n_samples, 1)
    _check_int("vocab_size", vocab_size, 3)
    check_int("length", length, low=2, even=True, why=" (n tokens, SEP, n - 1 answers)")
    _check_task_size(n_samples, length)
    g = _task_generator(generator)
    n = length // 2
    sep = vocab_size - 1
    x = torch.randint(0, vocab_size - 1, (n_samples, n), generator=g)
    answer = order(x)
    sep_col = torch.full((n_samples, 1), sep, dtype=torch.long)
    idx = torch.cat([x, sep_col, answer[:, :-1]], dim=1)
    targets = torch.cat([torch.full_like(x, IGNORE_INDEX), answer], dim=1)
    return idx, targets


def reverse_task(
    n_samples: int,
    length: int,
    vocab_size: int = 16,
    generator: int | torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Write ``n = length // 2`` tokens, a separator, then the tokens in reverse order.

    ``idx = [x_1, ..., x_n, SEP, x_n, ..., x_2]`` and the scored targets are
    ``x_n, ..., x_1`` at positions ``n - 1 + i`` for ``i = 1..n`` (the position of ``SEP``
    predicts ``x_n``). Output step ``i`` must read input position ``n + 1 - i``: the
    distance back grows by two each step, so neither a fixed offset nor a fixed absolute
    position answers it; the model needs both where it is and where the separator is.

    Args:
        n_samples: number of sequences, >= 1.
        length: total length ``T = 2n``, an even integer >= 2.
        vocab_size: tokens ``0 .. vocab_size - 2`` are data, ``vocab_size - 1`` is ``SEP``; >= 3.
        generator: a ``torch.Generator`` or an integer seed (``None`` means seed 0).

    Returns:
        ``(idx, targets)``, LongTensors of shape ``(n_samples, length)``.
    """
    return _answer_after_separator(
        n_samples, length, vocab_size, generator, lambda x: torch.flip(x, dims=[1])
    )


def sort_task(
    n_samples: int,
    length: int,
    vocab_size: int = 16,
    generator: int | torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Write ``n = length // 2`` tokens, a separator, then the same tokens sorted ascending.

    Same layout as :func:`reverse_task` with ``sorted(x)`` in place of ``reversed(x)``.
    Sorting needs counting, not positions: the answer does not depend on the order of the
    input, which makes it a control task (position matters only to know how many tokens
    have already been written).

    Args:
        n_samples: number of sequences, >= 1.
        length: total length ``T = 2n``, an even integer >= 2.
        vocab_size: tokens ``0 .. vocab_size - 2`` are data, ``vocab_size - 1`` is ``SEP``; >= 3.
        generator: a ``torch.Generator`` or an integer seed (``None`` means seed 0).

    Returns:
        ``(idx, targets)``, LongTensors of shape ``(n_samples, length)``.
    """
    return _answer_after_separator(
        n_samples, length, vocab_size, generator, lambda x: torch.sort(x, dim=1).values
    )


def order_task(
    n_samples: int,
    length: int,
    vocab_size: int = 16,
    generator: int | torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Which of two marked tokens came first? Only the last position is scored.

    Tokens ``0 .. vocab_size - 4`` are filler; ``A = vocab_size - 3`` and
    ``B = vocab_size - 2`` each appear exactly once at random distinct positions in
    ``0 .. length - 2``; the last token is the query ``Q = vocab_size - 1``. The target at
    the last position is whichever of ``A`` or ``B`` came first (each with probability 1/2).
    The answer depends only on order, never on distance. A causal model can solve it even
    without a positional encoding: the later marker can see the earlier one, the earlier
    cannot see the later.

    Args:
        n_samples: number of sequences, >= 1.
        length: total length ``T``, >= 3 (two markers and the query).
        vocab_size: >= 4 (at least one filler token besides ``A``, ``B``, ``Q``).
        generator: a ``torch.Generator`` or an integer seed (``None`` means seed 0).

    Returns:
        ``(idx, targets)``, LongTensors of shape ``(n_samples, length)``; ``targets`` is
        ``IGNORE_INDEX`` everywhere except the last column.
    """
    _check_int("n_samples", n_samples, 1)
    _check_int("length", length, 3)
    _check_int("vocab_size", vocab_size, 4)
    _check_task_size(n_samples, length)
    g = _task_generator(generator)
    a, b, q = vocab_size - 3, vocab_size - 2, vocab_size - 1
    idx = torch.randint(0, vocab_size - 3, (n_samples, length), generator=g)
    # two distinct random positions in 0 .. length - 2 per row: the first two of a permutation
    pos = torch.argsort(torch.rand(n_samples, length - 1, generator=g), dim=1)[:, :2]
    rows = torch.arange(n_samples)
    idx[rows, pos[:, 0]] = a
    idx[rows, pos[:, 1]] = b
    idx[:, -1] = q
    targets = torch.full_like(idx, IGNORE_INDEX)
    targets[:, -1] = torch.where(pos[:, 0] < pos[:, 1], a, b)
    return idx, targets


SYNTHETIC_TASKS = {
    "copy_offset": copy_offset_task,
    "reverse": reverse_task,
    "sort": sort_task,
    "order": order_task,
}
"""The synthetic tasks by name.

Call one as ``SYNTHETIC_TASKS[name](n_samples, length, vocab_size, ...)``.
"""
