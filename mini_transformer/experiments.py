"""The command lines of the chapter-3 lab and the chapter-5 sweep, and merging their results.

Repository tooling, not reader API: the experiments themselves are
:mod:`mini_transformer.lab` and :mod:`mini_transformer.stability`; this module turns them
into ``python -m mini_transformer.lab`` and ``python -m mini_transformer.stability`` with
the package's command-line rules (:mod:`mini_transformer.cli`): every argument and the
output path checked before any work, the JSON rewritten after every run, exit status 2 for
bad input, 1 for a failure while running.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time

import torch

from . import lab, stability
from .cli import (
    check_output_file,
    non_negative_int,
    positive_float,
    positive_int,
    run_cli,
    write_json,
)
from .data import SYNTHETIC_TASKS
from .lab import SCHEMES, LabConfig, run_lab
from .stability import run_sweep

__all__ = ["merge_results", "lab_main", "stability_main"]


def merge_results(parts: list[dict]) -> dict:
    """Merge lab results that ran the same configuration on disjoint sets of schemes.

    The sweep can be split across processes (``--schemes``) and merged afterwards
    (``--merge``). Schemes come out in the order of :data:`~mini_transformer.lab.SCHEMES`;
    ``commands`` lists the command of every part; ``wall_time_s`` is the longest part (the
    parts ran side by side) and ``cpu_time_s`` their sum.
    """
    if not parts:
        raise ValueError("parts must hold at least one lab result, got none")
    base = parts[0]

    def shared(part: dict) -> dict:  # what must agree; per-scheme learning rates may differ
        config = {k: v for k, v in part["config"].items() if k != "scheme_lr"}
        return {k: part[k] for k in ("seeds", "steps", "eval_lengths", "torch_version")} | {
            "config": config
        }

    for part in parts[1:]:
        for key, value in shared(part).items():
            if value != shared(base)[key]:
                raise ValueError(f"cannot merge lab results that differ in {key!r}")
    seen = [s for part in parts for s in part["schemes"]]
    if len(seen) != len(set(seen)):
        raise ValueError(f"parts must hold disjoint schemes, got {seen}")
    results = {s: part["results"][s] for part in parts for s in part["schemes"]}
    schemes = [s for s in SCHEMES if s in results]
    learned = [p["learned_embedding"] for p in parts if p["learned_embedding"] is not None]
    scheme_lr = {
        s: lr
        for p in parts
        for s, lr in p["config"].get("scheme_lr", {}).items()
        if s in p["schemes"]
    }
    merged = dict(base)
    merged |= {
        "config": base["config"] | {"scheme_lr": scheme_lr},
        "command": " && ".join(p["command"] for p in parts),
        "commands": [p["command"] for p in parts],
        "schemes": schemes,
        "results": {s: results[s] for s in schemes},
        "learned_embedding": learned[0] if learned else None,
        "wall_time_s": max(p["wall_time_s"] for p in parts),
        "cpu_time_s": round(sum(p.get("cpu_time_s", p["wall_time_s"]) for p in parts), 1),
        "parts": len(parts),
    }
    return merged


def _scheme_lr(text: str) -> tuple[str, float]:
    scheme, sep, value = text.partition("=")
    if not sep or scheme not in SCHEMES:
        raise argparse.ArgumentTypeError(
            f"expected SCHEME=LR with SCHEME in {SCHEMES}, got {text!r}"
        )
    try:
        lr = float(value)
    except ValueError:
        lr = math.nan
    if not (lr > 0 and math.isfinite(lr)):
        raise argparse.ArgumentTypeError(
            f"expected SCHEME=LR with a positive number LR, got {text!r}"
        )
    return scheme, lr


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mini_transformer.lab", description=lab.__doc__.split("\n")[0]
    )
    p.add_argument("--out", default=None, help="write the JSON results here (default: print only)")
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=positive_int, default=LabConfig.steps)
    p.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=SCHEMES)
    p.add_argument("--task", default=LabConfig.task, choices=sorted(SYNTHETIC_TASKS))
    p.add_argument("--train-length", type=positive_int, default=LabConfig.train_length)
    p.add_argument("--offset", type=positive_int, default=LabConfig.offset)
    p.add_argument("--vocab-size", type=positive_int, default=LabConfig.vocab_size)
    p.add_argument("--batch-size", type=positive_int, default=LabConfig.batch_size)
    p.add_argument("--lr", type=positive_float, default=LabConfig.lr)
    p.add_argument("--eval-samples", type=positive_int, default=LabConfig.eval_samples)
    p.add_argument(
        "--eval-lengths",
        type=positive_int,
        nargs="+",
        default=None,
        metavar="T",
        help="lengths to evaluate at (default: L, 1.5 L, 2 L); the model's "
        "block_size becomes the longest, so a learned table gets that many rows",
    )
    p.add_argument(
        "--scheme-lr",
        type=_scheme_lr,
        nargs="+",
        default=[],
        metavar="SCHEME=LR",
        help="per-scheme peak learning rates, e.g. alibi=0.01 (others use --lr)",
    )
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads (1 = bit-stable)")
    p.add_argument(
        "--merge",
        nargs="+",
        default=None,
        metavar="JSON",
        help="merge these result files (disjoint schemes) instead of training",
    )
    p.add_argument(
        "--attach",
        nargs="+",
        default=[],
        metavar="KEY=JSON",
        help="with --merge: also store these result files under KEY "
        "(e.g. lr_check=lr.json, a side experiment)",
    )
    return p


def _read_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not a JSON file ({err})") from None


def _merge(args, command: str) -> dict:
    result = merge_results([_read_json(path) for path in args.merge])
    result["merge_command"] = command
    for item in args.attach:
        key, sep, path = item.partition("=")
        if not sep or not key or key in result:
            raise ValueError(f"--attach expects KEY=JSON with a new KEY, got {item!r}")
        result[key] = _read_json(path)
    return result


def _sweep(args, command: str) -> dict:
    cfg = LabConfig(
        task=args.task,
        vocab_size=args.vocab_size,
        offset=args.offset,
        train_length=args.train_length,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        eval_samples=args.eval_samples,
        scheme_lr=dict(args.scheme_lr),
        eval_lengths=args.eval_lengths,
    )
    torch.set_num_threads(args.threads)
    head = {"command": command}
    save = (lambda partial: write_json(head | partial, args.out)) if args.out else None
    cpu0 = time.process_time()
    result = head | run_lab(cfg, args.seeds, args.schemes, on_progress=save)
    result["cpu_time_s"] = round(time.process_time() - cpu0, 1)
    return result


def lab_main(argv: list[str] | None = None) -> dict:
    """Command line: ``python -m mini_transformer.lab --out FILE [--seeds 0 1 2] [--steps N]``.

    ``--schemes`` runs a subset of the schemes, ``--scheme-lr alibi=0.01`` gives one scheme
    its own learning rate, and ``--merge A.json B.json --out C.json`` merges parts that ran
    the same configuration on disjoint schemes (see :func:`merge_results`);
    ``--attach KEY=D.json`` then stores a side experiment's result under ``KEY``. Every
    argument and ``--out`` are checked before any training; the JSON is rewritten after
    every run (``"complete": false`` until the end). Returns the result.
    """
    p = _parser()
    args = p.parse_args(argv)
    argv_used = sys.argv[1:] if argv is None else argv
    command = "python -m mini_transformer.lab " + shlex.join(argv_used)

    def body() -> dict:
        if args.out:
            check_output_file(args.out)
        if args.attach and not args.merge:
            raise ValueError("--attach only works together with --merge")
        result = _merge(args, command) if args.merge else _sweep(args, command)
        if args.out:
            write_json(result, args.out)
            print(f"wrote {args.out} ({result['wall_time_s']} s)")
        return result

    return run_cli(p, body)


def stability_main(argv: list[str] | None = None) -> dict:
    """Command line: run the sweep and write the JSON file (rewritten after every run).

    Every argument and ``--out`` are checked before any work: bad input exits with
    status 2 and a usage message; a failure while writing exits with status 1.
    """
    p = argparse.ArgumentParser(
        prog="python -m mini_transformer.stability", description=stability.__doc__.split("\n\n")[0]
    )
    p.add_argument("--out", default="book/data/05_stability.json")
    p.add_argument("--steps", type=positive_int, default=300)
    p.add_argument("--lrs", type=positive_float, nargs="+", default=[1e-3, 3e-3, 1e-2, 3e-2])
    p.add_argument("--warmups", type=non_negative_int, nargs="+", default=[0, 100])
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    args = p.parse_args(argv)

    def body() -> dict:
        check_output_file(args.out)
        torch.set_num_threads(1)
        res = run_sweep(
            lrs=tuple(args.lrs),
            warmups=tuple(args.warmups),
            steps=args.steps,
            seeds=tuple(args.seeds),
            on_progress=lambda r: write_json(r, args.out),
        )
        write_json(res, args.out)
        print(f"wrote {args.out} in {res['wall_time_s']} s")
        return res

    return run_cli(p, body)
