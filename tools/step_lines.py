"""How many lines of the package one command-line training step runs through (issue 35's measure).

Repository tooling: the package style review of 2026-11-28 measured the reading path of
``python -m mini_transformer.train --preset tiny --steps 1`` as the line spans (``def`` or its
first decorator to the end) of every package function whose code runs, a function nested in a
counted one counted once. This is that measure, traced with ``sys.settrace`` in this process: it
gives 1,479 lines on the reviewed commit 4c879ab, where the review counted 1,477.

Usage::

    python tools/step_lines.py [--verbose]      # the total; --verbose: every function's span

The run trains one step of the tiny preset into a fresh temporary folder, removed afterwards.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import os
import runpy
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

import mini_transformer

PACKAGE = str(Path(mini_transformer.__file__).parent)


def _spans(path: str) -> dict[int, tuple[int, int, str]]:
    """``{first line of the code object: (first line with decorators, last line, name)}``."""
    spans = {}
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            span = (first, node.end_lineno, getattr(node, "name", "<lambda>"))
            spans[node.lineno] = spans[first] = span  # a code object starts at either line
    return spans


def step_lines() -> list[tuple[str, int, int, str]]:
    """``(file, first, last, name)`` of every package function one CLI training step runs, nested
    ones inside a counted function left out. Call it once, in a fresh process: a second run finds
    the corpus and tokenizer cached and runs fewer functions."""
    seen: set[tuple[str, int]] = set()

    def tracer(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_filename.startswith(PACKAGE) and code.co_name != "<module>":
            seen.add((code.co_filename, code.co_firstlineno))

    with tempfile.TemporaryDirectory() as out:
        argv = sys.argv
        sys.argv = ["train", "--preset", "tiny", "--steps", "1", "--no-progress", "--out", out]
        sys.settrace(tracer)
        try:  # `python -m mini_transformer.train ...`, as the review ran it
            with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
                with warnings.catch_warnings():  # runpy: the package imported the module first
                    warnings.simplefilter("ignore", RuntimeWarning)
                    runpy.run_module("mini_transformer.train", run_name="__main__")
        finally:
            sys.settrace(None)
            sys.argv = argv
    spans = {path: _spans(path) for path in {p for p, _ in seen}}
    rows = sorted({(p, *spans[p][line]) for p, line in seen if line in spans[p]})
    return [
        r
        for r in rows
        if not any(o[0] == r[0] and o[1] <= r[1] and r[2] <= o[2] and o != r for o in rows)
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python tools/step_lines.py", description=__doc__.split("\n")[0]
    )
    p.add_argument("--verbose", action="store_true", help="list every function's span")
    args = p.parse_args(argv)
    rows = step_lines()
    files = Counter(os.path.basename(f) for f, *_ in rows)
    total = sum(last - first + 1 for _, first, last, _ in rows)
    print(f"one CLI training step: {total} lines in {len(rows)} functions over {len(files)} files")
    if args.verbose:
        for f, first, last, name in sorted(rows, key=lambda r: r[1] - r[2]):
            print(f"{last - first + 1:5d}  {os.path.basename(f)}:{first}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
