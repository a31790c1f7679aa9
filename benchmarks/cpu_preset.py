"""Train the ``cpu`` preset as shipped and report its wall time and held-out loss.

Runs ``python -m mini_transformer.train --preset cpu --out DIR`` (default threads: one per
physical core; default precision) ``--runs`` times, each in a fresh folder, timing the whole
command (interpreter start, data, training, evaluations, checkpoints). Then, outside the
timed part, it measures the held-out loss of the checkpoint the run keeps (``best.pt``,
the one ``export`` commits): the mean next-character loss over the *whole* held-out text
(the plays in ``mini_transformer.data.VAL_WORKS``) in consecutive, non-overlapping windows
of the model's own context, in float32: ``mini_transformer.train.estimate_loss`` with
``seed=None`` (every window in order, no sampling; the number ``model.evaluate`` gave).

Usage (on a quiet machine; the load average is printed and recorded, because other work
on the cores inflates the wall time)::

    python benchmarks/cpu_preset.py                       # 3 runs, median
    python benchmarks/cpu_preset.py --runs 1 --json benchmarks/results/cpu_preset.json
    python benchmarks/cpu_preset.py --keep runs/cpu       # keep the last run's folder
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from mini_transformer.checkpoints import check_output_dir, check_output_file
from mini_transformer.cli import positive_int, run_cli
from mini_transformer.data import CharTokenizer, load_corpus
from mini_transformer.hardware import where_it_ran
from mini_transformer.train import estimate_loss, load_model, read_log

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sweep_cli import write_json  # noqa: E402  (tools/, beside the package)


def held_out_loss(ckpt: Path) -> float:
    """Mean next-character loss (nats) over the whole held-out text, own context, fp32."""
    model, _, _ = load_model(ckpt)
    tok = CharTokenizer.from_corpus()
    val_ids = tok.encode(load_corpus("val"))
    return estimate_loss(model, val_ids, n_batches=None, batch_size=32, seed=None)


def one_run(folder: Path, extra: list[str]) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "mini_transformer.train",
        "--preset",
        "cpu",
        "--out",
        str(folder),
        "--no-progress",
        *extra,
    ]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise RuntimeError(f"training failed (exit {proc.returncode}): {last}")
    log = read_log(folder / "metrics.jsonl")
    threads = torch.get_num_threads()
    torch.set_num_threads(log[0]["threads"])
    loss = held_out_loss(folder / "best.pt")
    where = where_it_ran("cpu")  # with the training run's thread count
    torch.set_num_threads(threads)
    end = log[-1]
    return {
        "command": " ".join(["python", *cmd[1:]]),
        "wall_s": wall,
        "train_wall_s_logged": end["wall_time_s"],
        "held_out_loss": loss,
        "steps": end["step"],
        "threads": log[0]["threads"],
        "precision": log[0].get("precision", log[0]["dtype"]),
        "tokens_per_s": log[0]["tokens_per_step"] * end["step"] / end["wall_time_s"],
        "loadavg_1min_before_after": [load, os.getloadavg()[0]],
        "where_it_ran": where,
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        prog="python benchmarks/cpu_preset.py", description=__doc__.split("\n")[0]
    )
    p.add_argument("--runs", type=positive_int, default=3)
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--overwrite", action="store_true", help="--json may be a committed result")
    p.add_argument("--keep", help="copy the last run's folder here")
    p.add_argument(
        "extra",
        nargs="*",
        help="extra arguments for the training command "
        "(after --), e.g. -- --precision bf16; none for the preset as shipped",
    )
    args = p.parse_args(argv)

    def check() -> None:
        if args.json:
            check_output_file(args.json, overwrite=args.overwrite)
        if args.keep:
            check_output_dir(args.keep, overwrite=True)

    return run_cli(p, check, lambda _: _run(args))


def _run(args) -> dict:
    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            rec = one_run(Path(tmp) / "cpu", args.extra)
            runs.append(rec)
            print(
                f"run {i + 1}: wall {rec['wall_s']:.1f} s "
                f"(training loop {rec['train_wall_s_logged']:.1f} s), "
                f"held-out loss {rec['held_out_loss']:.4f}, {rec['threads']} thread(s), "
                f"{rec['precision']}, load {rec['loadavg_1min_before_after'][0]:.2f} -> "
                f"{rec['loadavg_1min_before_after'][1]:.2f}",
                flush=True,
            )
            if args.keep and i == args.runs - 1:
                shutil.copytree(Path(tmp) / "cpu", args.keep, dirs_exist_ok=True)
    summary = {
        "median_wall_s": statistics.median(r["wall_s"] for r in runs),
        "median_held_out_loss": statistics.median(r["held_out_loss"] for r in runs),
        "runs": runs,
    }
    print(
        f"median of {len(runs)}: wall {summary['median_wall_s']:.1f} s, "
        f"held-out loss {summary['median_held_out_loss']:.4f}"
    )
    if args.json:
        write_json(summary, args.json)
    return summary


if __name__ == "__main__":
    main()
