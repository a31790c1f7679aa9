"""What every command line does the same way: the training command line and the tools/ sweeps.

- Arguments and the output path are checked **before** any work: a bad one exits with
  status 2 and a usage message, never a traceback (:func:`run_cli`, argparse types).
- A failure while running (disk full, an unreadable file) exits with status 1 and one line
  on stderr; temporary files are removed (:func:`write_json`); Ctrl-C exits with 130.
- Results are written as they come (:func:`write_json` after every run of a sweep), so an
  interrupted sweep keeps what it finished.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "positive_int",
    "non_negative_int",
    "positive_float",
    "check_output_dir",
    "check_output_file",
    "write_json",
    "run_cli",
    "command_line",
    "run_sweep_cli",
]


def _number(text: str, kind: type, ok: Callable[[float], bool], what: str):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _number(text, int, lambda v: v >= 1, "a positive integer")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _number(text, int, lambda v: v >= 0, "an integer >= 0")


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    return _number(text, float, lambda v: v > 0 and math.isfinite(v), "a positive number")


def check_output_dir(path: str | Path) -> Path:
    """``path`` as a folder that exists or can be created, and can be written to.

    Raises ``ValueError`` naming the problem (a file in the way, no write permission).
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {path} is a file, not a folder")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"--out {path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--out {path}: {existing} is not writable")
    return path


def check_output_file(path: str | Path) -> Path:
    """``path`` as a file that can be written: its folder exists and is writable."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"--out {path} is a folder, not a file")
    folder = path.parent
    if not folder.is_dir():
        raise ValueError(f"--out {path}: the folder {folder} does not exist")
    writable = os.access(folder, os.W_OK | os.X_OK)
    if not writable or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"--out {path} is not writable")
    return path


def write_json(obj: dict, path: str | Path) -> Path:
    """Write ``obj`` as indented JSON atomically (``path.tmp``, then ``os.replace``).

    On failure (disk full) the temporary file is removed and ``path`` keeps its previous
    content.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def run_cli(parser: argparse.ArgumentParser, body: Callable[[], object]):
    """Run ``body`` with the package's exit codes: 2 bad input, 1 runtime failure, 130 Ctrl-C.

    ``ValueError``/``TypeError``/``FileNotFoundError`` raised by ``body`` are bad input
    (``parser.error``: usage, exit 2); another ``OSError`` (disk full, permissions) is a
    runtime failure (one line, exit 1). Otherwise returns what ``body`` returns.
    """
    try:
        return body()
    except (ValueError, TypeError, FileNotFoundError) as err:
        parser.error(str(err))
    except OSError as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None


def command_line(prog: str, argv: list[str] | None) -> str:
    """The command as it was typed (``argv``, or ``sys.argv``), for a result's ``"command"``."""
    return f"{prog} " + shlex.join(sys.argv[1:] if argv is None else argv)


def run_sweep_cli(
    parser: argparse.ArgumentParser,
    out: str | Path,
    command: str,
    sweep: Callable[[Callable[[dict], None]], dict],
) -> dict:
    """:func:`run_cli` for a sweep that writes one JSON file, as the ``tools/`` sweeps do.

    Checks ``out`` before any work, runs ``sweep(save)`` on one torch thread (``save``
    rewrites ``out`` with the result so far after every run), writes the final result with
    ``"command"`` first, and says where it went. Returns the result.
    """
    import torch  # only the sweeps need it; the training CLI imports cli.py too

    head = {"command": command}

    def body() -> dict:
        check_output_file(out)
        torch.set_num_threads(1)
        result = head | sweep(lambda so_far: write_json(head | so_far, out))
        write_json(result, out)
        print(f"wrote {out} in {result['wall_time_s']} s")
        return result

    return run_cli(parser, body)
