r"""The training core shared by the command line, the chapter-3 lab and the chapter-5 sweep.

Three ideas, each written once:

- :class:`Schedule`: the learning rate of every step (linear warm-up, then a cosine decay
  to a floor, or constant).
- :func:`train_step`: one optimizer step of any model that follows the
  ``forward(idx, targets) -> (logits, loss)`` contract: forward, backward, optional
  gradient clipping, update. It returns tensors and never reads them, so on a GPU the host
  is not made to wait (no ``.item()``); callers read losses when they log.
- :func:`stop_at_step_boundary`: Ctrl-C sets a flag that the loop reads between steps, so
  an interrupt never leaves a half-updated model (or an advanced dropout RNG) behind.

Example (a schedule with 10 warm-up steps, then a cosine to 10% of the peak)::

    >>> s = Schedule(lr=1.0, warmup_steps=10, steps=110, min_lr=0.1)
    >>> [round(s(k), 3) for k in (0, 9, 60, 110)]
    [0.1, 1.0, 0.55, 0.1]
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from .checks import check_choice, check_float, check_int

__all__ = ["Schedule", "train_step", "TrainingDivergedError", "StopFlag", "stop_at_step_boundary"]

#: The float order each committed result set was computed in (see :class:`Schedule`).
ARITHMETIC = ("train", "stability")


@dataclass(frozen=True)
class Schedule:
    r"""Learning rate of update ``step`` (0-based): linear warm-up, then cosine or constant.

    .. math::

        \eta(s) = \begin{cases} \eta_\max \frac{s + 1}{w} & s < w \\
        \eta_\min + \tfrac12 (\eta_\max - \eta_\min)(1 + \cos \pi p),\;
        p = \min\!\left(1, \frac{s - w}{S - w}\right) & s \ge w \end{cases}

    with ``w = warmup_steps`` and ``S = steps``; ``steps=None`` keeps :math:`\eta_\max`
    after the warm-up (chapter 5's sweep).

    Attributes:
        lr: the peak :math:`\eta_\max`, reached at the end of the warm-up.
        warmup_steps: ``w >= 0`` (0: no warm-up).
        steps: ``S``, the step the cosine reaches the floor; ``None``: no decay.
        min_lr: the floor :math:`\eta_\min` (``0 <= min_lr <= lr``).
        min_ratio: the floor as a fraction of the peak instead (the lab's ``0.1``); when
            given, ``min_lr`` is ignored and the decay is computed as
            ``lr * (r + (1 - r) c)``, the lab's order of operations.
        arithmetic: ``"train"`` or ``"stability"``. The users of this one schedule wrote it
            in different float orders, and the committed results of each are reproduced
            bit for bit only in its own: the chapter-5 sweep warms up as
            ``lr * min(1, (s + 1) / w)`` (``"stability"``), the rest as
            ``lr * (s + 1) / w``. The values agree to the last few bits.
    """

    lr: float
    warmup_steps: int = 0
    steps: int | None = None
    min_lr: float = 0.0
    min_ratio: float | None = None
    arithmetic: str = "train"

    def __post_init__(self) -> None:
        check_float("lr", self.lr, low=0)
        check_int("warmup_steps", self.warmup_steps, low=0)
        if self.steps is not None:
            check_int("steps", self.steps, low=1, why=" or None")
        check_float("min_lr", self.min_lr, low=0, high=self.lr)
        if self.min_ratio is not None:
            check_float("min_ratio", self.min_ratio, low=0, high=1)
        check_choice("arithmetic", self.arithmetic, ARITHMETIC)

    def __call__(self, step: int) -> float:
        check_int("step", step, low=0)
        w = self.warmup_steps
        if step < w:
            if self.arithmetic == "stability":
                return self.lr * min(1.0, (step + 1) / w)
            return self.lr * (step + 1) / w
        if self.steps is None:
            return self.lr
        progress = min(1.0, (step - w) / max(1, self.steps - w))
        cosine = 0.5 * (1.0 + math.cos(math.pi * progress))  # 1 -> 0
        if self.min_ratio is not None:
            return self.lr * (self.min_ratio + (1.0 - self.min_ratio) * cosine)
        return self.min_lr + cosine * (self.lr - self.min_lr)


class TrainingDivergedError(RuntimeError):
    """The loss, the gradient norm or the weights became NaN or infinite; the run stopped."""


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    lr: float,
    *,
    grad_clip: float = 0.0,
    autocast: Callable[[], object] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One update of ``model`` on the batch ``(x, y)``: ``(loss, grad_norm)``, both unread.

    ``model(x, y)`` must return ``(logits, loss)``. The steps: set ``lr`` on every
    parameter group, clear the gradients, forward (inside ``autocast()`` if given),
    backward, clip the global gradient norm to ``grad_clip`` (0: no clipping, and
    ``grad_norm`` is ``None``), update. ``lr`` and ``grad_clip`` must be finite numbers
    >= 0 (a NaN would silently poison every weight). The returned tensors stay on the model's device
    (detached); reading them (``float(loss)``) is the caller's choice of when to wait.
    """
    lr = check_float("lr", lr, low=0)  # a cheap check on Python floats, once per step
    grad_clip = check_float("grad_clip", grad_clip, low=0)
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    with autocast() if autocast is not None else contextlib.nullcontext():
        _, loss = model(x, y)
    loss.backward()
    grad_norm = None
    if grad_clip > 0:
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss.detach(), grad_norm


class StopFlag:
    """Set by Ctrl-C (SIGINT); the training loop reads ``requested`` between steps."""

    def __init__(self) -> None:
        self.requested = False


@contextlib.contextmanager
def stop_at_step_boundary() -> Iterator[StopFlag]:
    """Within this block the first Ctrl-C only sets ``flag.requested``; a second one stops now.

    A ``KeyboardInterrupt`` raised wherever Python happens to be (between
    ``optimizer.step()`` updating some parameters and the step counter, or after dropout
    advanced the RNG) would leave a checkpoint that resumes differently; a flag read at a
    step boundary cannot. Outside the main thread (where signals cannot be caught) the
    flag is never set and Ctrl-C behaves as usual.
    """
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum, frame):
        if flag.requested:  # asked twice: the user wants out now
            raise KeyboardInterrupt
        flag.requested = True

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)
