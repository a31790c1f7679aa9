"""Train the ``cpu`` preset as shipped, interleaved with other arms, and report wall times and
held-out losses.

Each run is ``python -m mini_transformer.train --preset cpu --out DIR`` (default threads: one per
physical core; default precision) in a fresh folder, timed as a whole process (interpreter
start, data, the precision measurement of ``--precision auto``, training, evaluations,
checkpoints). The arms run interleaved, the order alternating round by round (A B, B A, A B,
...), so a change in the machine's load falls on both; ``/proc/loadavg`` is recorded before and
after every run, because other work on the cores inflates a wall time. Arms:

- ``preset``: the ``cpu`` preset with the extra arguments (after ``--``), or with
  ``--precisions fp32 bf16``, one arm per forced precision (e.g. ``-- --steps 200``);
- ``nanogpt`` (with ``--nanogpt DIR``, a checkout of karpathy/nanoGPT): the CPU recipe of
  nanoGPT's README (``python train.py config/train_shakespeare_char.py --device=cpu
  --compile=False --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4
  --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0``), on the same
  split and characters as ours (our tokenizer writes its ``train.bin``/``val.bin``).

Outside the timed part it measures the held-out loss of the checkpoint each run keeps (ours:
``best.pt``, the one ``export`` commits; nanoGPT's: ``ckpt.pt``, its best): the mean
next-character loss over the *whole* held-out text (the plays in
``mini_transformer.data.VAL_WORKS``) in consecutive, non-overlapping windows of the model's own
context, in float32 (``mini_transformer.train.estimate_loss`` with ``seed=None``).

Usage (the load average says how quiet the machine was)::

    python benchmarks/cpu_preset.py                                   # 3 runs, median
    python benchmarks/cpu_preset.py --nanogpt ../nanoGPT --json benchmarks/results/x.json
    python benchmarks/cpu_preset.py --precisions fp32 bf16 -- --steps 200 --eval-interval 200
    python benchmarks/cpu_preset.py --threads 1 --nanogpt ../nanoGPT   # a busy machine: CPU time

With ``--threads 1`` the CPU time of each process is recorded beside its wall time: it counts
what the run itself computed, so it stays comparable on a machine busy with other work (cache
sharing still inflates it a little), where two threads' wall time does not.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import pickle
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from mini_transformer.checkpoints import check_output_dir, check_output_file
from mini_transformer.cli import positive_int, run_cli
from mini_transformer.data import CharTokenizer, load_corpus
from mini_transformer.hardware import cpu_name, where_it_ran
from mini_transformer.train import estimate_loss, load_model, read_log

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sweep_cli import write_json  # noqa: E402  (tools/, beside the package)

ROOT = Path(__file__).resolve().parents[1]
OUT = {"capture_output": True, "text": True}

#: nanoGPT's README recipe for a CPU ("I only have a macbook"), after its config file.
NANOGPT_RECIPE = (
    "--device=cpu --compile=False --eval_iters=20 --log_interval=1 --block_size=64 "
    "--batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 "
    "--lr_decay_iters=2000 --dropout=0.0"
).split()

#: The CPU flags that decide what a CPU can multiply natively (recorded with every result).
FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "amx_int8")


def _val_ids() -> torch.Tensor:
    return CharTokenizer.from_corpus().encode(load_corpus("val"))


def held_out_loss(ckpt: Path) -> float:
    """Mean next-character loss (nats) over the whole held-out text, own context, fp32."""
    model, _, _ = load_model(ckpt)
    return estimate_loss(model, _val_ids(), n_batches=None, batch_size=32, seed=None)


def nanogpt_held_out_loss(work: Path) -> float:
    """The same measure for nanoGPT's ``ckpt.pt`` (its ``GPT``, from its own ``model.py``)."""
    spec = importlib.util.spec_from_file_location("nanogpt_model", work / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ckpt = torch.load(work / "out-shakespeare-char" / "ckpt.pt", "cpu", weights_only=True)
    model = module.GPT(module.GPTConfig(**ckpt["model_args"]))
    state = {k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()}
    model.load_state_dict(state)
    return estimate_loss(model, _val_ids(), n_batches=None, batch_size=32, seed=None)


def _nanogpt_workdir(nanogpt: Path, tmp: Path) -> Path:
    """nanoGPT's files and our split, written as its ``data/shakespeare_char`` expects."""
    work = tmp / "nanogpt"
    (work / "config").mkdir(parents=True)
    for name in ("train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py"):
        shutil.copy(nanogpt / name, work / name)
    data = work / "data" / "shakespeare_char"
    data.mkdir(parents=True)
    tok = CharTokenizer.from_corpus()
    for split in ("train", "val"):
        ids = tok.encode(load_corpus(split)).numpy().astype(np.uint16)
        ids.tofile(data / f"{split}.bin")
    itos = dict(enumerate(tok.decode(torch.arange(tok.vocab_size))))
    meta = {"vocab_size": tok.vocab_size, "itos": itos, "stoi": {c: i for i, c in itos.items()}}
    (data / "meta.pkl").write_bytes(pickle.dumps(meta))
    return work


def _timed(cmd: list[str], threads: int | None, cwd: Path | None = None) -> dict:
    """Wall time, the process's CPU time (user + system: with one thread, what it ran however
    busy the machine was) and the load average (1, 5, 15 min) before and after."""
    env = os.environ | ({"OMP_NUM_THREADS": str(threads)} if threads else {})
    load, cpu = os.getloadavg(), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise RuntimeError(f"{cmd[2:4]} failed (exit {proc.returncode}): {last}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime
    loads = [round(x, 2) for x in (*load, *os.getloadavg())]
    return {"wall_s": wall, "cpu_s": cpu_s, "loadavg_before_after": loads}


def run_preset(folder: Path, extra: list[str], threads: int | None) -> dict:
    cmd = [sys.executable, "-m", "mini_transformer.train", "--preset", "cpu"]
    cmd += ["--out", str(folder), "--no-progress", *extra]
    cmd += ["--threads", str(threads)] if threads else []
    timed = _timed(cmd, threads)
    log = read_log(folder / "metrics.jsonl")
    threads = torch.get_num_threads()
    torch.set_num_threads(log[0]["threads"])
    loss = held_out_loss(folder / "best.pt")
    torch.set_num_threads(threads)
    end = log[-1]
    return {
        "command": " ".join(["python", *cmd[1:]]),
        **timed,
        "train_wall_s_logged": end["wall_time_s"],
        "held_out_loss": loss,
        "steps": end["step"],
        "threads": log[0]["threads"],
        "precision": log[0]["precision"],
        "precision_step_s": log[0].get("precision_step_s"),
        "tokens_per_s": log[0]["tokens_per_step"] * end["step"] / end["wall_time_s"],
    }


def run_nanogpt(work: Path, threads: int | None) -> dict:
    shutil.rmtree(work / "out-shakespeare-char", ignore_errors=True)
    cmd = [sys.executable, "train.py", "config/train_shakespeare_char.py", *NANOGPT_RECIPE]
    timed = _timed(cmd, threads, cwd=work)
    env = f"OMP_NUM_THREADS={threads} " if threads else ""
    return {
        "command": env + " ".join(["python", *cmd[1:]]),
        **timed,
        "held_out_loss": nanogpt_held_out_loss(work),
        "steps": 2000,
        "threads": threads or torch.get_num_threads(),
    }


def machine() -> dict:
    """Commit, date, CPU model and flags, library versions: what every result file carries."""
    flags = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if "flags" in ln), "")
    git = ["git", "-C", str(ROOT)]
    commit = subprocess.run([*git, "rev-parse", "HEAD"], **OUT)
    dirty = subprocess.run([*git, "status", "--porcelain", "mini_transformer"], **OUT)
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit.stdout.strip() + (" (package modified)" if dirty.stdout.strip() else ""),
        "cpu_model": cpu_name(),
        "cpu_flags": {f: f in flags.split() for f in FLAGS},
        "where_it_ran": where_it_ran("cpu"),
    }


