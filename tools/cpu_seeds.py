"""The ``cpu`` preset's run on other seeds (chapter 6, section 6.5's "One run, one seed").

The chapter's shipped ``cpu`` model is one run (seed 0). A reviewer asked which of its findings
are the recipe's and which are seed 0's: is it behind the character 6-gram on every seed? This
trains the ``cpu`` preset (bf16 autocast, as the shipped run; the preset's 1,630 steps) on other
seeds and scores each final model on the whole held-out text in windows of the preset's
``T = 128`` (``estimate_loss(seed=None)``, as section 6.5 scores the shipped model), after
rounding its weights to float16 and back as the shipped checkpoint was stored. It stores, per
seed, that whole-text loss and the log's last sampled evaluation.

Run (about 1.2 min a seed on 1 thread of a quiet 2-core AMD EPYC with avx512_bf16)::

    python tools/cpu_seeds.py --first-seed 1 --seeds 4 \\
        --out mini_transformer/results/06_cpu_seeds.json
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from sweep_cli import command_line, non_negative_int, provenance, run_sweep_cli

from mini_transformer import data, train
from mini_transformer.cli import positive_int
from mini_transformer.hardware import where_it_ran


def cpu_run(seed: int, val_ids: torch.Tensor) -> dict:
    """One ``cpu`` preset run: its log's last held-out loss and its final weights' whole-text
    loss (weights rounded to float16, as the shipped checkpoint stores them)."""
    cfg = train.get_preset("cpu", device="cpu", progress=False, precision="bf16", seed=seed)
    built = []
    with tempfile.TemporaryDirectory() as tmp:
        train.train(cfg, tmp, argv=[], setup_hook=built.append)  # keeps the model object
        log = train.read_log(Path(tmp) / "metrics.jsonl")
    evals = [r for r in log if r["event"] == "eval"]
    model = built[0].eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    whole = train.estimate_loss(model, val_ids, n_batches=None, batch_size=16, seed=None)
    return {
        "log_val_loss": round(evals[-1]["val_loss"], 6),
        "log_train_loss": round(evals[-1]["train_loss"], 6),
        "whole_text_loss": round(whole, 6),
        "steps": evals[-1]["step"],
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", type=positive_int, default=4, help="how many seeds (default 4)")
    p.add_argument("--first-seed", type=non_negative_int, default=1, help="default 1")
    p.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)

    def sweep(save) -> dict:
        result = provenance(
            preset="cpu, precision bf16, device cpu; whole held-out text, T = 128, float16 weights",
            where_it_ran=where_it_ran("cpu"),
            torch_threads=torch.get_num_threads(),
            runs={},
        )
        tok = data.CharTokenizer.from_corpus()
        val_ids = tok.encode(data.load_corpus("val"))
        t0 = time.perf_counter()
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            result["runs"][str(seed)] = cpu_run(seed, val_ids)
            save(result)
        result["wall_time_s"] = round(time.perf_counter() - t0, 1)
        return result

    command = command_line("tools/cpu_seeds.py", argv)
    return run_sweep_cli(p, args.out, command, sweep, overwrite=args.overwrite)


if __name__ == "__main__":
    main()
