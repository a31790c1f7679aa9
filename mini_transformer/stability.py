"""Post-LN vs Pre-LN (chapter 5): gradients at initialisation and training stability.

Both experiments use :func:`xiong_lm`, the package's
:class:`~mini_transformer.model.TransformerLM` small and initialised as in Xiong et al.'s (2020)
analysis, on a copy task: ``K`` random symbols, a separator, the same ``K`` symbols again. Only
the copy is predictable, and the loss is its mean cross-entropy in nats: :math:`\\ln V` for a
uniform guess, 0 for a perfect copier. One CPU thread and fixed seeds make a notebook re-run
give the numbers of the committed sweep, ``tools/stability_sweep.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from .checks import check_choice, check_float, check_int
from .core import Schedule, train_step
from .layers import ACTIVATIONS
from .model import TransformerConfig, TransformerLM
from .tasks import IGNORE_INDEX

LEARNED_BELOW = 0.5
"""A run "learned the copy" if its held-out copy loss ends below this many nats.

The uniform guess is :math:`\\ln 16 \\approx 2.77` nats; 0.5 nats means a geometric-mean
probability of :math:`e^{-0.5} \\approx 0.6` on the right symbol, against 1/16 by chance."""

__all__ = ["LEARNED_BELOW", "StabilityConfig", "copy_task_batch", "grad_norms_at_init"]
__all__ += ["train_run", "xiong_lm"]


@dataclass(frozen=True)
class StabilityConfig:
    """Model and task sizes shared by both experiments (defaults: the committed sweep)."""

    vocab_size: int = 16  # V symbols; the separator is an extra token V
    copy_len: int = 12  # K: the sequence is K symbols, SEP, the same K symbols
    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 256
    n_layers: int = 6
    activation: str = "relu"  # as in the original Transformer and Xiong et al.
    batch_size: int = 32

    def __post_init__(self) -> None:  # the sizes of the blocks are checked by the blocks
        for name, low in (("vocab_size", 2), ("copy_len", 1), ("n_layers", 1), ("batch_size", 1)):
            check_int(name, getattr(self, name), low=low)
        check_choice("activation", self.activation, ACTIVATIONS)

    @property
    def block_size(self) -> int:
        return 2 * self.copy_len  # inputs are the first 2K tokens of the 2K + 1


def xiong_lm(cfg: StabilityConfig, norm_position: str) -> TransformerLM:
    """The package's :class:`~mini_transformer.model.TransformerLM` as Xiong et al. analyse it.

    Learned positions, ReLU feed-forward blocks, no dropout, an untied head; every ``nn.Linear``
    weight Xavier-normal and every bias zero, token embeddings :math:`\\mathcal{N}(0, 1)` (a
    token vector has squared norm about ``d_model``, as with the original Transformer's
    ``sqrt(d_model)`` embedding scale), position embeddings :math:`\\mathcal{N}(0, 0.5^2)`,
    LayerNorm ``gamma = 1``, ``beta = 0``. The initialisation draws from the global generator:
    seed it first. The vocabulary is the ``V`` symbols and the separator, ``V + 1`` tokens.
    """
    sizes = {k: getattr(cfg, k) for k in ("d_model", "n_heads", "n_layers", "d_ff")}
    kw = {"positional": "learned", "norm_position": norm_position, "tie_weights": False}
    model = TransformerLM(TransformerConfig(cfg.vocab_size + 1, cfg.block_size, **sizes, **kw))
    for block in model.blocks:  # checked by StabilityConfig; a plain attribute of FeedForward
        block.ffn.activation = cfg.activation
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_normal_(m.weight)
            if m.bias is not None:  # the head has none
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 1.0)
    model.pos_emb.init_std = 0.5  # positions: the tokens' scale, halved
    model.pos_emb.reset_parameters()
    return model


def copy_task_batch(cfg: StabilityConfig, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Inputs and targets, both ``(B, 2K)``: of ``s_1..s_K, SEP, s_1..s_K`` the model reads the
    first ``2K`` tokens and must predict the last ``K``; the first ``K`` targets are
    ``IGNORE_INDEX``, so the model's loss is the mean cross-entropy of the copy alone."""
    K, V, B = cfg.copy_len, cfg.vocab_size, cfg.batch_size
    s = torch.randint(0, V, (B, K), generator=generator)
    sep = torch.full((B, 1), V, dtype=torch.long)
    seq = torch.cat([s, sep, s], dim=1)  # (B, 2K + 1)
    targets = seq[:, 1:].clone()  # next tokens (B, 2K)
    targets[:, :K] = IGNORE_INDEX  # s_2..s_K and SEP cannot be predicted
    return seq[:, :-1], targets


