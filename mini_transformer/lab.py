"""Length-extrapolation lab: train short, test long, once per positional scheme.

Chapter 3 asks what each way of telling a Transformer *where* a token is buys when the
model meets sequences longer than any it was trained on. This module answers with one
small experiment: the same small decoder (:class:`~mini_transformer.model.TransformerLM`)
is trained with each positional scheme (``none``, ``learned``, ``sinusoidal``, ``memn2n``,
``rope``, ``alibi``) on a synthetic order-sensitive task (by default
:func:`~mini_transformer.data.copy_offset_task`: "repeat the token ``offset`` steps back")
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

Run the full sweep (18 runs of 10000 steps: about 50 CPU-minutes)::

    python -m mini_transformer.lab --out book/data/extrapolation.json

or split it over two processes and merge::

    python -m mini_transformer.lab --schemes none learned sinusoidal --out part1.json
    python -m mini_transformer.lab --schemes memn2n rope alibi --out part2.json
    python -m mini_transformer.lab --merge part1.json part2.json --out book/data/extrapolation.json

and a quick one with ``--steps 100 --seeds 0``. ``--eval-lengths 32 48 64 128 256``
evaluates further out (up to ``8 L``); ``block_size`` is then the longest length. The JSON
records the command, budget, device, torch version, per-scheme per-length accuracies (mean
and per seed), learning rates, final losses and loss curves, and the cosine-similarity
matrix of a trained learned position embedding.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field, replace

import torch
import torch.nn.functional as F

from .data import IGNORE_INDEX, SYNTHETIC_TASKS
from .model import TransformerConfig, TransformerLM

__all__ = [
    "SCHEMES",
    "LabConfig",
    "make_model",
    "task_loss",
    "train_model",
    "accuracy",
    "evaluate",
    "learned_position_weight",
    "cosine_similarity_matrix",
    "loss_curve",
    "run_lab",
    "merge_results",
    "main",
]

SCHEMES = ("none", "learned", "sinusoidal", "memn2n", "rope", "alibi")
"""The positional schemes the lab compares, in the order the chapter shows them."""


@dataclass
class LabConfig:
    """Everything that defines one lab run (model, task, training budget, evaluation).

    Attributes:
        task: a key of :data:`~mini_transformer.data.SYNTHETIC_TASKS`.
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
        if self.task not in SYNTHETIC_TASKS:
            raise ValueError(f"task must be one of {sorted(SYNTHETIC_TASKS)}, got {self.task!r}")
        for name in ("train_length", "steps", "batch_size", "eval_samples", "d_model", "n_heads",
                     "curve_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        L = self.train_length
        if self.min_train_length is None:
            self.min_train_length = max(L // 2, 1)
        if not 1 <= self.min_train_length <= L:
            raise ValueError(
                f"min_train_length must be in [1, train_length={L}], got {self.min_train_length}"
            )
        if self.eval_lengths is None:
            self.eval_lengths = [L, (3 * L) // 2, 2 * L]
        if not self.eval_lengths or min(self.eval_lengths) < 1:
            raise ValueError(f"eval_lengths must be positive integers, got {self.eval_lengths}")
        for scheme, lr in self.scheme_lr.items():
            if scheme not in SCHEMES:
                raise ValueError(f"scheme_lr keys must be in {SCHEMES}, got {scheme!r}")
            if not lr > 0:
                raise ValueError(
                    f"scheme_lr[{scheme!r}] must be a positive learning rate, got {lr}")

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
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
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


def _lr_at(step: int, cfg: LabConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))))


