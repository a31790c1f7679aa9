"""Chapter 5's Post-LN vs Pre-LN sweep: gradients at initialisation and training stability.

Repository tooling, not reader API: the experiments themselves (the model, the copy task,
one training run, the gradient norms at initialisation) are :mod:`mini_transformer.stability`;
this tool runs every (placement, learning rate, warm-up, seed), summarises the seeds of each
configuration and writes the JSON the chapter loads, with the package's command-line rules
(:func:`mini_transformer.cli.run_cli`): every argument and ``--out`` checked before any work, the
JSON rewritten after every run (``"complete": false`` until the end), exit status 2 with a
usage message for bad input, 1 for a failure while running, 130 for Ctrl-C.

Usage::

    python tools/stability_sweep.py --out FILE [--overwrite] [--steps 300]
                                    [--lrs 1e-3 3e-3 1e-2 3e-2] [--warmups 0 100] [--seeds 0 1 2]
                                    [--pre-warmups W ...]

The committed result (180 training runs on :func:`mini_transformer.stability.xiong_lm`, one CPU
thread, on a 2-core machine shared with other jobs; the command, wall time, device and library
versions are stored in the file)::

    python tools/stability_sweep.py --out mini_transformer/results/05_stability.json \\
        --overwrite --lrs 1e-3 3e-3 5e-3 7e-3 1e-2 3e-2 --warmups 0 30 100 200 \\
        --pre-warmups 0 100 --seeds 0 1 2 3 4

Five more seeds on the grid's deciding cells (40 runs, 678 s on the same machine, 2026-11-30;
the chapter checks that its verdicts hold on them)::

    python tools/stability_sweep.py --out mini_transformer/results/05_seeds_5_9.json \\
        --lrs 1e-3 1e-2 --warmups 0 100 200 --pre-warmups 0 --seeds 5 6 7 8 9

The first sweep's seeds 0 and 1 repeat the two-seed sweep committed before it (bc45f53) run
for run, every logged loss identical. The sweeps before 2026-11-29 (``TinyCausalLM``, a twin of
the package's model retired with them, and a 600-step repeat) are in the repository's history.
Rerunning over a committed file needs ``--overwrite``; without it the tool exits with status 2.
"""

from __future__ import annotations

import argparse
import itertools
import math
import platform
import time
from collections.abc import Callable
from dataclasses import asdict

import torch
from sweep_cli import non_negative_int, sweep_main, sweep_parser

from mini_transformer import stability as S
from mini_transformer.cli import positive_float, positive_int
from mini_transformer.hardware import where_it_ran

PROG = "python tools/stability_sweep.py"
GRAD_SEEDS = (0, 1, 2, 3)  # seeds of the gradient norms at initialisation (their default)

__all__ = ["PROG", "summarize_runs", "run_sweep", "parser", "main"]


def _summary(pos: str, lr: float, w: int, rs: list[dict], learned_below: float) -> dict:
    """The seeds of one configuration summarised (see :func:`summarize_runs`)."""
    finals = [r["final_loss"] for r in rs]
    ok = [f for f in finals if f is not None]
    curves = [r["losses"] for r in rs]
    same_length = len({len(c) for c in curves}) == 1 and not any(r["diverged"] for r in rs)
    return {
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
            [round(sum(v) / len(v), 5) for v in zip(*curves, strict=True)] if same_length else None
        ),
    }


def summarize_runs(runs: list[dict], learned_below: float = S.LEARNED_BELOW) -> list[dict]:
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
    return [_summary(*key, rs, learned_below) for key, rs in groups.items()]


def _result(cfg, grads, training: dict, runs: list[dict], times: tuple, complete: bool) -> dict:
    """The JSON-ready result of the runs so far; ``times`` = (start, gradient wall time)."""
    return {
        "config": asdict(cfg),
        "grad_norms": {"seeds": list(GRAD_SEEDS), "layers": grads},
        "training": training
        | {
            "optimizer": "Adam(betas=(0.9, 0.98), eps=1e-9), no clipping, "
            "constant lr after a linear warm-up",
            "uniform_loss": math.log(cfg.vocab_size),
            "learned_below": S.LEARNED_BELOW,
            "summary": summarize_runs(runs),
            "runs": runs,
        },
        "complete": complete,
        "wall_time_s": round(time.perf_counter() - times[0], 1),
        "grad_wall_time_s": round(times[1], 1),
        "device": f"cpu ({platform.machine()}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s)",
        "where_it_ran": where_it_ran("cpu"),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
    }


