"""Attention masks: which keys a query may see (chapter 4).

A mask is a **boolean** tensor, ``True`` = *may attend*, as in PyTorch's
``F.scaled_dot_product_attention``; it broadcasts against the scores ``(..., T_q, T_k)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .checks import check_device, check_int, check_lengths, check_size, check_tensor

__all__ = ["causal_mask", "padding_mask", "combine_masks"]


def _known_all(t: torch.Tensor) -> bool:
    """``t.all()`` when it is free to know: on a GPU reading it would stall the host, so
    there the answer is "unknown" (``False``) and the caller takes the general path."""
    if t.device.type != "cpu" or torch.compiler.is_compiling():
        return False
    return bool(t.all())


def rows_with_keys(mask: torch.Tensor | None) -> torch.Tensor | None:
    """The fully-masked-row rule, for every attention path: a query whose keys are all masked
    attends to nothing, so its output row and its weights are 0, not the NaN of a softmax
    over no keys. Returns ``mask.any(-1)`` ``(..., T_q, 1)`` to multiply the *output* by (and
    the returned weights): the weights that multiply ``v`` stay the softmax's own tensor, so
    backward saves one ``(..., T_q, T_k)`` tensor, not two. ``None``: no row is empty (known
    for free on the CPU only)."""
    if mask is None:
        return None
    has_key = mask.any(dim=-1, keepdim=True)  # (..., T_q, 1)
    return None if _known_all(has_key) else has_key


def causal_mask(
    T: int, T_k: int | None = None, device: torch.device | str | None = None
) -> torch.Tensor:
    """The look-ahead mask ``(T, T_k)``: query ``i`` may attend to key ``j`` iff ``j <= i`` (the
    diagonal starts at the top left, as PyTorch's ``is_causal=True``).

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
    """Key-padding mask ``(B, 1, 1, T)``, ``mask[b, 0, 0, j] = j < lengths[b]``.

    Sequence ``b`` has ``lengths[b]`` (in ``[0, T]``) real tokens, then padding no query may
    attend to; the mask broadcasts to ``(B, n_heads, T_q, T)``.

    Example:
        >>> padding_mask([2, 3], 3)[:, 0, 0].int()
        tensor([[1, 1, 0],
                [1, 1, 1]], dtype=torch.int32)
    """
    T = check_int("T", T, low=1)
    check_device("device", device)
    if isinstance(lengths, torch.Tensor):  # read once on the host, then checked as a list
        device, lengths = lengths.device if device is None else device, lengths.tolist()
    lengths = torch.tensor(check_lengths(lengths, T), dtype=torch.long, device=device)  # (B,)
    return (torch.arange(T, device=device) < lengths[:, None])[:, None, None, :]  # (B, 1, 1, T)


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of boolean masks, broadcast; ``None`` entries are skipped (all ``None``:
    ``None``). With ``causal_mask(T)`` and ``padding_mask(lengths, T)``: ``(B, 1, T, T)``."""
    out = None
    for i, m in enumerate(masks):
        if m is None:
            continue
        check_tensor(f"mask {i}", m, boolean=True)
        try:
            out = m if out is None else out & m
        except RuntimeError as err:
            shapes = f"{tuple(out.shape)} and {tuple(m.shape)}"
            raise ValueError(f"masks of shapes {shapes} do not broadcast") from err
    return out