def task_loss(model: TransformerLM, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the scored targets (those ``!= IGNORE_INDEX``).

    Computed here from the logits, with ``ignore_index`` spelled out, so the lab does not
    depend on how the model validates ``targets``.
    """
    logits, _ = model(idx)  # (B, T, vocab_size)
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX
    )


def train_model(model: TransformerLM, cfg: LabConfig, seed: int = 0) -> list[float]:
    """Train ``model`` on the task for ``cfg.steps`` steps; return the loss of every step.

    The data stream depends only on ``seed`` (one ``torch.Generator`` for lengths and
    tokens), so two schemes trained with the same seed see exactly the same batches. The
    peak learning rate is ``cfg.lr_for(model.config.positional)``.
    """
    cfg = cfg.for_scheme(model.config.positional)
    g = torch.Generator().manual_seed(1000 + seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    model.train()
    losses = []
    lo, hi = cfg.min_train_length, cfg.train_length
    for step in range(cfg.steps):
        length = int(torch.randint(lo, hi + 1, (1,), generator=g))
        idx, targets = cfg.batch(cfg.batch_size, length, g)
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, cfg)
        loss = task_loss(model, idx, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


def accuracy(logits: torch.Tensor, targets: torch.Tensor, from_position: int = 0) -> float:
    """Fraction of scored targets (``!= -100``) at positions ``>= from_position`` predicted right.

    Returns NaN when no target is scored in that range.
    """
    pred = logits.argmax(dim=-1)
    scored = targets != IGNORE_INDEX
    scored[:, :from_position] = False
    n = int(scored.sum())
    if n == 0:
        return float("nan")
    return float(((pred == targets) & scored).sum()) / n


@torch.no_grad()
def evaluate(model: TransformerLM, cfg: LabConfig, seed: int = 0) -> dict[str, dict[int, float]]:
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
    """The ``(max_len, d_model)`` weight of the model's learned position embedding.

    Looks for the first parameter whose name contains ``pos`` and has ``max_len`` rows, so
    it does not depend on the attribute name the model chose.
    """
    max_len = model.config.block_size
    for name, p in model.named_parameters():
        if "pos" in name and p.dim() == 2 and p.shape[0] == max_len:
            return p.detach().clone()
    raise ValueError("model has no learned position embedding (positional must be 'learned')")


def cosine_similarity_matrix(w: torch.Tensor) -> torch.Tensor:
    """``S[i, j] = cos(w_i, w_j)`` for the rows of ``w``: shape ``(n, n)``."""
    if w.dim() != 2:
        raise ValueError(f"w must be a 2-D matrix (positions, d_model), got shape {tuple(w.shape)}")
    u = F.normalize(w.double(), dim=1)
    return u @ u.T


def _mean(values: list[float]) -> float | None:
    vals = [v for v in values if not math.isnan(v)]
    return sum(vals) / len(vals) if vals else None


def _clean(v: float) -> float | None:
    return None if math.isnan(v) else round(v, 4)


def loss_curve(losses: list[float], every: int) -> list[float]:
    """Mean of ``losses`` over consecutive windows of ``every`` steps (drops a partial one)."""
    n = len(losses) // every
    return [round(sum(losses[i * every:(i + 1) * every]) / every, 4) for i in range(n)]


def run_lab(
    cfg: LabConfig,
    seeds: list[int],
    schemes: tuple[str, ...] | list[str] = SCHEMES,
    verbose: bool = True,
) -> dict:
    """Train and evaluate every scheme with every seed; return the JSON-ready result dict.

    Per scheme the result holds the accuracies (mean and per seed), the learning rate used,
    the final training loss (mean of the last 50 steps) and the loss curve of every seed
    (see :func:`loss_curve`), so that one can check that training had levelled off.
    """
    start = time.perf_counter()
    results: dict = {}
    learned_info = None
    for scheme in schemes:
        per_seed: dict = {"accuracy": {T: [] for T in cfg.eval_lengths},
                          "accuracy_beyond": {T: [] for T in cfg.eval_lengths},
                          "final_loss": [], "train_seconds": [], "loss_curve": []}
        for seed in seeds:
            t0 = time.perf_counter()
            model = make_model(scheme, cfg, seed)
            if scheme == "learned":
                w_init = learned_position_weight(model)
            losses = train_model(model, cfg, seed)
            seconds = time.perf_counter() - t0
            ev = evaluate(model, cfg, seed)
            for key in ("accuracy", "accuracy_beyond"):
                for T, acc in ev[key].items():
                    per_seed[key][T].append(acc)
            tail = losses[-50:]
            per_seed["final_loss"].append(round(sum(tail) / len(tail), 4))
            per_seed["train_seconds"].append(round(seconds, 1))
            per_seed["loss_curve"].append(loss_curve(losses, cfg.curve_every))
            if verbose:
                accs = " ".join(f"T={T}:{ev['accuracy'][T]:.3f}" for T in cfg.eval_lengths)
                print(f"{scheme:>10} seed {seed}: loss {per_seed['final_loss'][-1]:.3f} "
                      f"{accs} ({seconds:.0f}s)", flush=True)
            if scheme == "learned" and learned_info is None:
                w = learned_position_weight(model)
                L = cfg.train_length
                learned_info = {
                    "seed": seed,
                    "max_len": int(w.shape[0]),
                    "train_length": L,
                    "init_std": round(float(w_init.std()), 4),
                    "untrained_rows_max_change": float((w[L:] - w_init[L:]).abs().max())
                    if w.shape[0] > L else None,
                    "trained_rows_mean_change": round(
                        float((w[:L] - w_init[:L]).norm(dim=1).mean()), 4),
                    "cosine_similarity": [[round(float(v), 4) for v in row]
                                          for row in cosine_similarity_matrix(w)],
                }
        results[scheme] = {
            key: {str(T): {"mean": _clean(_mean(vals)) if _mean(vals) is not None else None,
                           "per_seed": [_clean(v) for v in vals]}
                  for T, vals in per_seed[key].items()}
            for key in ("accuracy", "accuracy_beyond")
        }
        results[scheme]["lr"] = cfg.lr_for(scheme)
        results[scheme]["final_loss"] = per_seed["final_loss"]
        results[scheme]["train_seconds"] = per_seed["train_seconds"]
        results[scheme]["loss_curve"] = per_seed["loss_curve"]
    return {
        "lab": "length extrapolation (mini_transformer.lab)",
        "config": asdict(cfg) | {"block_size": cfg.block_size},
        "seeds": list(seeds),
        "steps": cfg.steps,
        "schemes": list(schemes),
        "eval_lengths": list(cfg.eval_lengths),
        "chance_accuracy": round(1.0 / cfg.vocab_size, 4),
        "results": results,
        "learned_embedding": learned_info,
        "wall_time_s": round(time.perf_counter() - start, 1),
        "torch_version": torch.__version__,
        "device": f"cpu ({platform.machine()}, {os.cpu_count()} cores, "
        f"{torch.get_num_threads()} torch thread(s))",
        "python_version": platform.python_version(),
    }


def merge_results(parts: list[dict]) -> dict:
    """Merge lab results that ran the same configuration on disjoint sets of schemes.

    The sweep can be split across processes (``--schemes``) and merged afterwards
    (``--merge``). Schemes come out in the order of :data:`SCHEMES`; ``commands`` lists the
    command of every part; ``wall_time_s`` is the longest part (the parts ran side by side)
    and ``cpu_time_s`` their sum.
    """
    if not parts:
        raise ValueError("parts must hold at least one lab result, got none")
    base = parts[0]

    def shared(part: dict) -> dict:  # what must agree; per-scheme learning rates may differ
        config = {k: v for k, v in part["config"].items() if k != "scheme_lr"}
        return {k: part[k] for k in ("seeds", "steps", "eval_lengths", "torch_version")} | {
            "config": config}

    for part in parts[1:]:
        for key, value in shared(part).items():
            if value != shared(base)[key]:
                raise ValueError(f"cannot merge lab results that differ in {key!r}")
    seen = [s for part in parts for s in part["schemes"]]
    if len(seen) != len(set(seen)):
        raise ValueError(f"parts must hold disjoint schemes, got {seen}")
    results = {s: part["results"][s] for part in parts for s in part["schemes"]}
    schemes = [s for s in SCHEMES if s in results]
    learned = [p["learned_embedding"] for p in parts if p["learned_embedding"] is not None]
    scheme_lr = {s: lr for p in parts for s, lr in p["config"].get("scheme_lr", {}).items()
                 if s in p["schemes"]}
    merged = dict(base)
    merged |= {
        "config": base["config"] | {"scheme_lr": scheme_lr},
        "command": " && ".join(p["command"] for p in parts),
        "commands": [p["command"] for p in parts],
        "schemes": schemes,
        "results": {s: results[s] for s in schemes},
        "learned_embedding": learned[0] if learned else None,
        "wall_time_s": max(p["wall_time_s"] for p in parts),
        "cpu_time_s": round(sum(p.get("cpu_time_s", p["wall_time_s"]) for p in parts), 1),
        "parts": len(parts),
    }
    return merged


def _scheme_lr(text: str) -> tuple[str, float]:
    scheme, sep, value = text.partition("=")
    if not sep or scheme not in SCHEMES:
        raise argparse.ArgumentTypeError(
            f"expected SCHEME=LR with SCHEME in {SCHEMES}, got {text!r}")
    try:
        return scheme, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected SCHEME=LR with a number LR, got {text!r}") from None


def _write(result: dict, out: str) -> None:
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


def main(argv: list[str] | None = None) -> dict:
    """Command line: ``python -m mini_transformer.lab --out FILE [--seeds 0 1 2] [--steps N]``.

    ``--schemes`` runs a subset of the schemes, ``--scheme-lr alibi=0.01`` gives one scheme
    its own learning rate, and ``--merge A.json B.json --out C.json`` merges parts that ran
    the same configuration on disjoint schemes (see :func:`merge_results`);
    ``--attach KEY=D.json`` then stores a side experiment's result under ``KEY``.
    """
    p = argparse.ArgumentParser(
        prog="python -m mini_transformer.lab", description=__doc__.split("\n")[0]
    )
    p.add_argument("--out", default=None, help="write the JSON results here (default: print only)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=LabConfig.steps)
    p.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=SCHEMES)
    p.add_argument("--task", default=LabConfig.task, choices=sorted(SYNTHETIC_TASKS))
    p.add_argument("--train-length", type=int, default=LabConfig.train_length)
    p.add_argument("--offset", type=int, default=LabConfig.offset)
    p.add_argument("--vocab-size", type=int, default=LabConfig.vocab_size)
    p.add_argument("--batch-size", type=int, default=LabConfig.batch_size)
    p.add_argument("--lr", type=float, default=LabConfig.lr)
    p.add_argument("--eval-samples", type=int, default=LabConfig.eval_samples)
    p.add_argument("--eval-lengths", type=int, nargs="+", default=None, metavar="T",
                   help="lengths to evaluate at (default: L, 1.5 L, 2 L); the model's "
                   "block_size becomes the longest, so a learned table gets that many rows")
    p.add_argument("--scheme-lr", type=_scheme_lr, nargs="+", default=[], metavar="SCHEME=LR",
                   help="per-scheme peak learning rates, e.g. alibi=0.01 (others use --lr)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 = bit-stable)")
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                   help="merge these result files (disjoint schemes) instead of training")
    p.add_argument("--attach", nargs="+", default=[], metavar="KEY=JSON",
                   help="with --merge: also store these result files under KEY "
                   "(e.g. lr_check=lr.json, a side experiment)")
    args = p.parse_args(argv)
    if args.merge:
        parts = []
        for path in args.merge:
            with open(path) as f:
                parts.append(json.load(f))
        result = merge_results(parts)
        argv_used = sys.argv[1:] if argv is None else argv
        result["merge_command"] = "python -m mini_transformer.lab " + shlex.join(argv_used)
        for item in args.attach:
            key, sep, path = item.partition("=")
            if not sep or not key or key in result:
                raise ValueError(f"--attach expects KEY=JSON with a new KEY, got {item!r}")
            with open(path) as f:
                result[key] = json.load(f)
    elif args.attach:
        raise ValueError("--attach only works together with --merge")
    else:
        if args.eval_lengths is not None and min(args.eval_lengths) < 1:
            p.error(f"--eval-lengths must be positive integers, got {args.eval_lengths}")
        torch.set_num_threads(args.threads)
        cfg = LabConfig(
            task=args.task, vocab_size=args.vocab_size, offset=args.offset,
            train_length=args.train_length, steps=args.steps, batch_size=args.batch_size,
            lr=args.lr, eval_samples=args.eval_samples, scheme_lr=dict(args.scheme_lr),
            eval_lengths=args.eval_lengths,
        )
        argv_used = sys.argv[1:] if argv is None else argv
        result = {"command": "python -m mini_transformer.lab " + shlex.join(argv_used)}
        cpu0 = time.process_time()
        result |= run_lab(cfg, args.seeds, args.schemes)
        result["cpu_time_s"] = round(time.process_time() - cpu0, 1)
    if args.out:
        _write(result, args.out)
        print(f"wrote {args.out} ({result['wall_time_s']} s)")
    return result


if __name__ == "__main__":
    main()
