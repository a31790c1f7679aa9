"""Chapter 4's longer window: section 4.11's two starts, W and 4W, trained past its 200 steps.

Repository tooling, not reader API. Section 4.11 of ``book/04_attention.ipynb`` trains the
retrieval layer of :mod:`mini_transformer.scoring` at ``d_k = 256`` for 200 Adam steps from nine
random starts ``W`` (seeds 0-8, batch order ``100 + seed``): scaled attention from ``W`` at a
rate ``r``, and unscaled attention at ``r / 4``, which by the chapter's identity is scaled
attention from ``4W`` at ``r`` (``r`` is the *scaled-equivalent rate*). It picks ``r = 0.01``
for both starts on 4,096 picking queries (seed 6000) and scores the picks on 4,096 fresh ones
(seed 5000). This tool reruns that protocol (the chapter's loss, start, batches, Adam and
query sets) with a longer window:

- a grid of scaled-equivalent rates (0.001, 0.0025, 0.004, 0.0063, 0.01, 0.016, 0.025; the
  picked 0.01 inside it, so that no retuned pick need sit on the grid's edge), each start trained
  once at each rate for 1,200 steps and scored at steps 100, 200, 300, 400, 600, 800, 1,000 and
  1,200 on both query sets (the step-200 scores at 0.01 are the chapter's runs), to retune the
  rate at each checkpoint.

Every score is the loss on a query set and its top-1 errors (queries whose largest output
weight is on a wrong label). Command-line rules of :func:`mini_transformer.cli.run_cli`
(``--out`` checked before any work, exit status 2 with usage for bad input, ``--overwrite`` to
replace a file); the JSON is rewritten after every run.

The committed result (the command, commit, wall time and device are stored in it)::

    python tools/adam_long_window.py --out mini_transformer/results/04_long_window.json

(126 runs, 151,200 Adam steps, on one thread of a 2-core CPU shared with other jobs.) A
reviewer then asked whether the verdict holds at other widths: the same protocol at d_k = 64
and 1,024 (c = 2.83, 5.66; the larger start is still labelled ``'4W'``), 200 steps::

    python tools/adam_long_window.py --d-k 64 --rates 0.004 0.01 0.016 0.025 \
        --checkpoints 100 200 --out mini_transformer/results/04_dk_64.json
    python tools/adam_long_window.py --d-k 1024 --rates 0.004 0.01 0.016 0.025 \
        --checkpoints 100 200 --out mini_transformer/results/04_dk_1024.json

A reviewer then asked whether the 200-step verdict holds on new starts: the chapter's protocol at
its picked rate only, on seeds 9-17 (25 s)::

    python tools/adam_long_window.py --seeds 9 10 11 12 13 14 15 16 17 --rates 0.01 \
        --checkpoints 200 --out mini_transformer/results/04_new_seeds.json

A reviewer then asked whether a still smaller start does better still: ``--small-start 4`` adds a
third start, scaled attention from ``W / 4`` at each rate ``r`` (labelled ``'W/4'``), on the
chapter's seeds and a grid around its pick, 200 steps::

    python tools/adam_long_window.py --small-start 4 --rates 0.0025 0.004 0.0063 0.01 0.016 \
        --checkpoints 200 --out mini_transformer/results/04_small_start.json

A reviewer then showed that the mean loss on 4,096 queries is too heavy-tailed to order the two
starts: ``--large-fresh 65536`` also scores every checkpoint on 65,536 fresh queries (seed 7000),
at the picked rate, the chapter's seeds, up to step 600::

    python tools/adam_long_window.py --rates 0.01 --checkpoints 200 400 600 --large-fresh 65536 \
        --out mini_transformer/results/04_large_fresh.json

Section 4.12's own grid (the chapter used to train it live: 29 s of its execution), four
scaled-equivalent rates, 200 steps; ``--held-out`` also scores every checkpoint on section
4.11's 256 held-out queries (seeds 999-1002, the mean of the four batches' losses, as its
``train`` returns it)::

    python tools/adam_long_window.py --rates 0.001 0.004 0.01 0.04 --checkpoints 200 --held-out \
        --out mini_transformer/results/04_grid.json

Appendix A.1's squared-error control (the chapter used to train it live: 31 s): the same grid
trained under ``--loss mse``, the mean of ``(o - e_y*)^2`` over the batch and the 16 labels;
``pick_mse`` and ``fresh_mse`` are that loss on the two query sets (keys unprojected, as
``score_pick``), the other scores as above::

    python tools/adam_long_window.py --rates 0.001 0.004 0.01 0.04 --checkpoints 200 --loss mse \
        --out mini_transformer/results/04_mse_grid.json
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from sweep_cli import non_negative_int, provenance, sweep_main, sweep_parser

from mini_transformer.cli import positive_float, positive_int
from mini_transformer.hardware import where_it_ran
from mini_transformer.scoring import ScoreModel, retrieval_batch

PROG = "python tools/adam_long_window.py"
D_K = 256
C = D_K**0.25  # the identity's c = d_k^(1/4) = 4: unscaled at r / c is scaled from c W at r
PICKED = 0.01  # section 4.11's picked scaled-equivalent rate, for both starts
CHECKPOINTS = (100, 200, 300, 400, 600, 800, 1000, 1200)  # every run is scored here
RATES = (0.001, 0.0025, 0.004, 0.0063, 0.01, 0.016, 0.025)  # scaled-equivalent rates
GRID_STEPS = 1200
PICK_SEED, FRESH_SEED, QUERIES = 6000, 5000, 4096  # section 4.11's two query sets
LARGE_SEED, CHUNK = 7000, 8192  # --large-fresh: a larger fresh set, scored in chunks
HELD_SEED, HELD_BATCHES = 999, 4  # --held-out: section 4.11's held-out batches, seeds 999-1002

__all__ = [
    "PROG",
    "CHECKPOINTS",
    "RATES",
    "GRID_STEPS",
    "train_scored",
    "label_weights",
    "mse_of",
    "mse_on",
    "run_all",
    "parser",
    "main",
]


def loss_of(model: ScoreModel, batch) -> torch.Tensor:
    """Section 4.11's training loss, -ln(o_y* + 1e-9) (as in :mod:`mini_transformer.scoring`)."""
    query, keys, values, target = batch
    out = (model(query, keys).softmax(-1) @ values)[:, 0]  # (B, C): weight on each label
    return F.nll_loss(torch.log(out + 1e-9), target)


