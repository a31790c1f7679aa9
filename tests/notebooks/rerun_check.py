"""Every code cell of every chapter prints the same text when a reader runs it twice in a row.

Run by ``make test-notebooks`` (``tools/test_notebooks.py``) on the chapters copied alone into
empty folders (``MT_CHAPTERS``), importing the installed wheel; run directly, it checks the
chapters in ``book/`` (``python -m pytest tests/notebooks/rerun_check.py``). Timing cells tagged
``nbval-ignore-output`` are exempt. With ``MT_COMPARE_STORED=1`` each cell's first run is also
held to its stored output as strict nbval holds it (``tools/rerun_cells.py``), so that one
execution does the work of nbval with this CPU's kernels and of the run-twice check. Not named
``test_*.py``, so ``make test-package`` does not collect it (it executes every chapter).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from rerun_cells import report, rerun  # noqa: E402

FOLDER = Path(os.environ.get("MT_CHAPTERS", ROOT / "book"))
CHAPTERS = sorted(FOLDER.glob("**/[0-9][0-9]_*.ipynb"))
EXPECTED = int(os.environ.get("MT_EXPECTED_CHAPTERS", "6"))
STORED = os.environ.get("MT_COMPARE_STORED") == "1"


def test_every_chapter_is_there_to_run():
    assert len(CHAPTERS) == EXPECTED, CHAPTERS


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_cell_prints_the_same_when_run_twice(path):
    changed = rerun(path, stored=STORED)
    assert not changed, report(path, changed)
