"""What every command line does the same way: the training command line and the tools/ sweeps.

- Arguments and the output path are checked **before** any work: a bad one exits with
  status 2 and a usage message, never a traceback (:func:`run_cli`'s ``check``, argparse
  types). A committed result (:data:`COMMITTED_DIRS`) is never an output unless
  ``--overwrite`` is given; neither is a FIFO or a device (:func:`check_output_file`).
- A failure while running (disk full, an unreadable file, any error once the work has
  begun) exits with status 1 and one line on stderr; temporary files are removed
  (:func:`write_json`); Ctrl-C exits with 130.
- JSON is strict: a NaN or infinite number is written as ``null`` (:func:`write_json`).
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
    "probability",
    "COMMITTED_DIRS",
    "check_output_dir",
    "check_output_file",
    "write_json",
    "json_safe",
    "printable",
    "open_temporary",
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


def probability(text: str) -> float:
    """argparse type: a number in [0, 1) (a dropout rate)."""
    return _number(text, float, lambda v: 0 <= v < 1, "a probability in [0, 1)")


_PACKAGE = Path(__file__).resolve().parent

#: The folders of committed results (the package's results and assets, which the chapters
#: load, and the repository's ``benchmarks/results``). An existing file in them is replaced
#: only with ``--overwrite``.
COMMITTED_DIRS: tuple[Path, ...] = (
    _PACKAGE / "results",
    _PACKAGE / "assets",
    _PACKAGE.parent / "benchmarks" / "results",
)


def _committed(path: Path) -> Path | None:
    """The committed-results folder holding the existing file ``path``, or ``None``."""
    if not path.exists():
        return None
    folder = path.resolve().parent
    return next((d for d in COMMITTED_DIRS if folder == d.resolve()), None)


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


def check_output_file(path: str | Path, *, overwrite: bool = False) -> Path:
    """``path`` as a file that can be written: its folder exists and is writable.

    An existing ``path`` must be a regular file (a FIFO or a device would be replaced by
    the atomic rename), and one of the committed results (:data:`COMMITTED_DIRS`) is
    refused unless ``overwrite``. Raises ``ValueError`` naming the problem.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"--out {path} is a folder, not a file")
    if path.exists() and not path.is_file():
        raise ValueError(f"--out {path} exists and is not a regular file (a FIFO or a device?)")
    committed = _committed(path)
    if committed is not None and not overwrite:
        raise ValueError(
            f"--out {path} is a committed result (in {committed}); choose another path, "
            "or pass --overwrite to replace it"
        )
    folder = path.parent
    if not folder.is_dir():
        raise ValueError(f"--out {path}: the folder {folder} does not exist")
    writable = os.access(folder, os.W_OK | os.X_OK)
    if not writable or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"--out {path} is not writable")
    return path


def open_temporary(path: Path, mode: str = "w"):
    """Open ``path.tmp`` for writing, created afresh: a file or symlink already there is
    removed first (never written through), and ``O_EXCL`` refuses a race."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)  # a symlink is removed itself, its target left alone
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    return tmp, os.fdopen(fd, mode)


def printable(text: str) -> str:
    """``text`` safe to print on any UTF-8 stream: a path's undecodable bytes (held as
    surrogates, e.g. a folder named in Latin-1) become U+FFFD instead of an error."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def json_safe(value):
    """``value`` with every NaN or infinite float replaced by ``None`` (JSON's ``null``),
    so that the file is strict JSON that any reader parses."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write_json(obj: dict, path: str | Path) -> Path:
    """Write ``obj`` as indented JSON atomically (``path.tmp``, then ``os.replace``).

    NaN and infinities are written as ``null`` (:func:`json_safe`). On failure (disk full)
    the temporary file is removed and ``path`` keeps its previous content.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp, f = open_temporary(path)
        with f:
            json.dump(json_safe(obj), f, indent=1, allow_nan=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    if not isinstance(err, (OSError, ValueError)):
        text = f"{type(err).__name__}: {text}"
    return text[:2000]


def run_cli(
    parser: argparse.ArgumentParser,
    check: Callable[[], object],
    work: Callable[[object], object] | None = None,
):
    """Run a command with the package's exit codes: 2 bad input, 1 runtime failure, 130 Ctrl-C.

    ``check()`` validates the input and may prepare it (it does no work): a
    ``ValueError``/``TypeError``/``FileNotFoundError`` it raises is bad input
    (``parser.error``: usage, exit 2). ``work(checked)`` then does the work with what
    ``check`` returned: any exception it raises is a runtime failure (one line on stderr,
    exit 1, no traceback), since the arguments were already accepted. An ``OSError`` from
    ``check`` is a runtime failure too. Ctrl-C exits with 130. Returns what ``work``
    returns (what ``check`` returns if there is no ``work``).
    """
    try:
        try:
            checked = check()
        except (ValueError, TypeError, FileNotFoundError) as err:
            parser.error(_one_line(err))
        if work is None:
            return checked
        return work(checked)
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except (SystemExit, GeneratorExit):
        raise
    except Exception as err:
        print(f"{parser.prog}: error: {_one_line(err)}", file=sys.stderr)
        raise SystemExit(1) from None


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
    """:func:`run_cli` for a sweep that writes one JSON file, as the ``tools/`` sweeps do.

    Checks ``out`` before any work (a committed result only with ``overwrite``), runs
    ``sweep(save)`` on one torch thread (``save`` rewrites ``out`` with the result so far
    after every run), writes the final result with ``"command"`` first, and says where it
    went. Returns the result.
    """
    import torch  # only the sweeps need it; the training CLI imports cli.py too

    head = {"command": command}

    def work(_) -> dict:
        torch.set_num_threads(1)
        result = head | sweep(lambda so_far: write_json(head | so_far, out))
        write_json(result, out)
        print(printable(f"wrote {out} in {result['wall_time_s']} s"))
        return result

    return run_cli(parser, lambda: check_output_file(out, overwrite=overwrite), work)