def mse_of(model: ScoreModel, batch) -> torch.Tensor:
    """Appendix A.1's squared-error training loss: the mean of ``(o - e_y*)^2`` over the batch
    and the labels (``--loss mse``)."""
    query, keys, values, target = batch
    out = (model(query, keys).softmax(-1) @ values)[:, 0]
    return F.mse_loss(out, F.one_hot(target, values.shape[-1]).float())


def label_weights(model: ScoreModel, batch) -> torch.Tensor:
    """``o`` (B, C) as section 4.12's ``label_weights`` computes it: the keys enter unprojected,
    (x_q W^Q)(W^K)^T x_k^T."""
    query, keys, values, _ = batch
    with torch.no_grad():
        s = (model.q_proj(query) @ model.k_proj.weight) @ keys.transpose(1, 2) * model.scale
        return (s.softmax(-1) @ values)[:, 0]


def score_pick(model: ScoreModel, batch) -> tuple[float, int]:
    """Loss and top-1 errors on the picking queries, as section 4.11's grid cell computes them
    (:func:`label_weights`)."""
    target = batch[3]
    out = label_weights(model, batch)
    return F.nll_loss(torch.log(out + 1e-9), target).item(), int((out.argmax(-1) != target).sum())


def mse_on(model: ScoreModel, batch) -> float:
    """The squared error of :func:`mse_of` on a query set, through :func:`label_weights`."""
    out = label_weights(model, batch)
    return F.mse_loss(out, F.one_hot(batch[3], out.shape[-1]).float()).item()


def held_loss(model: ScoreModel, held) -> float:
    """Section 4.11's held-out loss: the mean over its batches of :func:`loss_of`."""
    with torch.no_grad():
        return sum(loss_of(model, b).item() for b in held) / len(held)


def score_fresh(model: ScoreModel, batch) -> tuple[float, int]:
    """Loss and top-1 errors on the fresh queries, as section 4.11's verdict cell computes them
    (``per_query``: the model's own forward)."""
    query, keys, values, target = batch
    with torch.no_grad():
        out = (model(query, keys).softmax(-1) @ values)[:, 0]
    q_loss = -torch.log(out.gather(1, target[:, None])[:, 0] + 1e-9)
    return q_loss.mean().item(), int((out.argmax(-1) != target).sum())


