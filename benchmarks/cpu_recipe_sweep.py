"""Held-out loss reached by candidate ``cpu`` recipes at a fixed compute budget.

Each candidate (a shape, a learning rate, a number of steps) is trained from scratch with
:func:`mini_transformer.train.train` on one thread; at the end, the held-out loss is
measured as the issue defines it: the mean next-character loss over the *whole* held-out
text in consecutive, non-overlapping windows of the model's own context
(:func:`mini_transformer.train.estimate_loss` with ``seed=None``: every window in order,
no sampling; the number ``model.evaluate`` gave). Losses are deterministic (seeded), so they can
be compared across candidates even on a loaded machine; the per-run wall and CPU times
recorded beside them are not comparable (the machine is shared) and are kept only as a
record. Per-step cost is measured separately (``benchmarks/train_step.py``); the budget of
each candidate is chosen in training FLOPs (``flops_per_token * tokens``).

Usage::

    python benchmarks/cpu_recipe_sweep.py --out benchmarks/results/cpu_recipe_sweep.json \
        --candidates '[{"name": "ref", "steps": 690}, {"name": "L3", "n_layers": 3, "steps": 910}]'

Each candidate is a dict of :func:`mini_transformer.train.get_preset` overrides of the
``cpu`` preset plus a ``name`` (and ``"held_out": false`` to skip the final full held-out
evaluation, for short runs compared by their logged curve). Results are appended to
``--out`` as each run finishes (runs whose name is already there are skipped, so an
interrupted sweep can be continued).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from mini_transformer.data import CharTokenizer, load_corpus
from mini_transformer.hardware import where_it_ran
from mini_transformer.train import estimate_loss, get_preset, load_model, read_log, train

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sweep_cli import write_json  # noqa: E402  (tools/, beside the package)


def run_one(cand: dict, threads: int) -> dict:
    cand = dict(cand)
    name = cand.pop("name")
    with_held_out = cand.pop("held_out", True)  # False: only the log's curve (short runs)
    torch.set_num_threads(threads)
    cfg = get_preset("cpu", progress=False, peak_flops=1.0, threads=threads, **cand)
    load0, cpu0, t0 = os.getloadavg()[0], time.process_time(), time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        result = train(cfg, tmp, argv=["cpu_recipe_sweep", name])
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        log = read_log(Path(tmp) / "metrics.jsonl")
        model, _, _ = load_model(Path(tmp) / "last.pt")
    tok = CharTokenizer.from_corpus()
    val_ids = tok.encode(load_corpus("val"))
    held_out = (
        estimate_loss(model, val_ids, n_batches=None, batch_size=32, seed=None)
        if with_held_out
        else None
    )
    start = log[0]
    return {
        "name": name,
        "overrides": cand,
        "model_config": start["model_config"],
        "train_config": start["train_config"],
        "precision": start.get("precision", start.get("dtype")),
        "n_parameters": start["n_parameters"],
        "flops_per_token": start["flops_per_token"],
        "tokens_per_step": start["tokens_per_step"],
        "train_flops": start["flops_per_token"] * start["tokens_per_step"] * cfg.steps,
        "curve": [
            {"step": r["step"], "train_loss": r["train_loss"], "val_loss": r["val_loss"]}
            for r in log
            if r["event"] == "eval"
        ],
        "held_out_loss": held_out,
        "final_val_estimate": result["val_loss"],
        "threads": threads,
        "wall_s_loaded": wall,
        "cpu_s": cpu,
        "loadavg_1min_start_end": [load0, os.getloadavg()[0]],
        "where_it_ran": where_it_ran("cpu"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--candidates", required=True, help="JSON list of override dicts with 'name'")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    cands = json.loads(args.candidates)
    out = Path(args.out)
    data = (
        json.loads(out.read_text())
        if out.exists()
        else {
            "what": __doc__.split("\n")[0],
            "held_out_loss": "mean next-character loss over the whole held-out text, "
            "non-overlapping windows of the model's context (train.estimate_loss, seed=None)",
            "device": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
            "note": "wall/CPU times were taken on a shared, loaded 2-core machine: a record, "
            "not a measurement; compare losses, and take per-step costs from train_step.py",
            "commands": [],
            "runs": [],
        }
    )
    data["commands"].append(" ".join([sys.executable.split("/")[-1], *sys.argv]))
    done = {r["name"] for r in data["runs"]}
    for cand in cands:
        if cand["name"] in done:
            continue
        rec = run_one(cand, args.threads)
        data["runs"].append(rec)
        write_json(data, out)  # atomically: an interrupted sweep keeps the file whole
        print(
            f"{rec['name']}: held-out {rec['held_out_loss']}, "
            f"{rec['train_flops'] / 1e12:.2f} TFLOP, {rec['wall_s_loaded']:.0f} s (loaded)",
            flush=True,
        )


if __name__ == "__main__":
    main()
