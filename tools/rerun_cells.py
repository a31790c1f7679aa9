"""Run every code cell of a chapter twice in a row and list the cells whose text output changes.

A reader runs a cell again as often as they run the next one. A cell that draws from a
chapter-wide random stream, from an unseeded ``torch.randn``, or that appends to state an
earlier cell made, prints something else the second time (or fails its own asserts). This
script executes the notebook top to bottom in one kernel, running each code cell twice, and
compares the two outputs as strict nbval compares a run with a stored output (``nbval_fields``:
streams joined, every MIME type but images, errors without their traceback), after the same
sanitising (``.ci/nbval_sanitize.cfg``: addresses, durations).

Exempt, run once: cells tagged ``nbval-ignore-output`` or ``nbval-skip`` (timings), and the
``install-if-missing`` cell. A second run that raises counts as a change, and so does a cell that
raises once the cells above it have run twice.

With ``stored=True`` (``--stored``) each cell's first run is also compared with the output
stored in the notebook, in the same fields, so one execution checks both: ``make test-notebooks``
uses it in place of a separate nbval run with this CPU's kernels. It is stricter than nbval in
one way only: a cell runs after the cells above it ran twice, so a cell that reads state an
earlier cell changes on each run fails here.

Usage: ``python tools/rerun_cells.py [--stored] [book/NN_name.ipynb ...]`` (default: all
chapters); exit 1 when a cell changes. ``tests/notebooks/rerun_check.py`` runs the same check
in ``make test``.
"""

from __future__ import annotations

import copy
import re
import sys
from collections import defaultdict
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbval.plugin import coalesce_streams

ROOT = Path(__file__).resolve().parent.parent
SANITIZE = ROOT / ".ci" / "nbval_sanitize.cfg"
EXEMPT = {"nbval-ignore-output", "nbval-skip", "install-if-missing"}
# What strict nbval leaves out of a comparison (nbval.plugin.IPyNbFile.skip_compare, without
# --nbdime): metadata, tracebacks, counters, images.
NBVAL_SKIP = {
    "metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
    "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg",
}  # fmt: skip


def sanitizers(path: Path = SANITIZE) -> list[tuple[re.Pattern, str]]:
    """The (regex, replacement) pairs of nbval's sanitize file."""
    lines = path.read_text().splitlines()
    pairs = []
    for i, line in enumerate(lines):
        if line.startswith("regex: "):
            pairs.append((re.compile(line[7:]), lines[i + 1].removeprefix("replace: ")))
    return pairs


def sanitise(text: str, subs: list[tuple[re.Pattern, str]]) -> str:
    for regex, replacement in subs:
        text = regex.sub(replacement, text)
    return text


def nbval_fields(outputs: list, subs: list[tuple[re.Pattern, str]]) -> dict[str, list]:
    """A cell's outputs as strict nbval compares them: ``{field: [values in order]}``.

    nbval (``IPyNbCell.compare_outputs``) joins each stream's chunks, keys a stream by its name,
    flattens display data to one entry per MIME type, drops ``NBVAL_SKIP`` and sanitises every
    string; two runs agree when these dicts are equal.
    """
    fields = defaultdict(list)
    for out in coalesce_streams([nbformat.from_dict(copy.deepcopy(o)) for o in outputs]):
        if out.output_type == "stream":
            out = {out.name: out.text}
        for key, value in out.items():
            if key in NBVAL_SKIP:
                continue
            for field, v in value.items() if key == "data" else [(key, value)]:
                if field not in NBVAL_SKIP:
                    fields[field].append(sanitise(v, subs) if isinstance(v, str) else v)
    return dict(fields)


def show(fields: dict[str, list]) -> str:
    return "\n".join(f"[{key}] {value}" for key, values in fields.items() for value in values)


def rerun(
    path: Path, workdir: Path | None = None, timeout: int = 600, stored: bool = False
) -> list[dict]:
    """Execute ``path`` running each code cell twice; return the cells whose output changed.

    Each entry: ``{"cell": index, "first": text, "second": text, "against": what}``, where
    ``against`` is ``"second run"``, or ``"stored output"`` when ``stored`` and a cell's first
    run differs from the output stored in the notebook (then ``first`` is the stored text).
    The notebook file is not modified. ``workdir`` is the kernel's working directory (default:
    the notebook's folder).
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
            tags = set(cell.metadata.get("tags", []))
            # nbval compares only cells stored as run, and not those it is told to ignore.
            compare = (
                stored
                and cell.execution_count is not None
                and not ({"nbval-ignore-output", "nbval-skip"} & tags)
            )
            reference = nbval_fields(cell.outputs, subs) if compare else None
            client.execute_cell(cell, index)
            first = nbval_fields(cell.outputs, subs)
            if compare and first != reference:
                changed.append(
                    {"cell": index, "first": show(reference), "second": show(first),
                     "against": "stored output"}
                )  # fmt: skip
                continue
            if "ename" in first:  # fails once the cells above it ran twice
                changed.append(
                    {"cell": index, "first": "(the cells above ran twice)",
                     "second": show(first), "against": "second run"}
                )  # fmt: skip
                continue
            if EXEMPT & tags:
                continue
            client.execute_cell(cell, index)
            second = nbval_fields(cell.outputs, subs)
            if first != second:
                changed.append(
                    {"cell": index, "first": show(first), "second": show(second),
                     "against": "second run"}
                )  # fmt: skip
    return changed


def report(path: Path, changed: list[dict]) -> str:
    lines = [f"{path.name}: {len(changed)} cell(s) print something else than they should"]
    for c in changed:
        first, second = c["first"].splitlines(), c["second"].splitlines()
        diff = next(
            (i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b),
            min(len(first), len(second)),
        )
        a = first[diff] if diff < len(first) else "<nothing>"
        b = second[diff] if diff < len(second) else "<nothing>"
        if c.get("against") == "stored output":
            lines.append(f"  cell {c['cell']}: stored {a[:120]!r}, first run {b[:120]!r}")
        else:
            lines.append(f"  cell {c['cell']}: first run {a[:120]!r}, second run {b[:120]!r}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    stored = "--stored" in argv
    argv = [a for a in argv if a != "--stored"]
    if any(a.startswith("-") for a in argv):
        print(__doc__.split("Usage: ")[1], file=sys.stderr)
        return 2
    paths = [Path(a) for a in argv] or sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    bad = 0
    for path in paths:
        changed = rerun(path, stored=stored)
        print(report(path, changed))
        bad += len(changed)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
