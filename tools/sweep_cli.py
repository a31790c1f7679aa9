"""What the sweeps in ``tools/`` and the benchmarks share on top of the training command line's
rules (:func:`mini_transformer.cli.run_cli`): two more argument types, strict JSON written
atomically, and a sweep that writes its result after every run, so an interrupted sweep
keeps what it finished."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from mini_transformer.checkpoints import atomic_write, check_output_file, json_safe
from mini_transformer.cli import _number, printable, run_cli


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _number(text, int, lambda v: v >= 0, "an integer >= 0")


def probability(text: str) -> float:
    """argparse type: a number in [0, 1) (a dropout rate)."""
    return _number(text, float, lambda v: 0 <= v < 1, "a probability in [0, 1)")


def write_json(obj: dict, path: str | Path) -> Path:
    """``obj`` as indented strict JSON (NaN and infinities as ``null``), written atomically."""
    return atomic_write(path, json.dumps(json_safe(obj), indent=1, allow_nan=False) + "\n")


def provenance(**extra) -> dict:
    """The header of a committed result: the commit the code came from (marked
    ``+uncommitted`` if tracked files differ from it), the UTC date, the 1-minute load average
    before the run (a busy machine slows timed runs), then ``extra`` in its order."""
    git = ["git", "-C", str(Path(__file__).resolve().parent)]
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "status", "--porcelain", "-uno"], capture_output=True, text=True)
    return {
        "commit": commit.stdout.strip() + ("+uncommitted" if dirty.stdout.strip() else ""),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average_1min_before": os.getloadavg()[0],
    } | extra


def command_line(prog: str, argv: list[str] | None) -> str:
    """The command as it was typed (``argv``, or ``sys.argv``), for a result's ``"command"``."""
    return f"{prog} " + shlex.join(sys.argv[1:] if argv is None else argv)


def run_sweep_cli(
    parser: argparse.ArgumentParser,
    out: str | Path,
    command: str,
    sweep: Callable[[Callable[[dict], None]], dict],
    *,
    overwrite: bool = False,
) -> dict:
    """:func:`run_cli` for a sweep that writes one JSON file.

    Checks ``out`` before any work, runs ``sweep(save)`` on one torch thread (``save``
    rewrites ``out`` with the result so far), writes the result with ``"command"`` first and
    the 1-minute load average after the run last (with :func:`provenance`'s "before", it says
    how busy the machine was while the timed runs ran).
    """
    import torch

    head = {"command": command}

    def work(_) -> dict:
        torch.set_num_threads(1)
        result = head | sweep(lambda so_far: write_json(head | so_far, out))
        result["load_average_1min_after"] = os.getloadavg()[0]
        write_json(result, out)
        print(printable(f"wrote {out} in {result['wall_time_s']} s"))
        return result

    return run_cli(parser, lambda: check_output_file(out, overwrite=overwrite), work)


def sweep_parser(prog: str, doc: str) -> argparse.ArgumentParser:
    """A sweep's arguments: ``--out`` and ``--overwrite``; each tool adds its own to it.
    The tests parse the command stored in a result with the tool's parser."""
    p = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    return p


def sweep_main(
    prog: str,
    parser: argparse.ArgumentParser,
    argv: list[str] | None,
    sweep: Callable[[argparse.Namespace, Callable[[dict], None]], dict],
) -> dict:
    """A sweep tool's ``main``: parse ``argv`` (bad input exits with status 2 before any
    work), then :func:`run_sweep_cli` runs ``sweep(args, save)`` and writes ``--out``."""
    args = parser.parse_args(argv)
    return run_sweep_cli(
        parser,
        args.out,
        command_line(prog, argv),
        lambda save: sweep(args, save),
        overwrite=args.overwrite,
    )


def run_rows(seeds, rows, run_one: Callable, result: Callable, runs: list, verbose=True,
             on_progress=None) -> dict:  # fmt: skip
    """Every ``(seed, row)`` through ``run_one(seed, row) -> (final_loss, losses)``: each run
    appended to ``runs`` with its wall time, the partial ``result(complete=False)`` handed to
    ``on_progress`` after each (the JSON is rewritten as the sweep goes), and
    ``result(complete=True)`` returned at the end."""
    for seed in seeds:
        for row in rows:
            t1 = time.perf_counter()
            final, losses = run_one(seed, row)
            wall = round(time.perf_counter() - t1, 2)
            runs.append({"row": row, "seed": seed, "final_loss": final, "losses": losses})
            runs[-1]["wall_s"] = wall
            if verbose:
                print(f"seed={seed} {row}: final={final} ({wall} s)", flush=True)
            if on_progress is not None:
                on_progress(result(complete=False))
    return result(complete=True)
