"""Length-extrapolation lab: train short, test long, once per positional scheme.

Chapter 3 asks what each way of telling a Transformer *where* a token is buys when the
model meets sequences longer than any it was trained on. This module answers with one
small experiment: the same small decoder (:class:`~mini_transformer.model.TransformerLM`)
is trained with each positional scheme (``none``, ``learned``, ``sinusoidal``, ``memn2n``,
``rope``, ``alibi``) on a synthetic order-sensitive task (by default
:func:`~mini_transformer.tasks.copy_offset_task`: "repeat the token ``offset`` steps back")
at lengths ``L/2 .. L``, then evaluated on fresh sequences of length ``L``, ``1.5 L`` and
``2 L``.

Design choices worth knowing when reading the results:

* Every scheme gets ``block_size = 2 L``. For ``learned`` that means an embedding table
  with ``2 L`` rows of which only the first ``L`` ever receive a gradient: rows ``L .. 2L-1``
  stay at their random initialisation (the optimizer uses no weight decay, so they stay
  *exactly* there, which the lab records). The alternative, ``max_len = L``, would make
  ``learned`` simply fail with an error past ``L``.
* Training lengths vary per batch (uniform on ``L/2 .. L``) so that ``memn2n``, whose
  encoding depends on the sequence length ``J``, sees more than one ``J``.
* Accuracy is the fraction of scored targets (``targets != -100``) whose arg-max
  prediction is right. ``accuracy`` counts every scored position of the evaluation
  sequences; ``accuracy_beyond`` only positions ``t >= L``, which no model saw in training.
* The default budget (10000 steps, learning rate ``3e-3`` for every scheme) is set by the
  slow learners (``alibi``, ``memn2n``, ``none``): with 1000 steps they had not finished
  learning, so a drop past ``L`` measured under-training as much as extrapolation. The
  results keep every run's loss curve so that one can see where each run stood at the end.

The sweep over schemes and seeds that produced the chapter's results, its command line and
the merging of parts run side by side are repository tools, not part of this package:
``tools/extrapolation_lab.py`` (18 runs of 10000 steps: the committed sweep took 37
CPU-minutes, its ``cpu_time_s``), e.g.::

    python tools/extrapolation_lab.py --out mini_transformer/results/extrapolation.json

and a quick one with ``--steps 100 --seeds 0``. The JSON records the command, budget, where
it ran, torch version, per-scheme per-length accuracies (mean and per seed), learning rates,
final losses and loss curves, and the cosine-similarity matrix of a trained learned position
embedding.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

from .checks import check_choice, check_float, check_int, check_tensor
from .core import Schedule, train_step
from .data import IGNORE_INDEX, SYNTHETIC_TASKS
from .model import POSITIONAL_SCHEMES, SCHEMES, TransformerConfig, TransformerLM

__all__ = [
    "LabConfig",
    "make_model",
    "train_model",
    "accuracy",
    "accuracy_by_length",
    "learned_position_weight",
    "cosine_similarity_matrix",
]


@dataclass
class LabConfig:
    """Everything that defines one lab run (model, task, training budget, evaluation).

    Attributes:
        task: a key of :data:`~mini_transformer.tasks.SYNTHETIC_TASKS`.
        vocab_size: number of tokens of the task (chance accuracy is about ``1 / vocab_size``).
        offset: the copy distance for ``copy_offset`` (ignored by other tasks).
        train_length: ``L``, the longest training sequence.
        min_train_length: the shortest training sequence (default ``L // 2``).
        eval_lengths: lengths to evaluate at (default ``L, 1.5 L, 2 L``).
        d_model: width of the model (``TransformerLM``'s ``d_model``).
        n_heads: attention heads per layer.
        n_layers: number of Transformer blocks.
        d_ff: hidden size of the feed-forward blocks.
        steps: optimizer steps (AdamW, no weight decay, linear warm-up then cosine decay to
            ``lr / 10``, gradient clipping at 1).
        batch_size: sequences per step.
        lr: peak learning rate.
        warmup_steps: steps of linear warm-up.
        eval_samples: fresh sequences per evaluation length.
        scheme_lr: per-scheme peak learning rates that replace ``lr`` for the schemes named
            (e.g. ``{"alibi": 1e-2}``); every other scheme uses ``lr``.
        curve_every: the loss curve stored in the results is the mean training loss over
            consecutive windows of this many steps.
        extra: free-form notes, copied into the JSON result.
    """

    task: str = "copy_offset"
    vocab_size: int = 16
    offset: int = 3
    train_length: int = 32
    min_train_length: int | None = None
    eval_lengths: list[int] | None = None
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 128
    steps: int = 10000
    batch_size: int = 32
    lr: float = 3e-3
    warmup_steps: int = 100
    eval_samples: int = 256
    scheme_lr: dict[str, float] = field(default_factory=dict)
    curve_every: int = 100
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_choice("task", self.task, sorted(SYNTHETIC_TASKS))
        sizes = ("train_length", "steps", "batch_size", "eval_samples", "d_model", "n_heads")
        for name in (*sizes, "n_layers", "d_ff", "offset", "curve_every", "warmup_steps"):
            check_int(name, getattr(self, name), low=0 if name == "warmup_steps" else 1)
        L = self.train_length
        if self.min_train_length is None:
            self.min_train_length = max(L // 2, 1)
        check_int("min_train_length", self.min_train_length, low=1, high=L)
        if self.eval_lengths is None:
            self.eval_lengths = [L, (3 * L) // 2, 2 * L]
        if not self.eval_lengths:
            raise ValueError("eval_lengths must hold at least one length, got none")
        for T in self.eval_lengths:
            check_int("eval_lengths", T, low=1)
        check_int("vocab_size", self.vocab_size, low=2)
        check_float("lr", self.lr, low=0, low_open=True)
        if self.task == "copy_offset" and self.offset >= self.min_train_length:
            raise ValueError(
                f"offset must be < min_train_length={self.min_train_length} (the shortest "
                f"training sequence must hold a target), got offset={self.offset}"
            )
        shortest = {"copy_offset": self.offset + 1, "reverse": 2, "sort": 2, "order": 3}
        need = shortest.get(self.task, 1)  # every length the sweep will build must be valid
        lengths = [("min_train_length", self.min_train_length)]
        lengths += [("eval_lengths", T) for T in self.eval_lengths]
        for name, T in lengths:
            if T < need:
                hint = " (train_length // 2 unless given)" if name == "min_train_length" else ""
                raise ValueError(f"{name} must be >= {need} for task {self.task!r}{hint}, got {T}")
        for scheme, lr in self.scheme_lr.items():
            check_choice("scheme_lr keys", scheme, POSITIONAL_SCHEMES)
            check_float(f"scheme_lr[{scheme!r}]", lr, low=0, low_open=True)

    def lr_for(self, scheme: str) -> float:
        """The peak learning rate for ``scheme``: ``scheme_lr[scheme]`` if given, else ``lr``."""
        return self.scheme_lr.get(scheme, self.lr)

    def for_scheme(self, scheme: str) -> LabConfig:
        """A copy of this configuration whose ``lr`` is the one used for ``scheme``."""
        return replace(self, lr=self.lr_for(scheme), scheme_lr={})

    @property
    def block_size(self) -> int:
        """The model's ``block_size``: the longest evaluation length (``2 L`` by default)."""
        return max(max(self.eval_lengths), self.train_length)

    def task_kwargs(self) -> dict:
        kwargs: dict = {"vocab_size": self.vocab_size}
        if self.task == "copy_offset":
            kwargs["offset"] = self.offset
        return kwargs

    def batch(self, n: int, length: int, generator: torch.Generator):
        """``n`` sequences of the task at ``length``, drawn from ``generator``."""
        fn = SYNTHETIC_TASKS[self.task]
        return fn(n, self._valid_length(length), generator=generator, **self.task_kwargs())

    def _valid_length(self, length: int) -> int:
        # reverse/sort need an even length; round down rather than fail mid-sweep
        if self.task in ("reverse", "sort") and length % 2:
            return length - 1
        return length


def make_model(scheme: str, cfg: LabConfig, seed: int = 0) -> TransformerLM:
    """The lab's model for ``scheme``: the same size and initial RNG state for every scheme."""
    if scheme not in POSITIONAL_SCHEMES:
        raise ValueError(f"scheme must be one of {POSITIONAL_SCHEMES}, got {scheme!r}")
    torch.manual_seed(seed)
    config = TransformerConfig(
        vocab_size=cfg.vocab_size,
        block_size=cfg.block_size,
        d_model=cfg.d_model,
        n_heads=cfg.n_heads,
        n_layers=cfg.n_layers,
        d_ff=cfg.d_ff,
        dropout=0.0,
        positional=scheme,
    )
    return TransformerLM(config)


def train_model(model: TransformerLM, cfg: LabConfig, seed: int = 0) -> list[float]:
    """Train ``model`` on the task for ``cfg.steps`` steps; return the loss of every step.

    The shared :func:`~mini_transformer.core.train_step` (AdamW without weight decay,
    gradient clipping at 1) with a warm-up then a cosine to ``lr / 10``
    (:class:`~mini_transformer.core.Schedule`); the loss is the model's own, which skips
    the ``IGNORE_INDEX`` targets. The data stream depends only on ``seed`` (one
    ``torch.Generator`` for lengths and tokens), so two schemes trained with the same
    seed see exactly the same batches. The peak learning rate is
    ``cfg.lr_for(model.config.positional)``.
    """
    cfg = cfg.for_scheme(model.config.positional)
    g = torch.Generator().manual_seed(1000 + seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    schedule = Schedule(lr=cfg.lr, warmup_steps=cfg.warmup_steps, steps=cfg.steps, min_ratio=0.1)
    model.train()
    losses = []
    lo, hi = cfg.min_train_length, cfg.train_length
    for step in range(cfg.steps):
        length = int(torch.randint(lo, hi + 1, (1,), generator=g))
        idx, targets = cfg.batch(cfg.batch_size, length, g)
        loss, _ = train_step(model, opt, idx, targets, schedule(step), grad_clip=1.0)
        losses.append(loss)
    model.eval()
    return torch.stack(losses).tolist() if losses else []


def accuracy(logits: torch.Tensor, targets: torch.Tensor, from_position: int = 0) -> float:
    """Fraction of scored targets (``!= -100``) at positions ``>= from_position`` predicted right.

    ``logits`` is ``(B, T, V)`` and ``targets`` ``(B, T)``. Returns NaN when no target is
    scored in that range.
    """
    check_tensor("logits", logits, floating=True)
    check_tensor("targets", targets, integer=True)
    check_int("from_position", from_position, low=0)
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be (B, T, V) and targets (B, T) with the same B and T, got "
            f"{tuple(logits.shape)} and {tuple(targets.shape)}"
        )
    pred = logits.argmax(dim=-1)
    scored = targets != IGNORE_INDEX
    scored[:, :from_position] = False
    n = int(scored.sum())
    if n == 0:
        return float("nan")
    return float(((pred == targets) & scored).sum()) / n


@torch.no_grad()
def accuracy_by_length(
    model: TransformerLM, cfg: LabConfig, seed: int = 0
) -> dict[str, dict[int, float]]:
    """Accuracy of ``model`` at every length in ``cfg.eval_lengths`` on fresh sequences.

    Returns ``{"accuracy": {T: acc}, "accuracy_beyond": {T: acc on positions >= L}}``;
    ``accuracy_beyond`` is NaN for ``T <= L``. The evaluation data use a seed disjoint
    from training (``seed + 10_000``).
    """
    model.eval()
    out: dict[str, dict[int, float]] = {"accuracy": {}, "accuracy_beyond": {}}
    for T in cfg.eval_lengths:
        g = torch.Generator().manual_seed(10_000 + seed)
        idx, targets = cfg.batch(cfg.eval_samples, T, g)
        logits, _ = model(idx)
        out["accuracy"][T] = accuracy(logits, targets)
        out["accuracy_beyond"][T] = accuracy(logits, targets, from_position=cfg.train_length)
    return out


def learned_position_weight(model: TransformerLM) -> torch.Tensor:
    """A copy of the ``(block_size, d_model)`` table of a ``"learned"`` model's positions."""
    if not SCHEMES[model.config.positional].learned_table:
        raise ValueError(
            "model has no learned position embedding (positional must be 'learned', "
            f"got {model.config.positional!r})"
        )
    return model.pos_emb.weight.detach().clone()


def cosine_similarity_matrix(w: torch.Tensor) -> torch.Tensor:
    """``S[i, j] = cos(w_i, w_j)`` for the rows of ``w``: shape ``(n, n)``."""
    if w.dim() != 2:
        raise ValueError(f"w must be a 2-D matrix (positions, d_model), got shape {tuple(w.shape)}")
    u = F.normalize(w.double(), dim=1)
    return u @ u.T