def score_large(model: ScoreModel, chunks) -> tuple[float, int, float]:
    """``score_fresh`` over a larger fresh set given as chunks: the mean loss over all its
    queries, the total top-1 errors and the largest single query's loss (the mean is heavy-tailed:
    one query on a wrong key costs up to about 10 nats, so 4,096 queries may not order two close
    means)."""
    total, errors, worst, n = 0.0, 0, 0.0, 0
    with torch.no_grad():
        for query, keys, values, target in chunks:
            out = (model(query, keys).softmax(-1) @ values)[:, 0]
            q_loss = -torch.log(out.gather(1, target[:, None])[:, 0] + 1e-9)
            total, n = total + q_loss.double().sum().item(), n + len(target)
            errors += int((out.argmax(-1) != target).sum())
            worst = max(worst, q_loss.max().item())
    return total / n, errors, worst


def start_of(seed: int, d_k: int = D_K, divide: float = 1.0) -> dict:
    """Section 4.11's random start W for ``seed`` (PyTorch's default initialisation), or W /
    ``divide`` (the still smaller start of ``--small-start``)."""
    torch.manual_seed(seed)
    return {name: w / divide for name, w in ScoreModel("scaled", d_k).state_dict().items()}


def train_scored(
    kind: str,
    lr: float,
    start: dict,
    data_seed: int,
    checkpoints,
    pick,
    fresh,
    d_k: int = D_K,
    large=(),
    held=(),
    loss: str = "log",
) -> dict:
    """Adam (PyTorch defaults) from ``start`` up to the last checkpoint, batch order
    ``data_seed``, on the log loss (``loss="log"``, :func:`loss_of`) or the squared error
    (``"mse"``, :func:`mse_of`); ``{step: scores}`` on both query sets at each checkpoint (and
    on ``large``, chunks of a larger fresh set, on ``held``, section 4.11's held-out batches,
    when given; with ``"mse"`` also the squared error on both query sets)."""
    model = ScoreModel(kind, d_k)
    model.load_state_dict(start)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    batches = torch.Generator().manual_seed(data_seed)
    train_loss = {"log": loss_of, "mse": mse_of}[loss]
    scores = {}
    for step in range(1, max(checkpoints) + 1):
        opt.zero_grad()
        train_loss(model, retrieval_batch(batches)).backward()
        opt.step()
        if step in checkpoints:
            (pl, pe), (fl, fe) = score_pick(model, pick), score_fresh(model, fresh)
            scores[str(step)] = {"pick_loss": pl, "pick_errors": pe}
            scores[str(step)] |= {"fresh_loss": fl, "fresh_errors": fe}
            if large:
                ll, le, lw = score_large(model, large)
                scores[str(step)] |= {"large_loss": ll, "large_errors": le, "large_worst": lw}
            if held:
                scores[str(step)]["held_loss"] = held_loss(model, held)
            if loss == "mse":
                scores[str(step)] |= {
                    "pick_mse": mse_on(model, pick),
                    "fresh_mse": mse_on(model, fresh),
                }
    return scores


