"""tools/rerun_cells.py with ``stored=True`` stands in for strict nbval with this CPU's kernels in
``make test-notebooks``: on a notebook whose stored outputs were written by hand (some right,
some wrong, some only sanitised or image-deep apart), it fails exactly the cells nbval fails,
and it still catches a cell that prints something else when run again."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output
from rerun_cells import rerun

ROOT = Path(__file__).resolve().parents[1]
PNG = base64.b64encode(b"\x89PNG one image").decode()
OTHER_PNG = base64.b64encode(b"\x89PNG another").decode()
META = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}


def stream(text: str, name: str = "stdout"):
    return new_output("stream", name=name, text=text)


def result(plain: str, **more):
    return new_output("execute_result", data={"text/plain": plain, **more}, execution_count=1)


# (source, stored outputs, does strict nbval pass it?)
CASES = [
    ("print('a'); print('b')", [stream("a\n"), stream("b\n")], True),  # chunks joined
    ("print(1)", [stream("2\n")], False),
    ("1 + 2", [result("3")], True),
    ("1 + 2", [result("4")], False),
    ("print('x', file=sys.stderr)", [stream("x\n")], False),  # stderr stored as stdout
    ("pass", [stream("left over\n")], False),  # an output the run no longer makes
    ("print(hex(id(object())))", [stream("0x7f00deadbeef\n")], True),  # sanitised address
    ("print('took 3.2 s')", [stream("took 9.9 s\n")], True),  # sanitised duration
    (
        "display({'image/png': OTHER, 'text/plain': '<Figure>'}, raw=True)",
        [new_output("display_data", data={"image/png": PNG, "text/plain": "<Figure>"})],
        True,  # images are not compared
    ),
    (
        "display({'image/png': OTHER, 'text/plain': '<Figure 2>'}, raw=True)",
        [new_output("display_data", data={"image/png": PNG, "text/plain": "<Figure>"})],
        False,  # their text is
    ),
    ("raise ValueError('no')", [], False),
]


@pytest.fixture(scope="module")
def notebook(tmp_path_factory) -> Path:
    setup = f"import sys\nfrom IPython.display import display\nOTHER = {OTHER_PNG!r}"
    cells = [new_code_cell(setup)]
    cells += [new_code_cell(src, outputs=outs) for src, outs, _ in CASES]
    ignored = new_code_cell("print('anything')", outputs=[stream("else\n")])
    ignored.metadata["tags"] = ["nbval-ignore-output"]
    cells.append(ignored)
    for count, cell in enumerate(cells, 1):
        cell.execution_count = count
    path = tmp_path_factory.mktemp("nb") / "cases.ipynb"
    nbformat.write(new_notebook(cells=cells, metadata=META), path)
    return path


def test_the_stored_comparison_fails_the_cells_strict_nbval_fails(notebook):
    expected = {i + 1 for i, (_, _, passes) in enumerate(CASES) if not passes}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rf", "--nbval",
         "--nbval-current-env", "--nbval-sanitize-with", str(ROOT / ".ci" / "nbval_sanitize.cfg"),
         str(notebook)],
        cwd=notebook.parent, capture_output=True, text=True,
    )  # fmt: skip
    by_nbval = {int(n) for n in re.findall(r"FAILED .*::Cell (\d+)", run.stdout)}
    assert by_nbval == expected, run.stdout[-3000:]
    changed = rerun(notebook, stored=True)
    ours = {c["cell"] for c in changed if c["against"] == "stored output"}
    assert ours == expected, changed
    assert not [c for c in changed if c["against"] != "stored output"], changed


def test_without_stored_only_a_change_between_runs_counts(notebook):
    changed = rerun(notebook)
    # The raising cell is the only one: it raises on its first run (after the cells above it
    # ran twice), whatever was stored.
    assert [c["cell"] for c in changed] == [len(CASES)], changed


def test_a_cell_that_counts_its_runs_fails_both_ways(tmp_path):
    counter = "n = globals().get('n', 0) + 1\nprint(n)"
    cells = [
        new_code_cell(counter, outputs=[stream("1\n")], execution_count=1),
        new_code_cell("print(n)", outputs=[stream("1\n")], execution_count=2),
    ]
    path = tmp_path / "counter.ipynb"
    nbformat.write(new_notebook(cells=cells, metadata=META), path)
    changed = rerun(path, stored=True)
    # The counter's first run matches its stored output and its second does not; the next cell
    # then reads n = 2 (stricter than nbval, which runs each cell once and would pass it).
    assert [(c["cell"], c["against"]) for c in changed] == [
        (0, "second run"),
        (1, "stored output"),
    ], changed