def _spread(values: list[float]) -> dict:
    q = np.percentile(values, [25, 50, 75]).tolist() if len(values) >= 4 else None
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "iqr": None if q is None else q[2] - q[0],
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        prog="python benchmarks/cpu_preset.py", description=__doc__.split("\n")[0]
    )
    p.add_argument("--runs", type=positive_int, default=3, help="runs of each arm")
    p.add_argument("--nanogpt", help="a checkout of karpathy/nanoGPT: its CPU recipe as an arm")
    p.add_argument("--precisions", nargs="+", choices=("auto", "fp32", "bf16"))
    p.add_argument("--threads", type=positive_int, help="threads of every arm (default: theirs)")
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--overwrite", action="store_true", help="--json may be a committed result")
    p.add_argument("--keep", help="copy the last preset run's folder here")
    p.add_argument(
        "extra",
        nargs="*",
        help="extra arguments for the training command "
        "(after --), e.g. -- --steps 200; none for the preset as shipped",
    )
    args = p.parse_args(argv)

    def check() -> None:
        if args.json:
            check_output_file(args.json, overwrite=args.overwrite)
        if args.keep:
            check_output_dir(args.keep, overwrite=True)
        if args.nanogpt and not (Path(args.nanogpt) / "train.py").is_file():
            raise FileNotFoundError(f"--nanogpt {args.nanogpt}: no train.py there")

    return run_cli(p, check, lambda _: _run(args, argv))


