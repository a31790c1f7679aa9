"""The synthetic order-sensitive task of chapter 3's length-extrapolation lab.

The target at position ``t`` depends only on ``idx[:, : t + 1]`` (``IGNORE_INDEX`` where
nothing is scored), so a causal model is never asked for a token it has not been shown, and
the rule is the same at every length: a model trained with ``length <= L`` can be tested at 2L.
"""

from __future__ import annotations

import torch

from .checks import check_int, check_size

__all__ = ["IGNORE_INDEX", "SYNTHETIC_TASKS", "copy_offset_task"]

IGNORE_INDEX = -100
"""Target value that the loss and the accuracy skip (PyTorch's default ``ignore_index``)."""


def copy_offset_task(
    n_samples: int, length: int, vocab_size: int = 16, offset: int = 2,
    generator: int | torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    r"""Copy the token ``offset`` steps back: ``targets[:, t] = idx[:, t - offset]``.

    The tokens are i.i.d. uniform on ``{0, ..., vocab_size - 1}`` (chance accuracy
    ``1 / vocab_size``), so the answer cannot be guessed from content: the model must find
    the position exactly ``offset`` before the current one. That rule is *relative*, the same
    at every ``t``: an encoding whose scores depend on ``i - j`` (RoPE, ALiBi) can apply it at
    positions never seen in training; an absolute one must have learned it per position.
    The first ``offset`` positions have no answer and are ignored; ``generator``: a
    ``torch.Generator`` or a seed (``None``: 0). Returns ``(idx, targets)`` ``(n_samples, length)``.

    >>> idx, targets = copy_offset_task(1, 6, vocab_size=10, offset=2, generator=0)
    >>> bool((targets[0, 2:] == idx[0, :-2]).all())
    True
    """
    check_int("n_samples", n_samples, low=1)
    check_int("offset", offset, low=1)
    check_int("vocab_size", vocab_size, low=2)
    check_int("length", length, low=offset + 1, why=f" (greater than offset={offset})")
    check_size("the task (2, n_samples, length)", (2, n_samples, length), torch.long)
    if not isinstance(generator, torch.Generator):
        why = " seed or a torch.Generator"
        seed = 0 if generator is None else check_int("generator", generator, low=0, why=why)
        generator = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, vocab_size, (n_samples, length), generator=generator)
    targets = torch.full_like(idx, IGNORE_INDEX)
    targets[:, offset:] = idx[:, :-offset]  # y_t = x_{t - offset}
    return idx, targets


SYNTHETIC_TASKS = {"copy_offset": copy_offset_task}
"""The tasks by name, as the lab's ``task`` field and its sweep tool's ``--task`` name them."""
