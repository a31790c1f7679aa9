"""Attention masks: which keys a query may see (chapter 4).

A mask is a **boolean** tensor, ``True`` = *may attend*, as in PyTorch's
``F.scaled_dot_product_attention``; it broadcasts against the scores ``(..., T_q, T_k)``.

- :func:`causal_mask`: a decoder's look-ahead mask, lower triangular ``(T, T_k)``.
- :func:`padding_mask`: hides the padding keys of a batch of sequences, ``(B, 1, 1, T)``.
- :func:`combine_masks`: the logical AND of several masks.

:mod:`mini_transformer.attention` applies them (and re-exports these names).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .checks import check_device, check_int, check_mask, check_size

__all__ = ["causal_mask", "padding_mask", "combine_masks"]


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
        check_mask(f"mask {i}", m)
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