def run_all(
    seeds=tuple(range(9)),
    verbose: bool = True,
    on_progress=None,
    d_k: int = D_K,
    rates=RATES,
    checkpoints=CHECKPOINTS,
    small_start: int | None = None,
    large_fresh: int = 0,
    held_out: bool = False,
    loss: str = "log",
) -> dict:
    """Every (seed, rate, start); the JSON-ready result. At another ``d_k`` the larger start is
    ``c W`` with ``c = d_k^(1/4)``, still labelled ``'4W'`` (the chapter's name for it). With
    ``small_start = K`` a third start, scaled from ``W / K`` at ``r``, is labelled ``'W/K'``. With
    ``large_fresh = N`` every checkpoint is also scored on N fresh queries (seed 7000); with
    ``held_out`` on section 4.11's 256 held-out queries; ``loss="mse"`` trains on the squared
    error (Appendix A.1's control)."""
    t0, head, runs = time.perf_counter(), provenance(), []
    pick = retrieval_batch(torch.Generator().manual_seed(PICK_SEED), batch_size=QUERIES)
    fresh = retrieval_batch(torch.Generator().manual_seed(FRESH_SEED), batch_size=QUERIES)
    large_gen = torch.Generator().manual_seed(LARGE_SEED)
    sizes = [min(CHUNK, large_fresh - i) for i in range(0, large_fresh, CHUNK)]
    large = [retrieval_batch(large_gen, batch_size=n) for n in sizes]
    held = [
        retrieval_batch(torch.Generator().manual_seed(HELD_SEED + i)) for i in range(HELD_BATCHES)
    ]
    held = held if held_out else []
    c = d_k**0.25
    grid_checkpoints = tuple(s for s in checkpoints if s <= GRID_STEPS)

    def result(complete: bool) -> dict:
        return head | {
            "what": f"section 4.11's retrieval layer, d_k = {d_k}: scaled from W at rate r ('W') "
            f"and unscaled at r / c, c = d_k^(1/4) = {c:.4g} (= scaled from cW at r, '4W'); Adam "
            "(PyTorch defaults), batch order 100 + seed, start W = seed's ScoreModel('scaled', "
            "d_k); scores: loss -ln(o_y* + 1e-9) and top-1 errors on 4,096 picking queries (seed "
            "6000) and 4,096 fresh ones (seed 5000), at each checkpoint"
            + (
                f"; a third start, scaled from W / {small_start} at r ('W/{small_start}')"
                if small_start
                else ""
            )
            + (
                f"; also scored on {large_fresh:,} fresh queries (seed 7000, drawn in chunks of "
                f"{CHUNK:,}): large_loss (mean), large_errors, large_worst (largest query loss)"
                if large_fresh
                else ""
            )
            + (
                "; also scored on section 4.11's 256 held-out queries (seeds 999-1002, 64 each):"
                " held_loss, the mean of the four batches' losses"
                if held_out
                else ""
            )
            + (
                "; trained on the squared error mean((o - e_y*)^2) instead, also scored by it:"
                " pick_mse, fresh_mse (keys unprojected, as pick_loss)"
                if loss == "mse"
                else ""
            ),
            "large_fresh": large_fresh,
            "held_out": held_out,
            "loss": loss,
            "d_k": d_k,
            "small_start": small_start,
            "picked_rate": PICKED,
            "checkpoints": list(checkpoints),
            "rates": list(rates),
            "grid_steps": GRID_STEPS,
            "seeds": list(seeds),
            "runs": runs,
            "complete": complete,
            "wall_time_s": round(time.perf_counter() - t0, 1),
            "where_it_ran": where_it_ran("cpu"),
        }

    for seed in seeds:
        starts = {"W": start_of(seed, d_k)}
        arms = [("W", "W", "scaled", 1.0), ("4W", "W", "unscaled", 1 / c)]
        if small_start:
            starts["small"] = start_of(seed, d_k, small_start)
            arms.append((f"W/{small_start}", "small", "scaled", 1.0))
        for rate in rates:
            marks = checkpoints if rate == PICKED else grid_checkpoints
            for name, begin, kind, factor in arms:
                lr = rate * factor
                t1 = time.perf_counter()
                scores = train_scored(
                    kind, lr, starts[begin], 100 + seed, marks, pick, fresh, d_k, large, held, loss
                )
                runs.append({"start": name, "kind": kind, "rate": rate, "lr": lr, "seed": seed,
                             "steps": max(marks), "scores": scores,
                             "wall_s": round(time.perf_counter() - t1, 2)})  # fmt: skip
                if verbose:
                    last = scores[str(max(marks))]
                    print(f"seed {seed} rate {rate:g} {name}: fresh errors {last['fresh_errors']} "
                          f"at step {max(marks)} ({runs[-1]['wall_s']} s)", flush=True)  # fmt: skip
                if on_progress is not None:
                    on_progress(result(complete=False))
    return result(complete=True)


def parser() -> argparse.ArgumentParser:
    """The tool's arguments (also used by the tests to parse the command stored in the JSON)."""
    p = sweep_parser(PROG, __doc__)
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=list(range(9)))
    p.add_argument("--d-k", type=positive_int, default=D_K, help=f"default {D_K}")
    p.add_argument("--rates", type=positive_float, nargs="+", default=list(RATES))
    p.add_argument("--checkpoints", type=positive_int, nargs="+", default=list(CHECKPOINTS))
    p.add_argument("--small-start", type=positive_int, default=None, metavar="K",
                   help="add a third start, scaled attention from W / K at each rate")  # fmt: skip
    p.add_argument("--large-fresh", type=non_negative_int, default=0, metavar="N",
                   help="also score every checkpoint on N fresh queries (seed 7000)")  # fmt: skip
    p.add_argument("--held-out", action="store_true",
                   help="also score on section 4.11's 256 held-out queries")  # fmt: skip
    p.add_argument("--loss", choices=("log", "mse"), default="log",
                   help="the training loss: log (default) or squared error")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> dict:
    """Run every configuration and write ``--out``; bad input exits with status 2 first."""
    return sweep_main(
        PROG,
        parser(),
        argv,
        lambda a, save: run_all(
            tuple(a.seeds),
            on_progress=save,
            d_k=a.d_k,
            rates=tuple(a.rates),
            checkpoints=tuple(sorted(set(a.checkpoints))),
            small_start=a.small_start,
            large_fresh=a.large_fresh,
            held_out=a.held_out,
            loss=a.loss,
        ),
    )


if __name__ == "__main__":
    main()
