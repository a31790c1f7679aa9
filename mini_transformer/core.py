r"""The training recipe (chapter 6): presets, :class:`TrainConfig`, the schedule, one step and
the loss estimate: what a run *is*, apart from how it is run (:mod:`mini_transformer.train`).
The chapter-3 lab and the chapter-5 sweep use the same :func:`train_step`.

Example (10 warm-up steps, then a cosine to 10% of the peak)::

    >>> s = Schedule(lr=1.0, warmup_steps=10, steps=110, min_lr=0.1)
    >>> [round(s(k), 3) for k in (0, 9, 60, 110)]
    [0.1, 1.0, 0.55, 0.1]
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields

import torch

from . import checks
from .checks import (
    check_bool,
    check_choice,
    check_device,
    check_fields,
    check_float,
    check_instance,
    check_int,
    check_tensor,
)
from .data import CharTokenizer, get_batch
from .hardware import PRECISIONS
from .model import TransformerConfig, TransformerLM, evaluating

__all__ = [
    "PRESETS",
    "TrainConfig",
    "get_preset",
    "Schedule",
    "configure_optimizer",
    "train_step",
    "estimate_loss",
]

#: ``torch.compile`` modes (``"reduce-overhead"`` and ``"max-autotune"`` use CUDA graphs).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

#: Model hyper-parameters of each preset (``vocab_size``: the tokenizer's) and the
#: training settings that differ from :class:`TrainConfig`'s defaults. ``tiny``: seconds on
#: one core, for tests and chapter 6; ``gpu``: nanoGPT's shakespeare-char (~10.7M parameters).
PRESETS: dict[str, dict] = {
    "tiny": dict(
        model=dict(block_size=32, d_model=32, n_heads=2, n_layers=2, dropout=0.0),
        batch_size=8,
        steps=60,
        lr=1e-2,
        min_lr=1e-3,
        warmup_steps=5,
        eval_interval=20,
        eval_batches=2,
    ),
    # About 70 s on a quiet 2-core CPU: 1630 steps x 2048 tokens = 3.3M tokens, 0.7 epoch.
    # Two layers: at an equal compute budget (7.9 TFLOP) a shallower model seeing more text
    # reached a lower held-out loss (benchmarks/results/cpu_recipe_sweep.json: 2 layers x
    # 1360 steps 1.72, 3 x 910 1.77, 4 x 690 1.82); the rate, its floor, beta2, weight decay,
    # batch 8 or 12 and context 256 moved it by 0.01 or less, and 1630 steps reached 1.697 in
    # about nanoGPT's CPU recipe's time (benchmarks/results/cpu_preset_vs_nanogpt.json).
    "cpu": dict(
        model=dict(block_size=128, d_model=128, n_heads=4, n_layers=2, dropout=0.0),
        batch_size=16,
        steps=1630,
        lr=3e-3,
        min_lr=3e-4,
        warmup_steps=50,
        eval_interval=163,
        eval_batches=8,
    ),
    "gpu": dict(
        model=dict(block_size=256, d_model=384, n_heads=6, n_layers=6, dropout=0.2),
        batch_size=64,
        steps=5000,
        lr=1e-3,
        min_lr=1e-4,
        warmup_steps=100,
        eval_interval=250,
        eval_batches=100,
        beta2=0.99,
    ),
}


@functools.cache
def corpus_vocab_size() -> int:
    """The bundled corpus tokenizer's ``vocab_size`` (84), the one every preset's model has."""
    return CharTokenizer.from_corpus().vocab_size


@dataclass
class TrainConfig:
    """Everything a run needs besides the data (the default ``model``: the tiny preset's).
    ``batch_size`` is per process under DDP; the run evaluates, logs and saves every
    ``eval_interval`` steps; ``seed`` fixes the initialisation, the batches and dropout;
    ``peak_flops=None``: the GPU table, or a matmul measured on the CPU."""

    preset: str = "custom"
    model: TransformerConfig = field(default_factory=lambda: get_preset("tiny").model)
    batch_size: int = 32
    steps: int = 1000
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    eval_interval: int = 100
    eval_batches: int = 20
    seed: int = 0
    device: str = "auto"
    compile: bool = False
    compile_mode: str = "default"
    progress: bool = True
    peak_flops: float | None = None
    threads: int | None = None
    precision: str = "auto"

    def __post_init__(self) -> None:
        check_choice("precision", self.precision, PRECISIONS)  # resolved once, as the run starts
        check_device("device", self.device, run=True, here=False)  # may name a GPU not here
        check_instance("model", self.model, TransformerConfig, "a TransformerConfig")
        for name in ("batch_size", "steps", "eval_interval", "eval_batches"):
            check_int(name, getattr(self, name), low=1)
        check_int("warmup_steps", self.warmup_steps, low=0)
        check_int("seed", self.seed, low=0, high=2**64 - 1)  # what torch.manual_seed takes
        for name in ("lr", "min_lr", "weight_decay", "grad_clip"):
            check_float(name, getattr(self, name), low=0)
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr must be <= lr, got min_lr={self.min_lr}, lr={self.lr}")
        for name in ("beta1", "beta2"):
            check_float(name, getattr(self, name), low=0, high=1, high_open=True)
        if self.peak_flops is not None:
            check_float("peak_flops", self.peak_flops, low=0, low_open=True)
        check_choice("compile_mode", self.compile_mode, COMPILE_MODES)
        for name in ("compile", "progress"):
            check_bool(name, getattr(self, name))
        if self.threads is not None:
            check_int("threads", self.threads, low=1, high=1024, why=" or None")

    def schedule(self) -> Schedule:
        return Schedule(self.lr, self.warmup_steps, self.steps, self.min_lr)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """Inverse of ``to_dict``; an unknown key is a ``ValueError`` (never dropped)."""
        check_fields("train_config", d, cls)
        if isinstance(d.get("model"), dict):
            d = d | {"model": TransformerConfig.from_dict(d["model"])}
        return cls(**d)


def get_preset(name: str, **overrides) -> TrainConfig:
    """The :class:`TrainConfig` of preset ``name``; ``overrides`` may name training fields
    (``steps=10``) or model fields (``positional="alibi"``); ``None`` values are ignored."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    settings = {k: v for k, v in PRESETS[name].items() if k != "model"}
    model = {"vocab_size": corpus_vocab_size(), **PRESETS[name]["model"]}
    model_keys = {f.name for f in fields(TransformerConfig)}
    train_keys = {f.name for f in fields(TrainConfig)} - {"model", "preset"}
    for k, v in ((k, v) for k, v in overrides.items() if v is not None):
        if k not in model_keys and k not in train_keys:
            raise ValueError(f"unknown setting {k!r}")
        (model if k in model_keys else settings)[k] = v
    return TrainConfig(preset=name, model=TransformerConfig(**model), **settings)


@dataclass(frozen=True)
class Schedule:
    r"""Learning rate of update ``step`` (0-based): linear warm-up, then cosine or constant.

    .. math::

        \eta(s) = \begin{cases} \eta_\max \frac{s + 1}{w} & s < w \\
        \eta_\min + \tfrac12 (\eta_\max - \eta_\min)(1 + \cos \pi p),\;
        p = \min\!\left(1, \frac{s - w}{S - w}\right) & s \ge w \end{cases}

    with ``w = warmup_steps`` and ``S = steps``; ``steps=None`` keeps :math:`\eta_\max`
    after the warm-up.
    """

    lr: float
    warmup_steps: int = 0
    steps: int | None = None
    min_lr: float = 0.0

    def __post_init__(self) -> None:
        check_float("lr", self.lr, low=0)
        check_int("warmup_steps", self.warmup_steps, low=0)
        if self.steps is not None:
            check_int("steps", self.steps, low=1, why=" or None")
        check_float("min_lr", self.min_lr, low=0, high=self.lr)

    def __call__(self, step: int) -> float:
        if checks.checking():  # not in the training loop (checks.trusted)
            check_int("step", step, low=0)
        w = self.warmup_steps
        if step < w:
            return self.lr * (step + 1) / w
        if self.steps is None:
            return self.lr
        progress = min(1.0, (step - w) / max(1, self.steps - w))
        cosine = 0.5 * (1.0 + math.cos(math.pi * progress))  # 1 -> 0
        return self.min_lr + cosine * (self.lr - self.min_lr)


def configure_optimizer(model: TransformerLM, cfg: TrainConfig, fused: bool = False):
    """AdamW that decays the weight matrices of Linear layers; not biases, LayerNorm gains or
    embeddings (the tied head is the token embedding). nanoGPT's ``p.dim() >= 2`` rule would
    decay the embeddings too."""
    tables = (m for m in model.modules() if isinstance(m, torch.nn.Embedding) or m is model.pos_emb)
    embeddings = {id(p) for m in tables for p in m.parameters()}
    matrices = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    decayed = matrices - embeddings
    decay = [p for p in model.parameters() if id(p) in decayed]
    other = [p for p in model.parameters() if id(p) not in decayed]  # in parameter order (v3)
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": other, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=fused or None)


@torch.no_grad()
def estimate_loss(
    model: TransformerLM, ids: torch.Tensor, *, n_batches: int | None, batch_size: int, seed
) -> float:
    """Mean next-token loss (nats) of ``model`` on the token ids ``ids`` (``exp``: perplexity).

    With a ``seed``: ``n_batches`` batches of ``batch_size`` random windows of the model's
    ``block_size``, drawn from ``torch.Generator().manual_seed(seed)`` (the same windows at
    every call, so two evaluations differ only by the weights). With ``seed=None``: the
    consecutive windows ``ids[i*T : (i+1)*T + 1]`` in order, all of them (the whole text)
    or the first ``n_batches * batch_size``.
    """
    if checks.checking():  # not in the training loop (checks.trusted): it made the arguments
        check_tensor("ids", ids, integer=True, ndim=1)
        check_int("batch_size", batch_size, low=1)
        if n_batches is not None or seed is not None:
            check_int("n_batches", n_batches, low=1, why=" (None: every window, with seed=None)")
        if seed is not None:
            check_int("seed", seed, low=0, why=" or None")
    T, device = model.config.block_size, next(model.parameters()).device
    if seed is not None:
        g = torch.Generator().manual_seed(seed)
        batches = [get_batch(ids, batch_size, T, g, device) for _ in range(n_batches)]
    else:
        n_windows = (len(ids) - 1) // T
        if n_windows < 1:
            raise ValueError(f"ids has {len(ids)} tokens, fewer than block_size + 1 = {T + 1}")
        n_windows = min(n_windows, (n_batches or n_windows) * batch_size)
        windows = ids.unfold(0, T + 1, T)[:n_windows].to(device)  # (n_windows, T + 1)
        batches = [(w[:, :-1], w[:, 1:]) for w in windows.split(batch_size)]
    with evaluating(model):
        losses = torch.stack([model(x, y)[1] for x, y in batches]).tolist()  # one host sync
    if seed is not None:
        return sum(losses) / len(losses)
    return sum(v * len(x) for v, (x, _) in zip(losses, batches, strict=True)) / n_windows


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
    """One update on the batch ``(x, y)`` of any model with ``forward(idx, targets) ->
    (logits, loss)`` (or a function ``model(x, y) -> (output, loss)`` when ``grad_clip=0``):
    ``(loss, grad_norm)``, detached and unread (an ``.item()`` would make the host wait for
    the GPU). ``grad_clip=0``: no clipping, ``grad_norm`` is ``None``."""
    if checks.checking():  # not in the training loop (checks.trusted); the model checks x, y
        check_float("lr", lr, low=0)  # a NaN would silently poison every weight
        check_float("grad_clip", grad_clip, low=0)
    for group in optimizer.param_groups:
        group["lr"] = float(lr)
    optimizer.zero_grad(set_to_none=True)
    with autocast() if autocast is not None else contextlib.nullcontext():
        _, loss = model(x, y)
    loss.backward()
    grad_norm = None
    if grad_clip > 0:
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss.detach(), grad_norm
