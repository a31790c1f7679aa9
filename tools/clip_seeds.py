"""The tiny run with and without gradient clipping, paired over seeds (chapter 6, section 6.4).

Five seeds could not tell whether clipping changes the tiny run's held-out loss (a reader's rerun of
seeds 5-14 pointed the other way from seeds 0-4). This trains the ``tiny`` preset (float32, one
thread, lr 1e-2) once with ``grad_clip=1`` and once without (``grad_clip=0``) for each seed, plus a
third run without clipping at a lower peak rate (``LOWER_LR``, the preset's floor and warm-up kept:
a reviewer's control for "clipping acts like a smaller rate"), and scores each run's final weights
on the whole held-out text (every consecutive window of ``T = 32``, as
``estimate_loss(seed=None)``), so no noise comes from choosing evaluation windows. It stores, per
seed and setting, that whole-text loss and the log's last sampled evaluation (512 characters).

Run (about 2 min for 20 seeds on 1 thread of a quiet 2-core machine, 4 loaded)::

    python tools/clip_seeds.py --out mini_transformer/results/06_clip_seeds.json

Seeds 0-19 were exploratory (the count was raised to 20 after fewer seeds were inconclusive);
seeds 20-39 were then run as a confirmation fixed in advance::

    python tools/clip_seeds.py --first-seed 20 \
        --out mini_transformer/results/06_clip_seeds_20_39.json

They gave 1.9 standard errors, under the chapter's bar of about two. After that result one last
confirmation, seeds 40-79, was fixed in advance and run (197 s, 1 thread, 2-core AMD EPYC)::

    python tools/clip_seeds.py --first-seed 40 --seeds 40 \
        --out mini_transformer/results/06_clip_seeds_40_79.json

A reviewer then asked for the fourth arm, clipped at the lower rate (does clipping still help
once the rate is lower, or does it only stand in for a lower rate?). ``--fourth-arm`` runs only
that arm (``clipped_lower_lr``: grad_clip 1 at ``LOWER_LR``), here on the 60 confirmation seeds
(293 s, 1 thread, 2-core AMD EPYC shared with other jobs; load average 5 to 8)::

    python tools/clip_seeds.py --fourth-arm --first-seed 20 --seeds 60 \
        --out mini_transformer/results/06_clip_low_rate.json

A reviewer then asked whether the unclipped run at a rate below ``LOWER_LR`` does better (if
so, clipping at ``LOWER_LR`` could still stand in for that lower rate). ``--unclipped-lr`` runs
only that arm (``unclipped_at_lr``: grad_clip 0 at the given peak rate), on the 60 seeds::

    python tools/clip_seeds.py --unclipped-lr 0.004 --first-seed 20 --seeds 60 \
        --out mini_transformer/results/06_clip_unclipped_004.json

A reviewer then asked whether a longer warm-up does what clipping does (clipping fires mostly
in the first steps). ``--warmup-steps`` sets the unclipped arm's warm-up; two runs, 60 seeds
each, at the preset's rate and at ``LOWER_LR``::

    python tools/clip_seeds.py --unclipped-lr 0.01 --warmup-steps 15 --first-seed 20 --seeds 60 \
        --out mini_transformer/results/06_clip_warmup_15.json
    python tools/clip_seeds.py --unclipped-lr 0.006 --warmup-steps 15 --first-seed 20 --seeds 60 \
        --out mini_transformer/results/06_clip_warmup_15_006.json

A reviewer then asked whether clipping's benefit outlives the 60-step schedule. ``--steps 600``
trains the tiny preset for 600 steps (warm-up, peak rate and floor kept; the cosine reaches the
floor at step 600), clipped and unclipped at the preset's rate only, on seeds 20-39: two
processes started together, one thread each (212 s each, 2-core AMD EPYC shared with other
jobs; load average 3 to 5), their files then merged into one (``runs``; each part's header under
``parts``)::

    python tools/clip_seeds.py --steps 600 --first-seed 20 --seeds 10 --out part_20.json &
    python tools/clip_seeds.py --steps 600 --first-seed 30 --seeds 10 --out part_30.json
    # merged: mini_transformer/results/06_clip_600.json

A reviewer then asked which of section 6.3's cases makes clipping help. Two unclipped arms at the
preset's rate, on the 60 seeds: ``early_clip`` clips (to norm 1, as ``grad_clip=1``) only the
first 6 steps, where clipping mostly fires; ``constant_scale`` multiplies every gradient by 0.2,
a constant below any clip factor of the book's seed-0 tiny run (section 6.4: gradient norms up to
2.31, so factors of 0.43 and up), and never clips (Adam should undo a constant factor, up to its
epsilon). Both act through an optimizer step pre-hook, with ``grad_clip=0``::

    python tools/clip_seeds.py --mechanism-arms --first-seed 20 --seeds 60 \
        --out mini_transformer/results/06_clip_mechanism.json
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from sweep_cli import command_line, provenance, run_sweep_cli
from torch.optim.optimizer import register_optimizer_step_pre_hook

from mini_transformer import data, train
from mini_transformer.cli import _number, positive_float, positive_int
from mini_transformer.hardware import where_it_ran

#: The third arm's peak learning rate (the tiny preset's is 1e-2).
LOWER_LR = 6e-3


EARLY_STEPS, CONSTANT_SCALE = 6, 0.2  # the mechanism arms (see the module docstring)


def _grad_hook(clip_first: int | None, scale: float | None):
    """An optimizer step pre-hook: clip the gradients' global norm to 1 in the first
    ``clip_first`` steps, or multiply every gradient by ``scale``."""
    steps = [0]

    def hook(optimizer, args, kwargs):
        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if clip_first is not None and steps[0] < clip_first:
            torch.nn.utils.clip_grad_norm_(params, 1.0)
        if scale is not None:
            for p in params:
                p.grad.mul_(scale)
        steps[0] += 1

    return hook


def tiny_run(
    seed: int,
    grad_clip: float,
    val_ids,
    lr: float | None = None,
    steps: int | None = None,
    warmup_steps: int | None = None,
    clip_first: int | None = None,
    scale: float | None = None,
) -> dict:
    """One tiny run (``None``: the preset's 60 steps, 5 warm-up steps); its log's last
    held-out loss and its final weights' whole-text loss. ``clip_first`` or ``scale``: the
    mechanism arms' gradient hook (:func:`_grad_hook`), with ``grad_clip=0``."""
    cfg = train.get_preset(
        "tiny",
        device="cpu",
        progress=False,
        precision="fp32",
        seed=seed,
        grad_clip=grad_clip,
        lr=lr,
        steps=steps,
        warmup_steps=warmup_steps,
    )
    built, handle = [], None
    if clip_first is not None or scale is not None:
        handle = register_optimizer_step_pre_hook(_grad_hook(clip_first, scale))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            train.train(cfg, tmp, argv=[], setup_hook=built.append)  # keeps the model object
            log = train.read_log(Path(tmp) / "metrics.jsonl")
    finally:
        if handle is not None:
            handle.remove()
    sampled = [r["val_loss"] for r in log if r["event"] == "eval"][-1]
    model = built[0].eval()
    whole = train.estimate_loss(model, val_ids, n_batches=None, batch_size=256, seed=None)
    return {"log_val_loss": round(sampled, 6), "whole_text_loss": round(whole, 6)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", type=positive_int, default=20, help="how many seeds (default 20)")
    p.add_argument(
        "--first-seed",
        type=lambda t: _number(t, int, lambda v: v >= 0, "an integer >= 0"),
        default=0,
        help="seeds F .. F+N-1 (default 0)",
    )
    p.add_argument(
        "--fourth-arm",
        action="store_true",
        help=f"run only clipped_lower_lr (grad_clip 1 at lr {LOWER_LR:g})",
    )
    p.add_argument(
        "--unclipped-lr",
        type=positive_float,
        default=None,
        help="run only unclipped_at_lr (grad_clip 0 at this peak rate)",
    )
    p.add_argument(
        "--warmup-steps",
        type=positive_int,
        default=None,
        help="with --unclipped-lr: warm up over this many steps (default: the preset's 5)",
    )
    p.add_argument(
        "--steps",
        type=positive_int,
        default=None,
        help="train this many steps (warm-up, peak rate and floor kept; the cosine ends there)"
        " and run only clipped and unclipped at the preset's rate (default: the preset's 60)",
    )
    p.add_argument(
        "--mechanism-arms",
        action="store_true",
        help=f"run only early_clip (clip the first {EARLY_STEPS} steps) and constant_scale"
        f" (every gradient times {CONSTANT_SCALE:g}, never clipped)",
    )
    p.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)
    if args.warmup_steps is not None and args.unclipped_lr is None:
        p.error("--warmup-steps needs --unclipped-lr")

    def sweep(save) -> dict:
        preset = (
            f"tiny, precision fp32, device cpu; clipped_lower_lr: grad_clip 1 at lr {LOWER_LR:g}"
            if args.fourth_arm
            else f"tiny, precision fp32, device cpu, grad_clip 0 at lr 1e-2; early_clip: global"
            f" norm clipped to 1 in the first {EARLY_STEPS} steps only; constant_scale: every"
            f" gradient times {CONSTANT_SCALE:g}, never clipped"
            if args.mechanism_arms
            else f"tiny, precision fp32, device cpu; unclipped_at_lr: grad_clip 0 at lr "
            f"{args.unclipped_lr:g}, warm-up {args.warmup_steps or 5} steps"
            if args.unclipped_lr
            else f"tiny, precision fp32, device cpu, steps {args.steps}; grad_clip 1 (clipped)"
            " or 0 (not) at lr 1e-2"
            if args.steps
            else "tiny, precision fp32, device cpu; grad_clip 1 (clipped) or 0 (not) at lr 1e-2;"
            f" unclipped_lower_lr: grad_clip 0 at lr {LOWER_LR:g}"
        )
        result = provenance(
            preset=preset,
            where_it_ran=where_it_ran("cpu"),
            runs={},
        )
        tok = data.CharTokenizer.from_corpus()
        val_ids = tok.encode(data.load_corpus("val"))
        t0 = time.perf_counter()
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            if args.fourth_arm:
                arms = {"clipped_lower_lr": tiny_run(seed, 1.0, val_ids, lr=LOWER_LR)}
            elif args.mechanism_arms:
                arms = {
                    "early_clip": tiny_run(seed, 0.0, val_ids, clip_first=EARLY_STEPS),
                    "constant_scale": tiny_run(seed, 0.0, val_ids, scale=CONSTANT_SCALE),
                }
            elif args.unclipped_lr:
                arms = {
                    "unclipped_at_lr": tiny_run(
                        seed, 0.0, val_ids, lr=args.unclipped_lr, warmup_steps=args.warmup_steps
                    )
                }
            elif args.steps:
                arms = {
                    "clipped": tiny_run(seed, 1.0, val_ids, steps=args.steps),
                    "unclipped": tiny_run(seed, 0.0, val_ids, steps=args.steps),
                }
            else:
                arms = {
                    "clipped": tiny_run(seed, 1.0, val_ids),
                    "unclipped": tiny_run(seed, 0.0, val_ids),
                    "unclipped_lower_lr": tiny_run(seed, 0.0, val_ids, lr=LOWER_LR),
                }
            result["runs"][str(seed)] = arms
            save(result)
        result["wall_time_s"] = round(time.perf_counter() - t0, 1)
        return result

    command = command_line("tools/clip_seeds.py", argv)
    return run_sweep_cli(p, args.out, command, sweep, overwrite=args.overwrite)


if __name__ == "__main__":
    main()
