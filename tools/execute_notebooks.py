"""Re-execute the book's notebooks in place and record how it went (``make execute``).

For each notebook this script

1. makes sure the first cell is the "install if missing" cell that lets the notebook run
   in Colab or any fresh environment (tagged ``remove-cell``: it is not shown in the book);
2. executes it with the working directory ``book/`` (as jupyter-book and nbval do);
3. writes a "Tested with" stamp (Python, torch, NumPy, date, execution time) into a
   markdown cell right after the title, generated here rather than typed, so a reader can
   tell whether a different output of theirs is a version difference; markdown cells are
   not compared by nbval, so the stamp never makes CI fail;
4. records the time and status in ``book/_data/execution_report.json`` and regenerates
   the appendix page ``book/execution_report.md`` from it.

Usage: ``python tools/execute_notebooks.py [book/NN_name.ipynb ...]`` (default: all chapters).

``python tools/execute_notebooks.py --also-tested "TEXT"`` executes nothing: it records, dated,
another environment the chapters were checked in (e.g. a newer torch, with the command and the
result) in the report's "Also tested" section.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import nbformat
import numpy
import torch
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

import mini_transformer

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
REPORT_JSON = BOOK / "_data" / "execution_report.json"
REPORT_MD = BOOK / "execution_report.md"
# The repository the Colab/fresh-environment cell installs from: `repository.url` in _config.yml
# (one place to change when the book moves).
REPO_URL = re.search(r"^\s*url:\s*(\S+)", (ROOT / "_config.yml").read_text(), re.M).group(1)

# The install cell pins the package version that produces the stored outputs (the release
# tag ``v<__version__>``), and says so when the reader has another version installed.
INSTALL_SOURCE = f"""\
# Colab or a fresh environment: install the version of the book's package that made this
# page's outputs, and say so if another version is installed. (Removed from the rendered book.)
import importlib.metadata
import subprocess
import sys

BOOK_VERSION = "{mini_transformer.__version__}"  # the package that made the stored outputs
try:
    installed = importlib.metadata.version("mini_transformer")
except importlib.metadata.PackageNotFoundError:
    subprocess.check_call(
        [sys.executable, "-m", "pip", "install", "-q",
         f"git+{REPO_URL}@v{{BOOK_VERSION}}"]
    )
    installed = BOOK_VERSION
if installed != BOOK_VERSION:
    print(f"Note: mini_transformer {{installed}} is installed, but this page's outputs were made "
          f"with {{BOOK_VERSION}}; numbers may differ from the ones printed here.")"""


def _versions() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
    }


def _ensure_install_cell(nb: nbformat.NotebookNode) -> None:
    first = nb.cells[0] if nb.cells else None
    if first is not None and "install-if-missing" in first.metadata.get("tags", []):
        first.source = INSTALL_SOURCE
        return
    cell = nbformat.v4.new_code_cell(INSTALL_SOURCE)
    cell.metadata["tags"] = ["remove-cell", "install-if-missing"]
    nb.cells.insert(0, cell)


def _set_stamp(nb: nbformat.NotebookNode, versions: dict[str, str], seconds: float, when: str):
    text = (
        ":::{admonition} Tested with\n:class: tip\n"
        f"The outputs on this page were produced on {when} by Python {versions['python']}, "
        f"torch {versions['torch']} and NumPy {versions['numpy']} on a CPU "
        f"(executed in {seconds:.0f} s by `make execute`). If your numbers differ in the last "
        "digits, compare these versions with yours first.\n:::"
    )
    for cell in nb.cells:
        if "tested-with" in cell.metadata.get("tags", []):
            cell.source = text
            return
    # insert right after the title cell (the first markdown cell)
    idx = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), -1) + 1
    stamp = nbformat.v4.new_markdown_cell(text)
    stamp.metadata["tags"] = ["tested-with"]
    nb.cells.insert(idx, stamp)


def _title(nb: nbformat.NotebookNode, path: Path) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return path.stem


def execute(path: Path, versions: dict[str, str], when: str) -> dict:
    nb = nbformat.read(path, as_version=4)
    _ensure_install_cell(nb)
    client = NotebookClient(
        nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(BOOK)}}
    )
    start = time.perf_counter()
    status, error = "ok", ""
    try:
        client.execute()
    except CellExecutionError as err:
        status, error = "error", str(err).strip().splitlines()[-1][:300]
    seconds = time.perf_counter() - start
    if status == "ok":
        _set_stamp(nb, versions, seconds, when)
    nbformat.write(nb, path)
    return {
        "notebook": path.name,
        "title": _title(nb, path),
        "status": status,
        "seconds": round(seconds, 1),
        "date": when,
        "error": error,
        **versions,
    }


def write_report(records: list[dict], also: str | None = None) -> None:
    REPORT_JSON.parent.mkdir(exist_ok=True)
    stored = json.loads(REPORT_JSON.read_text()) if REPORT_JSON.exists() else {}
    old = {r["notebook"]: r for r in stored.get("notebooks", [])}
    for r in records:
        old[r["notebook"]] = r
    rows = [old[k] for k in sorted(old)]
    also_tested = stored.get("also_tested", [])
    if also:
        also_tested.append({"date": dt.date.today().isoformat(), "text": also})
    report = {"notebooks": rows, "also_tested": also_tested}
    REPORT_JSON.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    lines = [
        "# Execution report",
        "",
        "Each chapter is a notebook stored with its outputs. `make execute` re-runs it on a CPU",
        "and records here how long it took and whether it finished; `make test` then re-executes",
        "every notebook again and compares each stored output with the new one, with this CPU's",
        "kernels and with portable ones (`tools/test_notebooks.py`).",
        "This page is generated by `tools/execute_notebooks.py` from",
        "`book/_data/execution_report.json`; do not edit it by hand.",
        "",
        "| Chapter | Status | Time (s) | Executed on | Python | torch | NumPy |",
        "|---|---|---:|---|---|---|---|",
    ]
    for r in rows:
        link = f"[{r['title']}]({Path(r['notebook']).stem}.ipynb)"
        status = "✓ ok" if r["status"] == "ok" else f"✗ {r['status']}: {r['error']}"
        lines.append(
            f"| {link} | {status} | {r['seconds']:.1f} | {r['date']} | {r['python']} "
            f"| {r['torch']} | {r['numpy']} |"
        )
    total = sum(r["seconds"] for r in rows)
    lines += ["", f"Total: {total:.0f} s on the machine that executed the notebooks."]
    lines += [
        "",
        "Times are wall-clock seconds on the machine that ran `make execute`; a 2-core CPU",
        "is the budget the book is written for (about a minute a chapter).",
    ]
    if also_tested:
        lines += ["", "## Also tested", ""]
        lines += [f"- {a['date']}: {a['text']}" for a in also_tested]
    REPORT_MD.write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--also-tested"]:
        if len(argv) != 2 or not argv[1].strip():
            print('usage: python tools/execute_notebooks.py --also-tested "TEXT"', file=sys.stderr)
            return 2
        write_report([], also=argv[1].strip())
        return 0
    os.environ.setdefault("PYTHONHASHSEED", "0")
    paths = [Path(a).resolve() for a in argv] or sorted(BOOK.glob("[0-9]*.ipynb"))
    versions = _versions()
    when = dt.date.today().isoformat()
    records = []
    for path in paths:
        print(f"executing {path.relative_to(ROOT)} ...", flush=True)
        rec = execute(path, versions, when)
        print(f"  {rec['status']} in {rec['seconds']:.1f} s {rec['error']}", flush=True)
        records.append(rec)
    write_report(records)
    return 0 if all(r["status"] == "ok" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