def grad_norms_at_init(
    norm_position: str,
    n_layers: int,
    seeds: tuple[int, ...] = (0, 1, 2, 3),
    cfg: StabilityConfig | None = None,
    setup=None,
) -> list[float]:
    """Mean over seeds of :math:`\\|\\partial L / \\partial W^{2,\\ell}\\|_F` for each layer.

    ``W^{2,l}`` is layer ``l``'s ``ffn.linear2.weight``; the loss is a fresh model's on one
    batch, seed ``s`` fixing both. ``setup(model)``, if given, runs on each fresh model first
    (chapter 5 hooks the stream's gradient with it). Returns ``n_layers`` floats, input
    side first.
    """
    if setup is not None and not callable(setup):
        raise TypeError(
            f"setup must be a function of the model or None, got {type(setup).__name__}"
        )
    cfg = replace(cfg or StabilityConfig(), n_layers=n_layers)
    total = torch.zeros(n_layers, dtype=torch.float64)
    for seed in seeds:
        torch.manual_seed(seed)
        model = xiong_lm(cfg, norm_position)
        if setup is not None:
            setup(model)
        idx, targets = copy_task_batch(cfg, torch.Generator().manual_seed(10_000 + seed))
        model(idx, targets)[1].backward()
        norms = [b.ffn.linear2.weight.grad.norm().item() for b in model.blocks]
        total += torch.tensor(norms, dtype=torch.float64)
    return (total / len(seeds)).tolist()


def train_run(
    norm_position: str,
    lr: float,
    warmup_steps: int,
    steps: int = 300,
    seed: int = 0,
    cfg: StabilityConfig | None = None,
    log_every: int = 10,
    eval_batches: int = 4,
) -> dict:
    """Train one :func:`xiong_lm` with Adam (betas 0.9, 0.98, as Vaswani et al.) on the copy task.

    No gradient clipping: it would hide the instability we want to see. ``seed`` fixes the
    model and the data stream, so runs differ only in placement and schedule. Training stops
    at the first non-finite loss; ``final_loss`` is the held-out copy loss.
    """
    check_float("lr", lr, low=0)
    for name, value, low in (("steps", steps, 1), ("seed", seed, 0), ("log_every", log_every, 1)):
        check_int(name, value, low=low)
    check_int("eval_batches", eval_batches, low=1)
    cfg = cfg or StabilityConfig()
    torch.manual_seed(seed)
    model = xiong_lm(cfg, norm_position)  # its config checks norm_position
    schedule = Schedule(lr, warmup_steps)  # lr (s + 1) / w for s < w, then lr
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
    data = torch.Generator().manual_seed(1_000 + seed)
    losses: list[float] = []
    diverged = False
    for step in range(steps):
        idx, targets = copy_task_batch(cfg, data)
        loss, _ = train_step(model, opt, idx, targets, schedule(step))
        if not torch.isfinite(loss):  # the update it made is never used
            diverged = True
            break
        if step % log_every == 0 or step == steps - 1:
            losses.append(round(loss.item(), 5))
    final = float("nan")
    if not diverged:
        held_out = torch.Generator().manual_seed(999_999)
        with torch.no_grad():
            held = [model(*copy_task_batch(cfg, held_out))[1].item() for _ in range(eval_batches)]
        final = sum(held) / eval_batches
        diverged = not math.isfinite(final)
    run = {"norm_position": norm_position, "lr": lr, "warmup_steps": warmup_steps, "seed": seed}
    run |= {"losses": losses, "final_loss": round(final, 5) if math.isfinite(final) else None}
    return run | {"diverged": diverged, "steps_run": step + 1}
