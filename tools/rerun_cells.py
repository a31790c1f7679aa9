"""Run every code cell of a chapter twice in a row and list the cells whose text output changes.

A reader runs a cell again as often as they run the next one. A cell that draws from a
chapter-wide random stream, from an unseeded ``torch.randn``, or that appends to state an
earlier cell made, prints something else the second time (or fails its own asserts). This
script executes the notebook top to bottom in one kernel, running each code cell twice, and
compares the two text outputs (stdout/stderr, ``text/plain``, ``text/html``, errors), after
the same sanitising nbval applies (``.ci/nbval_sanitize.cfg``: addresses, durations).

Exempt, run once: cells tagged ``nbval-ignore-output`` or ``nbval-skip`` (timings), and the
``install-if-missing`` cell. A second run that raises counts as a change, and so does a cell that
raises once the cells above it have run twice.

Usage: ``python tools/rerun_cells.py [book/NN_name.ipynb ...]`` (default: all chapters); exit 1
when a cell changes. ``tests/notebooks/rerun_check.py`` runs the same check in ``make test``.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
SANITIZE = ROOT / ".ci" / "nbval_sanitize.cfg"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
EXEMPT = {"nbval-ignore-output", "nbval-skip", "install-if-missing"}


def sanitizers(path: Path = SANITIZE) -> list[tuple[re.Pattern, str]]:
    """The (regex, replacement) pairs of nbval's sanitize file."""
    lines = path.read_text().splitlines()
    pairs = []
    for i, line in enumerate(lines):
        if line.startswith("regex: "):
            pairs.append((re.compile(line[7:]), lines[i + 1].removeprefix("replace: ")))
    return pairs


def text_of(outputs: list, subs: list[tuple[re.Pattern, str]]) -> str:
    """The text a reader reads in a cell's outputs (no images), sanitised."""
    parts = []
    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":  # one stream arrives in chunks that differ from run to run
            head = f"[{out['name']}] "
            if parts and parts[-1].startswith(head):
                parts[-1] += out["text"]
            else:
                parts.append(head + out["text"])
        elif kind in ("execute_result", "display_data"):
            data = out.get("data", {})
            for mime in ("text/plain", "text/html"):
                if mime in data and not (mime == "text/plain" and "image/png" in data):
                    parts.append(f"[{mime}] {data[mime]}")
        elif kind == "error":
            parts.append(f"[error] {out['ename']}: {ANSI.sub('', out['evalue'])}")
    text = "\n".join(parts)
    for regex, replacement in subs:
        text = regex.sub(replacement, text)
    return text


def rerun(path: Path, workdir: Path | None = None, timeout: int = 600) -> list[dict]:
    """Execute ``path`` running each code cell twice; return the cells whose output changed.

    Each entry: ``{"cell": index, "first": text, "second": text}``. The notebook file is not
    modified. ``workdir`` is the kernel's working directory (default: the notebook's folder).
    """
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        allow_errors=True,  # a raising cell is reported, and the rest still run
        resources={"metadata": {"path": str(workdir or path.parent)}},
    )
    subs, changed = sanitizers(), []
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or not cell.source.strip():
                continue
            client.execute_cell(cell, index)
            first = text_of(copy.deepcopy(cell.outputs), subs)
            if "[error]" in first:  # fails once the cells above it ran twice
                changed.append(
                    {"cell": index, "first": "(the cells above ran twice)", "second": first}
                )
                continue
            if EXEMPT & set(cell.metadata.get("tags", [])):
                continue
            client.execute_cell(cell, index)
            second = text_of(cell.outputs, subs)
            if first != second:
                changed.append({"cell": index, "first": first, "second": second})
    return changed


def report(path: Path, changed: list[dict]) -> str:
    lines = [f"{path.name}: {len(changed)} cell(s) print something else when run again"]
    for c in changed:
        first, second = c["first"].splitlines(), c["second"].splitlines()
        diff = next(
            (i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b),
            min(len(first), len(second)),
        )
        a = first[diff] if diff < len(first) else "<nothing>"
        b = second[diff] if diff < len(second) else "<nothing>"
        lines.append(f"  cell {c['cell']}: first run {a[:120]!r}, second run {b[:120]!r}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    bad = 0
    for path in paths:
        changed = rerun(path)
        print(report(path, changed))
        bad += len(changed)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
