"""Post-LN vs Pre-LN experiments of chapter 5: gradients at initialisation and training stability.

Two experiments, both on a small causal language model built here from
:class:`~mini_transformer.layers.TransformerStack` (token embedding + learned positions +
stack + linear head; deliberately independent of :mod:`mini_transformer.model`):

1. :func:`grad_norms_at_init`: the norm of the gradient of each layer's second FFN matrix
   :math:`W^{2,\\ell}` at initialisation (Xavier-normal weights, zero biases, as in the
   analysis of Xiong et al., 2020), averaged over seeds, for a Post-LN and a Pre-LN stack.
2. :func:`train_run`: the same model trained with Adam on a synthetic copy task, for each
   placement, learning rate, and with or without a linear learning-rate warm-up.

The copy task: a sequence is ``K`` random symbols, a separator, then the same ``K``
symbols again. Only the second half is predictable; the loss reported is the mean
cross-entropy (nats) on those ``K`` positions. A model that has not learned to copy sits
at :math:`\\ln V` (uniform guess); a perfect copier reaches 0.

Run the full sweep (3 seeds per configuration, 48 training runs of 11 to 25 s each on one CPU
thread: about ten minutes; results committed for the book)::

    python -m mini_transformer.stability --seeds 0 1 2 --out book/data/05_stability.json

The JSON file keeps every run (per-seed final loss and training curve) and, per
configuration, a summary over the seeds (:func:`summarize_runs`): mean, min and max of the
final loss, how many seeds learned the copy, and the mean training curve.

Everything runs on CPU with one thread and fixed seeds, so the notebook can re-run one
configuration and get the same numbers as the JSON file.
"""

from __future__ import annotations

import itertools
import math
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .checks import check_choice, check_float, check_int
from .core import Schedule, train_step
from .devices import where_it_ran
from .layers import ACTIVATIONS, TransformerStack

LEARNED_BELOW = 0.5
"""A run "learned the copy" if its held-out copy loss ends below this many nats.

The uniform guess is :math:`\\ln 16 \\approx 2.77` nats; 0.5 nats means a geometric-mean
probability of :math:`e^{-0.5} \\approx 0.6` on the right symbol, against 1/16 by chance."""

__all__ = [
    "LEARNED_BELOW",
    "StabilityConfig",
    "TinyCausalLM",
    "copy_task_batch",
    "grad_norms_at_init",
    "lr_at",
    "train_run",
    "summarize_runs",
    "run_sweep",
]


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

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, low=2)
        for name in ("copy_len", "d_model", "n_heads", "d_ff", "n_layers", "batch_size"):
            check_int(name, getattr(self, name), low=1)
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model must be divisible by n_heads, got d_model={self.d_model}, "
                f"n_heads={self.n_heads}"
            )
        check_choice("activation", self.activation, ACTIVATIONS)

    @property
    def block_size(self) -> int:
        return 2 * self.copy_len  # inputs are the first 2K tokens of the 2K + 1


class TinyCausalLM(nn.Module):
    """Token + learned position embedding -> causal TransformerStack -> linear head.

    Weights are initialised as in Xiong et al.'s analysis: Xavier-normal matrices and zero
    biases in every ``nn.Linear``, embeddings :math:`\\mathcal{N}(0, 1)` entries (so a
    token vector has squared norm about ``d_model``, as with the original Transformer's
    ``sqrt(d_model)`` embedding scale), LayerNorm ``gamma = 1``, ``beta = 0``.
    """

    def __init__(self, cfg: StabilityConfig, norm_position: str) -> None:
        super().__init__()
        self.cfg = cfg
        n_tokens = cfg.vocab_size + 1
        self.tok = nn.Embedding(n_tokens, cfg.d_model)
        self.pos = nn.Embedding(cfg.block_size, cfg.d_model)
        self.stack = TransformerStack(
            cfg.n_layers,
            cfg.d_model,
            cfg.n_heads,
            cfg.d_ff,
            norm_position=norm_position,
            causal=True,
            activation=cfg.activation,
        )
        self.head = nn.Linear(cfg.d_model, n_tokens)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, 0.0, 1.0)
        with torch.no_grad():  # positions on the same scale as tokens, but smaller
            self.pos.weight.mul_(0.5)

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """``idx`` (B, T) long -> ``(logits (B, T, V + 1), loss)``.

        ``targets`` (B, K) are the tokens the *last* K positions must predict (the copy);
        the loss is their mean cross-entropy in nats, or ``None`` without targets.
        """
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T))  # (B, T, d_model)
        logits = self.head(self.stack(x))  # (B, T, V + 1)
        if targets is None:
            return logits, None
        K = targets.shape[1]
        copy = logits[:, -K:]  # positions SEP .. 2K-1 predict the copy
        return logits, F.cross_entropy(copy.reshape(-1, copy.shape[-1]), targets.reshape(-1))