def _run(args, argv) -> dict:
    arms = {"preset": args.extra} if not args.precisions else {}
    for precision in args.precisions or ():
        arms[precision] = [*args.extra, "--precision", precision]
    names = [*arms, *(["nanogpt"] if args.nanogpt else [])]
    runs: dict[str, list[dict]] = {name: [] for name in names}
    head = {"benchmark": " ".join(["python", "benchmarks/cpu_preset.py", *(argv or sys.argv[1:])])}
    head |= machine()
    with tempfile.TemporaryDirectory() as tmp:
        work = _nanogpt_workdir(Path(args.nanogpt), Path(tmp)) if args.nanogpt else None
        for i in range(args.runs):
            for name in names if i % 2 == 0 else names[::-1]:
                folder = Path(tmp) / f"{name}-{i}"
                if name == "nanogpt":
                    rec = run_nanogpt(work, args.threads)
                else:
                    rec = run_preset(folder, arms[name], args.threads)
                runs[name].append(rec)
                print(
                    f"round {i + 1} {name}: wall {rec['wall_s']:.1f} s, CPU {rec['cpu_s']:.1f} s, "
                    f"held-out loss "
                    f"{rec['held_out_loss']:.4f}, {rec.get('precision', 'fp32')}, "
                    f"load {rec['loadavg_before_after'][0]} -> {rec['loadavg_before_after'][3]}",
                    flush=True,
                )
                if args.keep and name != "nanogpt" and i == args.runs - 1:
                    shutil.copytree(folder, args.keep, dirs_exist_ok=True)
                if args.json:  # after every run: an interrupted benchmark keeps what it measured
                    write_json(_summary(head, runs, done=False), args.json)
    summary = _summary(head, runs, done=True)
    for name, arm in summary["arms"].items():
        w, loss = arm["wall_s"], arm["held_out_loss"]
        print(
            f"{name}: wall median {w['median']:.1f} s (min {w['min']:.1f}, max {w['max']:.1f}), "
            f"held-out loss median {loss['median']:.4f}"
        )
    if args.json:
        write_json(summary, args.json)
    return summary


def _summary(head: dict, runs: dict[str, list[dict]], done: bool) -> dict:
    """Each arm's median, min, max (and IQR from 4 runs) of wall time and held-out loss; with
    two arms, each round's ratio of their wall times (the pair ran back to back)."""
    summary = {**head, "complete": done, "arms": {}, "runs": runs}
    for name, recs in ((n, r) for n, r in runs.items() if r):
        summary["arms"][name] = {
            key: _spread([r[key] for r in recs]) for key in ("wall_s", "cpu_s", "held_out_loss")
        }
    names = list(runs)
    if len(names) == 2 and (pairs := list(zip(*runs.values(), strict=False))):
        for key in ("wall_s", "cpu_s"):
            ratios = [a[key] / b[key] for a, b in pairs]
            summary[f"{key}_ratio_{names[0]}_over_{names[1]}"] = _spread(ratios)
    return summary


if __name__ == "__main__":
    main()
