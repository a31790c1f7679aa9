"""Length-extrapolation lab (chapter 3): train short, test long, once per positional scheme.

The same small :class:`~mini_transformer.model.TransformerLM` is trained with each positional
scheme on :func:`~mini_transformer.tasks.copy_offset_task` ("repeat the token ``offset``
steps back") at lengths ``L/2 .. L``, then evaluated on fresh sequences of length ``L``,
``1.5 L`` and ``2 L``. Choices worth knowing when reading the results:

* Every scheme gets ``block_size`` = the longest evaluation length (``2 L`` by default). For
  ``learned``, rows from ``L`` on get no gradient and, without weight decay, stay *exactly* at
  their initialisation; ``max_len = L`` would instead make ``learned`` fail past ``L``.
* Training lengths vary per batch so that ``memn2n``, whose encoding depends on the sentence
  length ``J``, sees more than one ``J``.
* 10000 steps at ``lr = 3e-3`` for every scheme: with 1000 steps the slow learners (``alibi``,
  ``memn2n``, ``none``) had not finished, so a drop past ``L`` measured under-training as much
  as extrapolation.

The sweep behind the chapter's results (18 runs, 37 CPU-minutes) is ``tools/extrapolation_lab.py``.
Its committed results were made at ``b084e6d`` (``lr_check``: ``7f28e9e``) with the schedule
written ``lr * (0.1 + 0.9 c)``; :class:`~.core.Schedule`'s rounding differs from it only below
float32 precision, so AdamW takes the same float32 steps (``tests/test_core.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from . import checks
from .checks import check_choice, check_float, check_int, check_tensor
from .core import Schedule, train_step
from .model import POSITIONAL_SCHEMES, TransformerConfig, TransformerLM
from .tasks import IGNORE_INDEX, SYNTHETIC_TASKS

__all__ = [
    "LabConfig", "make_model", "train_model", "accuracy_by_length", "learned_position_weight",
    "cosine_similarity_matrix",
]  # fmt: skip


_SIZES = ("vocab_size", "block_size", "d_model", "n_heads", "n_layers", "d_ff")  # the model's


@dataclass
class LabConfig:
    """One lab run: task, model, training budget and evaluation (``train_length`` is ``L``).

    Training is AdamW without weight decay, a linear warm-up then a cosine to
    ``lr / 10``, clipping at 1; ``scheme_lr`` replaces ``lr`` for the schemes it names (e.g.
    ``{"alibi": 1e-2}``). ``curve_every`` and ``extra`` are for the sweep tool's JSON: the loss
    curve is averaged over windows of ``curve_every`` steps, ``extra`` is copied as is.
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
        L = check_int("train_length", self.train_length, low=1)
        offset = check_int("offset", self.offset, low=1)
        if self.min_train_length is None:
            self.min_train_length = max(L // 2, 1)
        if self.eval_lengths is None:
            self.eval_lengths = [L, (3 * L) // 2, 2 * L]
        why = f" (a sequence must be longer than offset={offset})"
        check_int("min_train_length", self.min_train_length, low=offset + 1, high=L, why=why)
        check_int("the number of eval_lengths", len(self.eval_lengths), low=1)
        for T in self.eval_lengths:
            check_int("eval_lengths", T, low=offset + 1, why=why)
        for name, low in (("steps", 1), ("warmup_steps", 0), ("batch_size", 1)):
            check_int(name, getattr(self, name), low=low)
        check_int("eval_samples", self.eval_samples, low=1)
        check_float("lr", self.lr, low=0, low_open=True)
        for scheme, lr in self.scheme_lr.items():
            check_choice("scheme_lr keys", scheme, POSITIONAL_SCHEMES)
            check_float(f"scheme_lr[{scheme!r}]", lr, low=0, low_open=True)
        check_int("curve_every", self.curve_every, low=1)
        TransformerConfig(**{k: getattr(self, k) for k in _SIZES}, positional="none")  # checked

    def lr_for(self, scheme: str) -> float:
        """The peak learning rate for ``scheme``: ``scheme_lr[scheme]`` if given, else ``lr``."""
        return self.scheme_lr.get(scheme, self.lr)

    @property
    def block_size(self) -> int:
        """The model's ``block_size``: the longest evaluation length (``2 L`` by default)."""
        return max(max(self.eval_lengths), self.train_length)

    def batch(self, n: int, length: int, generator: torch.Generator):
        """``n`` sequences of the task at ``length``, drawn from ``generator``."""
        task = SYNTHETIC_TASKS[self.task]
        return task(n, length, vocab_size=self.vocab_size, offset=self.offset, generator=generator)


def make_model(scheme: str, cfg: LabConfig, seed: int = 0) -> TransformerLM:
    """The lab's model for ``scheme``: the same size and initial RNG state for every scheme."""
    check_choice("scheme", scheme, POSITIONAL_SCHEMES)
    torch.manual_seed(seed)
    config = TransformerConfig(**{k: getattr(cfg, k) for k in _SIZES}, positional=scheme)
    return TransformerLM(config)  # dropout 0 (the default)


def train_model(model: TransformerLM, cfg: LabConfig, seed: int = 0) -> list[float]:
    """Train ``model`` on the task for ``cfg.steps`` steps; return the loss of every step.

    One ``torch.Generator`` seeded by ``seed`` draws the lengths and the tokens, so two
    schemes trained with the same seed see exactly the same batches.
    """
    lr = cfg.lr_for(model.config.positional)
    schedule = Schedule(lr, cfg.warmup_steps, cfg.steps, min_lr=lr / 10)
    g = torch.Generator().manual_seed(1000 + seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    with checks.trusted():  # the batches, steps and lrs are the loop's own
        for step in range(cfg.steps):
            length = int(
                torch.randint(cfg.min_train_length, cfg.train_length + 1, (1,), generator=g)
            )
            idx, targets = cfg.batch(cfg.batch_size, length, g)
            loss, _ = train_step(model, opt, idx, targets, schedule(step), grad_clip=1.0)
            losses.append(loss)
    model.eval()
    return torch.stack(losses).tolist()  # steps >= 1: LabConfig checked it


def _accuracy(logits: torch.Tensor, targets: torch.Tensor, start: int = 0) -> float:
    """The share of scored targets at positions ``>= start`` predicted right (NaN if none)."""
    scored = targets != IGNORE_INDEX
    scored[:, :start] = False
    n = int(scored.sum())
    return float(((logits.argmax(dim=-1) == targets) & scored).sum()) / n if n else float("nan")


@torch.no_grad()
def accuracy_by_length(
    model: TransformerLM, cfg: LabConfig, seed: int = 0
) -> dict[str, dict[int, float]]:
    """Accuracy of ``model`` on fresh sequences of every length in ``cfg.eval_lengths``.

    Returns ``{"accuracy": {T: acc}, "accuracy_beyond": {T: acc on positions >= L}}``
    (``accuracy_beyond`` is NaN for ``T <= L``, where no position is past ``L``). The data are
    drawn with seed ``10_000 + seed``, disjoint from training's.
    """
    model.eval()
    out: dict[str, dict[int, float]] = {"accuracy": {}, "accuracy_beyond": {}}
    for T in cfg.eval_lengths:
        idx, targets = cfg.batch(cfg.eval_samples, T, torch.Generator().manual_seed(10_000 + seed))
        logits, _ = model(idx)
        out["accuracy"][T] = _accuracy(logits, targets)
        out["accuracy_beyond"][T] = _accuracy(logits, targets, start=cfg.train_length)
    return out


def learned_position_weight(model: TransformerLM) -> torch.Tensor:
    """A copy of the ``(block_size, d_model)`` table of a ``"learned"`` model's positions."""
    if model.config.positional != "learned":
        raise ValueError(
            "model has no learned position embedding (positional must be 'learned', "
            f"got {model.config.positional!r})"
        )
    return model.pos_emb.weight.detach().clone()


def cosine_similarity_matrix(w: torch.Tensor) -> torch.Tensor:
    """``S[i, j] = cos(w_i, w_j)`` for the rows of ``w`` ``(n, d)``, in float64: ``(n, n)``."""
    check_tensor("w", w, floating=True, ndim=2, dims="(positions, d_model)")
    u = F.normalize(w.double(), dim=1)  # u_i = w_i / |w_i|
    return u @ u.T