def copy_task_batch(cfg: StabilityConfig, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """One batch of the copy task: inputs ``(B, 2K)`` and targets ``(B, K)``.

    The full sequence is ``s_1..s_K, SEP, s_1..s_K``; the model reads its first ``2K``
    tokens and must predict the last ``K`` (each from the positions before it).
    """
    K, V, B = cfg.copy_len, cfg.vocab_size, cfg.batch_size
    s = torch.randint(0, V, (B, K), generator=generator)
    sep = torch.full((B, 1), V, dtype=torch.long)
    seq = torch.cat([s, sep, s], dim=1)  # (B, 2K + 1)
    return seq[:, :-1], seq[:, K + 1 :]


def grad_norms_at_init(
    norm_position: str,
    n_layers: int,
    seeds: tuple[int, ...] = (0, 1, 2, 3),
    cfg: StabilityConfig | None = None,
) -> list[float]:
    """Mean over seeds of :math:`\\|\\partial L / \\partial W^{2,\\ell}\\|_F` for each layer.

    ``W^{2,l}`` is the second matrix of layer ``l``'s FFN (``ffn.linear2.weight``). The
    loss is the copy-task loss of a fresh model on one batch; seed ``s`` fixes both the
    weights and the batch. Returns ``n_layers`` floats, input side first.
    """
    cfg = cfg or StabilityConfig()
    cfg = StabilityConfig(**{**asdict(cfg), "n_layers": n_layers})
    total = torch.zeros(n_layers, dtype=torch.float64)
    for seed in seeds:
        torch.manual_seed(seed)
        model = TinyCausalLM(cfg, norm_position)
        idx, targets = copy_task_batch(cfg, torch.Generator().manual_seed(10_000 + seed))
        model(idx, targets)[1].backward()
        total += torch.tensor(
            [b.ffn.linear2.weight.grad.norm().item() for b in model.stack.blocks],
            dtype=torch.float64,
        )
    return (total / len(seeds)).tolist()


def lr_at(step: int, lr: float, warmup_steps: int) -> float:
    """The sweep's learning rate: linear warm-up from ``lr / warmup_steps`` to ``lr``, then
    constant (the shared :class:`~mini_transformer.core.Schedule`, in this sweep's float order)."""
    return Schedule(lr=lr, warmup_steps=warmup_steps, arithmetic="stability")(step)


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
    """Train one TinyCausalLM with Adam (betas 0.9, 0.98, as Vaswani et al.) on the copy task.

    No gradient clipping (it would hide the instability we want to see). The model and
    the data stream are seeded by ``seed`` (the same for every configuration, so runs
    differ only in placement and schedule). Training stops early if the loss becomes
    non-finite.

    Returns:
        dict with ``losses`` (training loss every ``log_every`` steps), ``final_loss``
        (held-out copy loss after training, on ``eval_batches`` fresh batches),
        ``diverged`` (non-finite loss), ``steps_run``.
    """
    check_choice("norm_position", norm_position, ("pre", "post"))
    check_float("lr", lr, low=0, low_open=True)
    check_int("warmup_steps", warmup_steps, low=0)
    check_int("steps", steps, low=1)
    check_int("seed", seed, low=0)
    check_int("log_every", log_every, low=1)
    check_int("eval_batches", eval_batches, low=1)
    cfg = cfg or StabilityConfig()
    torch.manual_seed(seed)
    model = TinyCausalLM(cfg, norm_position)
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
    schedule = Schedule(lr=lr, warmup_steps=warmup_steps, arithmetic="stability")  # = lr_at
    data = torch.Generator().manual_seed(1_000 + seed)
    losses: list[float] = []
    diverged = False
    step = 0
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
            final = (
                sum(model(*copy_task_batch(cfg, held_out))[1].item() for _ in range(eval_batches))
                / eval_batches
            )
        diverged = not math.isfinite(final)
    return {
        "norm_position": norm_position,
        "lr": lr,
        "warmup_steps": warmup_steps,
        "seed": seed,
        "losses": losses,
        "final_loss": round(final, 5) if math.isfinite(final) else None,
        "diverged": diverged,
        "steps_run": step + 1,
    }


def summarize_runs(runs: list[dict], learned_below: float = LEARNED_BELOW) -> list[dict]:
    """Group runs by configuration (placement, learning rate, warm-up) and summarise the seeds.

    A diverged run counts as not learned and is left out of the mean, min and max (they are
    ``None`` if every seed diverged).

    Returns:
        one dict per configuration, in the order first seen, with ``norm_position``, ``lr``,
        ``warmup_steps``, ``seeds``, ``final_losses`` (per seed, ``None`` if diverged),
        ``mean_final_loss``, ``min_final_loss``, ``max_final_loss``, ``n_learned`` (final
        loss below ``learned_below``), ``n_diverged``, ``n_seeds`` and ``mean_losses`` (the
        training curve averaged over the seeds, ``None`` if a run stopped early).
    """
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["norm_position"], r["lr"], r["warmup_steps"]), []).append(r)
    out = []
    for (pos, lr, w), rs in groups.items():
        finals = [r["final_loss"] for r in rs]
        ok = [f for f in finals if f is not None]
        curves = [r["losses"] for r in rs]
        same_length = len({len(c) for c in curves}) == 1 and not any(r["diverged"] for r in rs)
        out.append(
            {
                "norm_position": pos,
                "lr": lr,
                "warmup_steps": w,
                "seeds": [r["seed"] for r in rs],
                "final_losses": finals,
                "mean_final_loss": round(sum(ok) / len(ok), 5) if ok else None,
                "min_final_loss": min(ok) if ok else None,
                "max_final_loss": max(ok) if ok else None,
                "n_learned": sum(f is not None and f < learned_below for f in finals),
                "n_diverged": sum(r["diverged"] for r in rs),
                "n_seeds": len(rs),
                "mean_losses": (
                    [round(sum(v) / len(v), 5) for v in zip(*curves, strict=True)]
                    if same_length
                    else None
                ),
            }
        )
    return out


