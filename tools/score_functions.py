"""Chapter 4's comparison of score functions: train every (kind, d_k, lr, seed), write the JSON.

Repository tooling, not reader API: the experiment itself (the retrieval task, the score
functions, one training run) is :mod:`mini_transformer.scoring`; this tool runs it over
learning rates, widths ``d_k``, score functions and seeds, and writes the JSON the chapter
loads, with the package's command-line rules (:func:`mini_transformer.cli.run_cli`): every
argument and ``--out`` checked before any training, the JSON rewritten after every run
(``"complete": false`` until the end), exit status 2 with a usage message for bad input,
1 for a failure while running, 130 for Ctrl-C.

Usage::

    python tools/score_functions.py --out FILE [--overwrite] [--d-ks 4 16 64 256 1024]
                                    [--lrs 1e-3 1e-2] [--seeds 0 1 2] [--steps 200]

The committed result (90 runs, 29 minutes of wall time on a 2-core machine shared with
other jobs, one thread)::

    python tools/score_functions.py --out mini_transformer/results/04_score_functions.json

(the command is stored in the file; it ran as ``python -m mini_transformer.scoring`` with
the same flags before the command line moved here on 2026-11-23). Rerunning it over the
committed file needs ``--overwrite``; without it the tool exits with status 2.

The committed file predates the recording of commit, date and load (issue 33): its provenance
is the command, the device line and ``recorded_as`` (a rerun records them all).
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable

import torch
from sweep_cli import non_negative_int, sweep_main, sweep_parser

from mini_transformer import scoring
from mini_transformer.cli import positive_float, positive_int
from mini_transformer.hardware import where_it_ran

PROG = "python tools/score_functions.py"

__all__ = ["PROG", "run_sweep", "parser", "main"]


def _result(runs: list[dict], start: float, complete: bool) -> dict:
    """The JSON-ready result of the runs so far."""
    return {
        "task": {"T": 16, "d_in": 32, "C": 16, "batch_size": 64, "query_noise": 0.5},
        "optimizer": "Adam (PyTorch defaults), constant lr",
        "runs": runs,
        "complete": complete,
        "wall_time_s": round(time.perf_counter() - start, 1),
        "device": f"cpu ({platform.machine()}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s)",
        "where_it_ran": where_it_ran("cpu"),
    }


def run_sweep(
    d_ks: list[int],
    lrs: list[float],
    seeds: list[int],
    steps: int,
    on_progress: Callable[[dict], None] | None = None,
) -> dict:
    """Train every (lr, d_k, kind, seed) with :func:`mini_transformer.scoring.train_scores`.

    The runs come in that order (kinds in :data:`mini_transformer.scoring.SCORE_KINDS`'
    order); ``on_progress`` gets the result so far after every run.
    """
    start = time.perf_counter()
    runs: list[dict] = []
    for lr in lrs:
        for d_k in d_ks:
            for kind in scoring.SCORE_KINDS:
                for seed in seeds:
                    r = scoring.train_scores(kind, d_k, lr, seed=seed, steps=steps)
                    runs.append(r)
                    print(
                        f"lr={lr:g} d_k={d_k:<5d} {kind:9s} seed={seed} acc={r['accuracy']:.3f} "
                        f"loss={r['loss']:.3f}",
                        flush=True,
                    )
                    if on_progress is not None:
                        on_progress(_result(runs, start, complete=False))
    return _result(runs, start, complete=True)


def parser() -> argparse.ArgumentParser:
    """The tool's arguments (also used by the tests to parse the command stored in JSON)."""
    p = sweep_parser(PROG, __doc__)
    p.add_argument("--d-ks", type=positive_int, nargs="+", default=[4, 16, 64, 256, 1024])
    p.add_argument("--lrs", type=positive_float, nargs="+", default=[1e-3, 1e-2])
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=positive_int, default=200)
    return p


def main(argv: list[str] | None = None) -> dict:
    """Run the sweep and write ``--out`` (rewritten after every run); return the result."""
    return sweep_main(
        PROG,
        parser(),
        argv,
        lambda a, save: run_sweep(a.d_ks, a.lrs, a.seeds, a.steps, on_progress=save),
    )


if __name__ == "__main__":
    main()
