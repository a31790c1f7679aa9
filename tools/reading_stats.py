"""How heavy is a chapter to read? The four numbers the chapter issues of 2026-11-24 set goals for.

For each chapter notebook it prints

- ``words``: words a reader meets outside folded blocks: markdown cells, without
  ``{dropdown}`` blocks, display math, code fences, and the generated "Tested with" stamp
  (goal: at most 3,000);
- ``longest``: the longest paragraph or list item of that visible prose, in words (goal: 120);
- ``summary``: the longest Summary bullet in words, and the number of bullets (goals: 35, 6);
- ``asserts``: ``assert`` statements in code cells a reader sees (not tagged ``hide-input``,
  ``hide-cell``, ``remove-input`` or ``remove-cell``), and the most in one cell (goal: 3);
- ``checks``: every ``assert`` in the notebook plus those in its ``tests/test_book_chN.py``
  (the count that must not fall when checks move out of the reader's way).

Usage: ``python tools/reading_stats.py [book/NN_name.ipynb ...]`` (default: all chapters).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = {"hide-input", "hide-cell", "remove-input", "remove-cell"}
ASSERT = re.compile(r"^\s*assert\b", re.M)


def visible_prose(markdown: str) -> str:
    """The markdown a reader sees unfolded: no dropdowns, display math or code fences."""
    text = re.sub(r"(`{3,}|:{3,})\{dropdown\}.*?^\1\s*$", "", markdown, flags=re.S | re.M)
    text = re.sub(r"(`{3,}|:{3,})\{(?:toggle)\}.*?^\1\s*$", "", text, flags=re.S | re.M)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"(`{3,})\{math\}.*?^\1\s*$", " ", text, flags=re.S | re.M)
    text = re.sub(r"^(`{3,})[^\n]*\n.*?^\1\s*$", " ", text, flags=re.S | re.M)
    return text


def blocks(prose: str) -> list[str]:
    """Paragraphs and list items (a list item runs until the next item or a blank line)."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", prose):
        items = re.split(r"\n(?=\s*(?:[-*+]|\d+\.)\s)", para)
        out += [i for i in items if i.strip()]
    return out


def words(text: str) -> int:
    return len(text.split())


def chapter_test_file(notebook: Path) -> Path:
    return ROOT / "tests" / f"test_book_ch{int(notebook.name[:2])}.py"


def stats(notebook: Path) -> dict[str, int]:
    cells = json.loads(notebook.read_text())["cells"]
    prose, visible_asserts, most, all_asserts = [], 0, 0, 0
    summary_bullets: list[str] = []
    for cell in cells:
        source, tags = "".join(cell["source"]), set(cell["metadata"].get("tags", []))
        if cell["cell_type"] == "markdown":
            if "tested-with" in tags or tags & HIDDEN:
                continue
            text = visible_prose(source)
            prose.append(text)
            if re.search(r"^## Summary", text, re.M):
                part = text.split("## Summary", 1)[1].split("\n## ", 1)[0]
                summary_bullets += re.findall(r"^\s*[-*+] (.*(?:\n(?!\s*[-*+] ).+)*)", part, re.M)
        elif cell["cell_type"] == "code":
            n = len(ASSERT.findall(source))
            all_asserts += n
            if not tags & HIDDEN:
                visible_asserts += n
                most = max(most, n)
    test_file = chapter_test_file(notebook)
    in_tests = len(ASSERT.findall(test_file.read_text())) if test_file.exists() else 0
    all_blocks = [b for p in prose for b in blocks(p)]
    return {
        "words": sum(words(p) for p in prose),
        "longest": max((words(b) for b in all_blocks), default=0),
        "summary_longest": max((words(b) for b in summary_bullets), default=0),
        "summary_bullets": len(summary_bullets),
        "visible_asserts": visible_asserts,
        "most_in_one_cell": most,
        "checks_notebook": all_asserts,
        "checks_tests": in_tests,
    }


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    print(
        f"{'chapter':<24}{'words':>7}{'longest':>8}{'summary':>9}{'asserts':>10}"
        f"{'checks (nb+tests)':>19}"
    )
    for path in paths:
        s = stats(path)
        print(
            f"{path.stem:<24}{s['words']:>7}{s['longest']:>8}"
            f"{s['summary_longest']:>5} x{s['summary_bullets']:<2}"
            f"{s['visible_asserts']:>5} ({s['most_in_one_cell']:>2})"
            f"{s['checks_notebook']:>8} + {s['checks_tests']:<4}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