def run_sweep(
    lrs: tuple[float, ...] = (1e-3, 3e-3, 1e-2, 3e-2),
    warmups: tuple[int, ...] = (0, 100),
    steps: int = 300,
    seeds: tuple[int, ...] = (0, 1, 2),
    depths: tuple[int, ...] = (6, 12),
    cfg: StabilityConfig | None = None,
    verbose: bool = True,
    on_progress: Callable[[dict], None] | None = None,
) -> dict:
    """Both experiments; returns the JSON-ready results dict.

    Every (placement, learning rate, warm-up) configuration is trained once per seed in
    ``seeds``; ``training.runs`` holds the runs, ``training.summary`` the per-configuration
    summary of :func:`summarize_runs`. ``on_progress`` is called with the results so far
    (``"complete": False``) after every run, so that an interrupted sweep keeps them.
    """
    cfg = cfg or StabilityConfig()
    t0 = time.perf_counter()
    grads = {
        str(L): {pos: grad_norms_at_init(pos, L, cfg=cfg) for pos in ("post", "pre")}
        for L in depths
    }
    t_grad = time.perf_counter() - t0
    runs: list[dict] = []

    def result(complete: bool) -> dict:
        return {
            "command": "python -m mini_transformer.stability " + " ".join(sys.argv[1:]),
            "config": asdict(cfg),
            "grad_norms": {"seeds": [0, 1, 2, 3], "layers": grads},
            "training": {
                "lrs": list(lrs),
                "warmups": list(warmups),
                "steps": steps,
                "seeds": list(seeds),
                "optimizer": "Adam(betas=(0.9, 0.98), eps=1e-9), no clipping, "
                "constant lr after a linear warm-up",
                "uniform_loss": math.log(cfg.vocab_size),
                "learned_below": LEARNED_BELOW,
                "summary": summarize_runs(runs),
                "runs": runs,
            },
            "complete": complete,
            "wall_time_s": round(time.perf_counter() - t0, 1),
            "grad_wall_time_s": round(t_grad, 1),
            "device": f"cpu ({platform.machine()}), torch {torch.__version__}, "
            f"{torch.get_num_threads()} thread(s)",
            "where_it_ran": where_it_ran("cpu"),
            "torch_version": torch.__version__,
            "python_version": platform.python_version(),
        }

    for pos, lr, w, seed in itertools.product(("post", "pre"), lrs, warmups, seeds):
        t1 = time.perf_counter()
        r = train_run(pos, lr, w, steps=steps, seed=seed, cfg=cfg)
        r["wall_s"] = round(time.perf_counter() - t1, 2)
        runs.append(r)
        if verbose:
            print(
                f"{pos:4s} lr={lr:<7g} warmup={w:<4d} seed={seed} final={r['final_loss']} "
                f"diverged={r['diverged']} ({r['wall_s']:.1f}s)",
                flush=True,
            )
        if on_progress is not None:
            on_progress(result(complete=False))
    return result(complete=True)


if __name__ == "__main__":  # the command line is repository tooling: see experiments.py
    from .experiments import stability_main

    stability_main()