def run_sweep(
    lrs: tuple[float, ...] = (1e-3, 3e-3, 1e-2, 3e-2),
    warmups: tuple[int, ...] = (0, 100),
    steps: int = 300,
    seeds: tuple[int, ...] = (0, 1, 2),
    pre_warmups: tuple[int, ...] | None = None,
    depths: tuple[int, ...] = (6, 12),
    cfg: S.StabilityConfig | None = None,
    verbose: bool = True,
    on_progress: Callable[[dict], None] | None = None,
) -> dict:
    """Both experiments; returns the JSON-ready results dict.

    Every (placement, learning rate, warm-up) configuration is trained once per seed in
    ``seeds`` (:func:`mini_transformer.stability.train_run`), Pre-LN with the warm-ups
    ``pre_warmups`` (default: ``warmups``), seed by seed (an interrupted sweep has every
    configuration of its first seeds); ``training.runs`` holds the
    runs, ``training.summary`` the per-configuration summary of :func:`summarize_runs`.
    ``on_progress`` is called with the results so far (``"complete": False``) after every
    run, so that an interrupted sweep keeps them.
    """
    cfg = cfg or S.StabilityConfig()
    t0 = time.perf_counter()
    grads = {  # norm of each layer's W2 gradient at initialisation, per depth and placement
        str(L): {p: S.grad_norms_at_init(p, L, seeds=GRAD_SEEDS, cfg=cfg) for p in ("post", "pre")}
        for L in depths
    }
    times = (t0, time.perf_counter() - t0)
    pre_warmups = warmups if pre_warmups is None else pre_warmups
    training = {"lrs": list(lrs), "warmups": list(warmups), "pre_warmups": list(pre_warmups)}
    training |= {"steps": steps, "seeds": list(seeds)}
    grid = [("post", lr, w) for lr in lrs for w in warmups]
    grid += [("pre", lr, w) for lr in lrs for w in pre_warmups]
    runs: list[dict] = []
    for seed, (pos, lr, w) in itertools.product(seeds, grid):
        t1 = time.perf_counter()
        r = S.train_run(pos, lr, w, steps=steps, seed=seed, cfg=cfg)
        r["wall_s"] = round(time.perf_counter() - t1, 2)
        runs.append(r)
        if verbose:
            print(
                f"{pos:4s} lr={lr:<7g} warmup={w:<4d} seed={seed} final={r['final_loss']} "
                f"diverged={r['diverged']} ({r['wall_s']:.1f}s)",
                flush=True,
            )
        if on_progress is not None:
            on_progress(_result(cfg, grads, training, runs, times, complete=False))
    return _result(cfg, grads, training, runs, times, complete=True)


def parser() -> argparse.ArgumentParser:
    """The tool's arguments (also used by the tests to parse the commands stored in JSON)."""
    p = sweep_parser(PROG, __doc__)
    p.add_argument("--steps", type=positive_int, default=300)
    p.add_argument("--lrs", type=positive_float, nargs="+", default=[1e-3, 3e-3, 1e-2, 3e-2])
    p.add_argument("--warmups", type=non_negative_int, nargs="+", default=[0, 100])
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    p.add_argument("--pre-warmups", type=non_negative_int, nargs="+", help="default: --warmups")
    return p


def main(argv: list[str] | None = None) -> dict:
    """Run the sweep and write ``--out`` (rewritten after every run); return the result.

    Every argument and ``--out`` are checked before any work: bad input exits with
    status 2 and a usage message; a failure while writing exits with status 1.
    """

    def sweep(a, save):
        pre = None if a.pre_warmups is None else tuple(a.pre_warmups)
        lrs, warmups, seeds = tuple(a.lrs), tuple(a.warmups), tuple(a.seeds)
        return run_sweep(lrs=lrs, warmups=warmups, steps=a.steps, seeds=seeds, pre_warmups=pre,
                         on_progress=save)  # fmt: skip

    return sweep_main(PROG, parser(), argv, sweep)


if __name__ == "__main__":
    main()
