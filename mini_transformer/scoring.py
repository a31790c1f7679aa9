r"""Chapter 4's miniature of Vaswani et al.'s section 3.2.1: three score functions as d_k grows.

Vaswani et al. (2017) observe that "for small values of :math:`d_k` the two mechanisms perform
similarly, additive attention outperforms dot product attention without scaling for larger
values of :math:`d_k`", and *suspect* saturated softmax gradients. :func:`train_scores` trains
one score function at width ``d_k`` to retrieve the label of the key a noisy query copies; the
values are the labels' one-hot vectors, so the loss :math:`-\ln o_{y_{j^*}}` reaches the
scores only through the softmax, as in a real attention layer. The score functions
(PyTorch's default ``nn.Linear`` initialisation):

- ``"scaled"``: :math:`q \cdot k / \sqrt{d_k}` with :math:`q = W^Q x_q`, :math:`k = W^K x_j`;
- ``"unscaled"``: :math:`q \cdot k`;
- ``"additive"``: :math:`w^\top \tanh(W_q x_q + W_k x_j + b)`
  (:class:`~mini_transformer.additive.AdditiveAttention`, hidden width ``d_k``).

The sweep behind the chapter's results is ``tools/score_functions.py``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .additive import AdditiveAttention
from .checks import check_choice, check_float, check_int
from .core import train_step

__all__ = ["ScoreModel", "retrieval_batch", "train_scores"]

SCORE_KINDS = ("additive", "unscaled", "scaled")  # in the order the sweep tool runs them


def retrieval_batch(
    generator: torch.Generator, batch_size: int = 64, T: int = 16, d_in: int = 32, C: int = 16
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One retrieval batch: query (B, 1, d_in), keys (B, T, d_in), values (B, T, C) (one-hot
    labels of the keys), targets (B,) (the label of the key the query copies)."""
    x = torch.randn(batch_size, T, d_in, generator=generator)
    labels = torch.randint(0, C, (batch_size, T), generator=generator)
    j = torch.randint(0, T, (batch_size,), generator=generator)
    rows = torch.arange(batch_size)
    query = x[rows, j] + 0.5 * torch.randn(batch_size, d_in, generator=generator)
    return query[:, None], x, F.one_hot(labels, C).float(), labels[rows, j]


class ScoreModel(nn.Module):
    """One attention layer's score function: ``kind`` in ``SCORE_KINDS``, width ``d_k``."""

    def __init__(self, kind: str, d_k: int, d_in: int = 32) -> None:
        super().__init__()
        self.kind = check_choice("kind", kind, SCORE_KINDS)
        check_int("d_k", d_k, low=1)
        check_int("d_in", d_in, low=1)
        if kind == "additive":
            self.additive = AdditiveAttention(d_in, d_in, d_k)
        else:
            self.q_proj = nn.Linear(d_in, d_k, bias=False)
            self.k_proj = nn.Linear(d_in, d_k, bias=False)
            self.scale = 1 / math.sqrt(d_k) if kind == "scaled" else 1.0

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        """``query`` (B, 1, d_in), ``keys`` (B, T, d_in) -> scores (B, 1, T)."""
        if self.kind == "additive":
            return self.additive.scores(query, keys)
        return (self.q_proj(query) @ self.k_proj(keys).transpose(1, 2)) * self.scale


def _loss_and_accuracy(model: ScoreModel, batch) -> tuple[Tensor, Tensor]:
    query, keys, values, target = batch
    out = (model(query, keys).softmax(-1) @ values)[:, 0]  # (B, C): o = sum_j a_j e_{y_j}
    loss = F.nll_loss(torch.log(out + 1e-9), target)  # -ln o_{y_j*}
    return loss, (out.argmax(-1) == target).float().mean()


def train_scores(kind: str, d_k: int, lr: float, seed: int = 0, steps: int = 200) -> dict:
    """Train one :class:`ScoreModel` with Adam; return held-out loss, accuracy and init stats.

    ``init_score_std`` is the standard deviation of the scores at initialisation and
    ``init_max_weight`` the mean largest attention weight there (1/T = uniform, 1 = one-hot).
    """
    lr = check_float("lr", lr, low=0, low_open=True)
    seed = check_int("seed", seed, low=0)
    steps = check_int("steps", steps, low=1)
    torch.manual_seed(seed)
    model = ScoreModel(kind, d_k)
    held_out = [retrieval_batch(torch.Generator().manual_seed(999 + i)) for i in range(4)]
    with torch.no_grad():
        scores = torch.cat([model(b[0], b[1]) for b in held_out])
    init_std = scores.std().item()
    init_max = scores.softmax(-1).max(-1).values.mean().item()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    data = torch.Generator().manual_seed(100 + seed)

    def retrieval(inputs, target):  # the model(x, y) -> (output, loss) of train_step
        return None, _loss_and_accuracy(model, (*inputs, target))[0]

    for _ in range(steps):
        *inputs, target = retrieval_batch(data)
        train_step(retrieval, opt, inputs, target, lr)
    with torch.no_grad():
        results = [_loss_and_accuracy(model, b) for b in held_out]
    return {"kind": kind, "d_k": d_k, "lr": lr, "seed": seed, "steps": steps} | {
        "loss": round(sum(r[0].item() for r in results) / len(results), 5),
        "accuracy": round(sum(r[1].item() for r in results) / len(results), 5),
        "init_score_std": round(init_std, 4),
        "init_max_weight": round(init_max, 4),
    }
