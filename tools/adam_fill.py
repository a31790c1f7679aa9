"""Chapter 5's appendix A.8 control: fill Adam's averages before any weight moves (Adam-2k).

Repository tooling, not reader API. Appendix A.8 of ``book/05_layernorm.ipynb`` tests the RAdam
paper's explanation of warm-up on Post-LN at 5e-3 (where a 30-step warm-up learns in all five
seeds): 50 steps at rate 0 (Adam's averages fill, no weight moves), then 250 at 5e-3, with both
averages kept ("m and v filled"), or with ``m`` restarted from zero before step 50 ("only v
filled", a PyTorch global optimiser step pre-hook, as the chapter used to run it live). Each run
is :func:`reset_control.control_run` (section 5.9's ``control_run``: the sweep's model, batches,
Adam and held-out batches). Command-line rules of :func:`mini_transformer.cli.run_cli`; the JSON
is rewritten after every run.

The committed result (the command, commit, wall time and device are stored in it)::

    python tools/adam_fill.py --out mini_transformer/results/05_adam_fill.json

(2 runs of 300 steps, seed 0, about 25 s on one thread of a 2-core CPU shared with other jobs.)
"""

from __future__ import annotations

import argparse
import time

from reset_control import control_run
from sweep_cli import non_negative_int, provenance, run_rows, sweep_main, sweep_parser
from torch.optim.optimizer import register_optimizer_step_pre_hook

from mini_transformer import stability as S
from mini_transformer.hardware import where_it_ran

PROG = "python tools/adam_fill.py"
FILL_STEPS, RATE = 50, 5e-3  # steps at rate 0 first, then the rate
ROWS = ("m and v filled", "only v filled")

__all__ = ["PROG", "ROWS", "fill", "restart_m", "fill_run", "run_all", "parser", "main"]


def fill(step: int) -> float:
    """50 steps at rate 0 (Adam's averages fill, no weight moves), then 5e-3."""
    return 0.0 if step < FILL_STEPS else RATE


def restart_m(opt, args, kwargs) -> None:
    """Adam-2k's fill: before step 50 (Adam's 51st), ``m`` restarts from 0; ``v`` keeps what it
    averaged. A global step pre-hook: it reaches the Adam that ``control_run`` builds."""
    for state in opt.state.values():
        if int(state["step"]) == FILL_STEPS:
            state["exp_avg"].zero_()


def fill_run(seed: int, row: str, steps: int = 300):
    """``control_run(seed, fill, steps)`` for ``row`` of :data:`ROWS`: ``(held-out copy loss,
    training losses every 10 steps)``; fewer ``steps`` give the same first losses."""
    if row not in ROWS:
        raise ValueError(f"row must be one of {ROWS}, not {row!r}")
    if row == "m and v filled":
        return control_run(seed, fill, steps=steps)
    hook = register_optimizer_step_pre_hook(restart_m)
    try:
        return control_run(seed, fill, steps=steps)
    finally:
        hook.remove()


def run_all(seeds=(0,), verbose=True, on_progress=None) -> dict:
    """Both rows for every seed; the JSON-ready result (``"complete": False`` until the end)."""
    t0, head, runs = time.perf_counter(), provenance(), []

    def result(complete: bool) -> dict:
        return head | {
            "what": "xiong_lm Post-LN on the copy task, Adam(betas=(0.9, 0.98), eps=1e-9), no "
            f"clipping: {FILL_STEPS} steps at rate 0, then {RATE:g} to step 300; 'only v filled': "
            "Adam's m restarted from zero before step 50; final_loss: held-out copy loss "
            "(stability.train_run's 4 batches); losses: training loss every 10 steps",
            "seeds": list(seeds),
            "rows": list(ROWS),
            "learned_below": S.LEARNED_BELOW,
            "runs": runs,
            "complete": complete,
            "wall_time_s": round(time.perf_counter() - t0, 1),
            "where_it_ran": where_it_ran("cpu"),
        }

    return run_rows(seeds, ROWS, fill_run, result, runs, verbose, on_progress)


def parser() -> argparse.ArgumentParser:
    """The tool's arguments (also used by the tests to parse the command stored in the JSON)."""
    p = sweep_parser(PROG, __doc__)
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0])
    return p


def main(argv: list[str] | None = None) -> dict:
    """Run both rows for every seed and write ``--out``; bad input exits with status 2 first."""
    return sweep_main(
        PROG, parser(), argv, lambda a, save: run_all(tuple(a.seeds), on_progress=save)
    )


if __name__ == "__main__":
    main()
