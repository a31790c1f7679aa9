"""Chapter 5's appendix A.2 and A.3 runs, logged step by step: Post-LN's per-layer gradients.

Repository tooling, not reader API. Section 5.9 of ``book/05_layernorm.ipynb`` defines
``logged_run`` (a :func:`mini_transformer.stability.train_run` that logs, at every step, each
layer's gradient norm on ``W^{2,l}``, its Adam update and the update's cosine with its first);
this tool runs the same function for the appendix's controls, so that the chapter loads them
instead of training 3,000 steps live. The chapter re-runs one of them (A.3's seed 1) and checks
that it reproduces the stored one. Every run is Post-LN, Adam as in the sweep, one CPU thread:

- A.2: 60 steps at 1e-3 (seed 0) and at 3e-3 (seeds 0-4); 300 steps at 1e-2 after a 30-step
  warm-up (seed 0) and after a 100-step one (seeds 0-4);
- A.3: 60 steps at 1e-2 without warm-up, seeds 1-4 (seed 0 is section 5.9's live run).

Each run stores its training loss, layer 1's and layer 6's gradient norm, layer 1's cosine and
the mean and largest of the 12 block LayerNorms' input norms at every step. Command-line rules
of :func:`mini_transformer.cli.run_cli` (``--out`` checked before any work, exit status 2 with
usage for bad input, ``--overwrite`` to replace a file).

The committed result (the command, wall time and device are stored in it)::

    python tools/stability_logged.py --out mini_transformer/results/05_logged_runs.json

(16 runs, about 200 s on one thread of a 2-core CPU shared with other jobs; the file stores the
commit it was made from.) Rerunning over the
committed file needs ``--overwrite``.

A.3's reference, Pre-LN (which learns) on the same seeds 1-4, 60 steps at 1e-2 without warm-up
(:data:`PRE_RUNS`; A.3 used to run these live)::

    python tools/stability_logged.py --runs "A.3 Pre-LN" \\
        --out mini_transformer/results/05_logged_pre.json

(4 runs, about 10 s on one thread of a 2-core CPU.)
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import time
from pathlib import Path

import torch
from sweep_cli import sweep_main, sweep_parser

from mini_transformer import stability as S
from mini_transformer.core import Schedule, train_step
from mini_transformer.hardware import where_it_ran

PROG = "python tools/stability_logged.py"
# (label, lr, warm-up steps, steps, seeds): the appendix's runs, all Post-LN
RUNS = (
    ("A.2", 1e-3, 0, 60, (0,)),
    ("A.2", 3e-3, 0, 60, (0, 1, 2, 3, 4)),
    ("A.2", 1e-2, 30, 300, (0,)),
    ("A.2", 1e-2, 100, 300, (0, 1, 2, 3, 4)),
    ("A.3", 1e-2, 0, 60, (1, 2, 3, 4)),
)
# A.3's reference: Pre-LN, the same seeds and rate (``--runs "A.3 Pre-LN"``)
PRE_RUNS = (("A.3", 1e-2, 0, 60, (1, 2, 3, 4)),)
RUN_SETS = {"appendix": ("post", RUNS), "A.3 Pre-LN": ("pre", PRE_RUNS)}

__all__ = ["PROG", "RUNS", "PRE_RUNS", "RUN_SETS", "logged_run", "run_all", "parser", "main"]


def logged_run(position: str, lr: float = 1e-2, steps: int = 60, seed: int = 0, warmup: int = 0):
    """Chapter 5's ``logged_run`` (section 5.9), line for line in what it computes.

    Returns per-step lists: ``losses``, ``grad`` (each layer's ``||dL/dW^{2,l}||_F``),
    ``cosine`` (each layer's update against its first update), ``ln_in`` (each block
    LayerNorm's input norm, mean over tokens, ln1 and ln2 of block 1 first: the scale the
    backward pass divides by, section 5.9).
    """
    cfg = S.StabilityConfig()
    torch.manual_seed(seed)
    model = S.xiong_lm(cfg, position)
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
    batches = torch.Generator().manual_seed(1_000 + seed)
    W2 = [b.ffn.linear2.weight for b in model.blocks]
    norms: list[float] = []  # this step's LayerNorm input norms, filled by the hooks
    for ln in (ln for b in model.blocks for ln in (b.ln1, b.ln2)):
        ln.register_forward_pre_hook(lambda m, a: norms.append(a[0].norm(dim=-1).mean().item()))
    losses, grad, cosine, first, ln_in = [], [], [], None, []
    schedule = Schedule(lr, warmup_steps=warmup)
    for step in range(steps):
        before = [w.detach().clone() for w in W2]
        norms.clear()
        loss, _ = train_step(model, opt, *S.copy_task_batch(cfg, batches), schedule(step))
        losses.append(loss.item())
        ln_in.append(list(norms))
        grad.append([w.grad.norm().item() for w in W2])
        delta = [(w.detach() - b).flatten() for w, b in zip(W2, before, strict=True)]
        if first is None:
            first = delta
        cosine.append(
            [float(v @ f / (v.norm() * f.norm())) for v, f in zip(delta, first, strict=True)]
        )
    return {"losses": losses, "grad": grad, "cosine": cosine, "ln_in": ln_in}


def _sig(v: float, digits: int = 5) -> float:
    return float(f"{v:.{digits}g}")


def run_all(verbose: bool = True, on_progress=None, run_set: str = "appendix") -> dict:
    """Every run of ``run_set`` (:data:`RUN_SETS`: :data:`RUNS`, Post-LN, or :data:`PRE_RUNS`,
    Pre-LN); the JSON-ready result (``"complete": False`` until the end)."""
    position, run_list = RUN_SETS[run_set]
    t0 = time.perf_counter()
    runs: list[dict] = []
    git = ["git", "-C", str(Path(__file__).resolve().parent)]  # the commit the runs came from
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "status", "--porcelain", "-uno"], capture_output=True, text=True)
    made = {
        "commit": commit.stdout.strip() + ("+uncommitted" if dirty.stdout.strip() else ""),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }

    def result(complete: bool) -> dict:
        return {
            "runs": runs,
            "what": f"{position.capitalize()}-LN, xiong_lm, Adam(betas=(0.9, 0.98), eps=1e-9), "
            "no clipping; "
            "per step: training loss, ||dL/dW2|| of layers 1 and 6, cosine of layer 1's "
            "update with its first, the 12 block LayerNorms' input norms (mean over tokens): "
            "their mean and largest",
            "complete": complete,
            **made,
            "wall_time_s": round(time.perf_counter() - t0, 1),
            "device": f"cpu ({platform.machine()}), torch {torch.__version__}, "
            f"{torch.get_num_threads()} thread(s)",
            "where_it_ran": where_it_ran("cpu"),
        }

    for label, lr, warmup, steps, seeds in run_list:
        for seed in seeds:
            t1 = time.perf_counter()
            r = logged_run(position, lr=lr, steps=steps, seed=seed, warmup=warmup)
            run = {"appendix": label, "norm_position": position, "lr": lr, "warmup_steps": warmup}
            run |= {"steps": steps, "seed": seed, "wall_s": round(time.perf_counter() - t1, 2)}
            run["losses"] = [round(v, 5) for v in r["losses"]]
            run["grad_layer1"] = [_sig(g[0]) for g in r["grad"]]
            run["grad_layer6"] = [_sig(g[-1]) for g in r["grad"]]
            run["cosine_layer1"] = [round(c[0], 5) for c in r["cosine"]]
            run["ln_input_norm_mean"] = [round(sum(n) / len(n), 3) for n in r["ln_in"]]
            run["ln_input_norm_max"] = [round(max(n), 3) for n in r["ln_in"]]
            runs.append(run)
            if verbose:
                print(f"{label} lr={lr:g} warmup={warmup} seed={seed} ({run['wall_s']} s)")
            if on_progress is not None:
                on_progress(result(complete=False))
    return result(complete=True)


def parser() -> argparse.ArgumentParser:
    """The tool's arguments (also used by the tests to parse the command stored in the JSON)."""
    p = sweep_parser(PROG, __doc__)
    p.add_argument("--runs", choices=list(RUN_SETS), default="appendix")
    return p


def main(argv: list[str] | None = None) -> dict:
    """Run every run and write ``--out``; bad input exits with status 2 before any work."""
    return sweep_main(
        PROG, parser(), argv, lambda a, save: run_all(on_progress=save, run_set=a.runs)
    )


if __name__ == "__main__":
    main()
