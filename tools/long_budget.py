"""Chapter 5's longer budget: the sweep's runs on either side of its 300-step limits, run longer.

Repository tooling, not reader API. Section 5.8 of ``book/05_layernorm.ipynb`` calls a run
*learned* if its held-out copy loss ends below 0.5 nats after 300 steps
(``tools/stability_sweep.py``). This tool reruns, with a longer budget, the no-warm-up
configurations that failed in that sweep and bound its limits: Post-LN at 3e-3 and 1e-2, Pre-LN
at 3e-2, every seed. Each run is :func:`mini_transformer.stability.train_run`, the sweep's own
function: the same model, batches and Adam, so its first 300 steps are the sweep's run (the
tests check the logged losses against it). Command-line rules of
:func:`mini_transformer.cli.run_cli` (``--out`` checked before any work, exit status 2 with usage
for bad input, ``--overwrite`` to replace a file); the JSON is rewritten after every run.

The committed result (the command, commit, wall time and device are stored in it)::

    python tools/long_budget.py --out mini_transformer/results/05_long_budget.json

(15 runs of 1,000 steps on one thread of a 2-core CPU shared with other jobs.)
"""

from __future__ import annotations

import argparse
import time

from sweep_cli import non_negative_int, provenance, sweep_main, sweep_parser

from mini_transformer import stability as S
from mini_transformer.cli import positive_int
from mini_transformer.hardware import where_it_ran

PROG = "python tools/long_budget.py"
# (placement, learning rate, warm-up steps): the sweep's failed rows next to its limits
CONFIGS = (("post", 3e-3, 0), ("post", 1e-2, 0), ("pre", 3e-2, 0))

__all__ = ["PROG", "CONFIGS", "run_all", "parser", "main"]


def run_all(steps: int = 1000, seeds=(0, 1, 2, 3, 4), verbose: bool = True, on_progress=None):
    """Every configuration of :data:`CONFIGS` for every seed; the JSON-ready result."""
    t0, head, runs = time.perf_counter(), provenance(), []

    def result(complete: bool) -> dict:
        return head | {
            "what": "xiong_lm on the copy task, Adam(betas=(0.9, 0.98), eps=1e-9), no clipping, "
            "no warm-up (stability.train_run); training loss logged every 10 steps, "
            "final_loss: held-out copy loss after the last step",
            "steps": steps,
            "seeds": list(seeds),
            "learned_below": S.LEARNED_BELOW,
            "runs": runs,
            "complete": complete,
            "wall_time_s": round(time.perf_counter() - t0, 1),
            "where_it_ran": where_it_ran("cpu"),
        }

    for seed in seeds:
        for position, lr, warmup in CONFIGS:
            t1 = time.perf_counter()
            run = S.train_run(position, lr, warmup, steps=steps, seed=seed)
            runs.append(run | {"wall_s": round(time.perf_counter() - t1, 2)})
            if verbose:
                print(
                    f"{position} lr={lr:g} seed={seed} final={run['final_loss']} "
                    f"({runs[-1]['wall_s']} s)",
                    flush=True,
                )
            if on_progress is not None:
                on_progress(result(complete=False))
    return result(complete=True)


def parser() -> argparse.ArgumentParser:
    """The tool's arguments (also used by the tests to parse the command stored in the JSON)."""
    p = sweep_parser(PROG, __doc__)
    p.add_argument("--steps", type=positive_int, default=1000)
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2, 3, 4])
    return p


def main(argv: list[str] | None = None) -> dict:
    """Run every configuration and write ``--out``; bad input exits with status 2 first."""
    return sweep_main(
        PROG, parser(), argv, lambda a, save: run_all(a.steps, tuple(a.seeds), on_progress=save)
    )


if __name__ == "__main__":
    main()
