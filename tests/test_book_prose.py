"""The prose says its numbers, and they cannot drift: every number a chapter's markdown quotes
appears, at the precision the prose writes it, in that chapter's stored text outputs.

Readers read the notebook in JupyterLab as well as the built book, so the number is typed in
the sentence (myst-nb ``glue`` renders only in the book). This test is what keeps the typed
number equal to the computed one: nbval holds the outputs to the code, this holds the prose
to the outputs.

The rules (documented for authors in the README's contributor part):

- A number is a token like ``0.954``, ``1,024``, ``95.4%``, ``3e-4`` or ``10000``. Skipped:
  code spans and fences, link targets, MyST roles and directive lines, HTML comments, heading
  numbers, integers below 10, numbers that follow a reference word (section, chapter,
  exercise, table, figure, eq., ``§``) or belong to a word or a name (``d2l``, ``float16``,
  ``L2``, ``WikiText-103``).
  Inside ``$...$`` math only numbers with a decimal point are checked (an integer in a
  formula is part of the formula).
- It is held when some number in the chapter's text outputs (stdout, ``text/plain``,
  ``text/html``) rounds to it at the prose's precision: prose ``0.95`` is held by ``0.954``;
  ``95.4%`` by ``0.954`` or ``95.4``; ``3e-4`` by ``0.0003``. Signs are ignored.
- Anything else (a paper's number quoted with its citation, a year, a hyper-parameter the
  prose only names, a tolerance) is listed in ``tests/prose_numbers/<chapter>.txt`` with the
  reason; an entry the prose no longer uses fails the test, so the lists stay short.
"""

from __future__ import annotations

import bisect
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted(ROOT.glob("book/[0-9][0-9]_*.ipynb"))
LISTS = Path(__file__).resolve().parent / "prose_numbers"

NUMBER = re.compile(
    r"(?<![\w.,])(?<!\w-)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?:\s?[eE]([-+−]?\d+)|\s?[×x]\s?10\^\{?([-−]?\d+)\}?)?(\s?%)?(?![\w])"
)
REFERENCE = re.compile(
    r"(?:§|\b(?:[Ss]ections?|[Cc]hapters?|[Ee]xercises?|[Tt]ables?|[Ff]ig(?:ure)?s?\.?|[Ee]q(?:uation)?s?\.?|[Aa]ppendix|[Ss]teps?|[Cc]ells?|[Rr]ows?|[Ll]ines?|[Pp]ages?|pp?\.))\s*\(?$"
)


FENCE = re.compile(r"^\s*(`{3,}|:{3,})\s*(.*)$")
PROSE_DIRECTIVES = ("{dropdown", "{admonition", "{note", "{tip", "{warning", "{important")


def _drop_code_fences(text: str) -> str:
    """Drop code and math fences; keep the prose inside dropdowns and admonitions.

    A fence line opens a block unless it closes the innermost open one (same fence, nothing
    after it); a block that is not a prose directive (code, ``{math}``, ``{code-cell}``) is
    dropped with its fences, a prose directive keeps its content.
    """
    kept, stack = [], []  # stack of (fence, keep content?)
    for line in text.splitlines():
        m = FENCE.match(line)
        if m and stack and m.group(1) == stack[-1][0] and not m.group(2).strip():
            stack.pop()
            continue
        if m and not (stack and not stack[-1][1]):  # no fences inside a code block
            stack.append((m.group(1), m.group(2).startswith(PROSE_DIRECTIVES)))
            continue
        if all(keep for _, keep in stack):
            kept.append(line)
    return "\n".join(kept)


def _prose_parts(markdown: str) -> list[tuple[str, bool]]:
    """``(text, in_math)`` pieces of a markdown cell, with what the rules skip removed."""
    text = _drop_code_fences(re.sub(r"<!--.*?-->", " ", markdown, flags=re.S))
    text = re.sub(r"^\s*:\w[\w-]*:.*$", " ", text, flags=re.M)  # directive options
    text = re.sub(r"\{[\w:-]+\}`[^`]*`", " ", text)  # roles: {cite}`...`, {ref}`...`
    text = re.sub(r"`[^`\n]*`", " ", text)  # code spans
    text = re.sub(r"\]\([^)]*\)", "] ", text)  # link targets
    text = re.sub(r"https?://\S+", " ", text)
    text = re.sub(r"^(#+)\s*[\d.]+\s", r"\1 ", text, flags=re.M)  # heading numbers
    parts = re.split(r"(\$\$.*?\$\$|\$[^$\n]+\$)", text, flags=re.S)
    return [(p, p.startswith("$")) for p in parts if p.strip()]


def prose_numbers(markdown: str) -> list[tuple[str, float, float]]:
    """``(as written, value, half a unit of its last digit)`` for each checked number."""
    found = []
    for part, in_math in _prose_parts(markdown):
        if in_math:
            part = re.sub(r"\\[a-zA-Z]+|[_^]\{?[\w-]+\}?", " ", part)  # commands, indices
        for m in NUMBER.finditer(part):
            whole, frac, exp, exp10, pct = m.groups()
            if REFERENCE.search(part[: m.start()].rstrip()[-14:] + "") and not pct:
                continue
            if in_math and not frac:
                continue
            digits = whole.replace(",", "")
            value = float(digits + (frac or ""))
            if not frac and not exp and not exp10 and not pct and value < 10:
                continue
            places = len(frac) - 1 if frac else 0
            half = 0.5 * 10.0**-places
            e = exp or exp10
            if e:
                scale = 10.0 ** int(e.replace("−", "-"))
                value, half = value * scale, half * scale
            if pct:
                value, half = value / 100, half / 100
            found.append((m.group(0).strip(), value, half))
    return found


def output_numbers(cells: list[dict]) -> list[float]:
    """Every number in the chapter's stored text outputs."""
    texts = []
    for cell in cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if out.get("output_type") == "stream":
                texts.append("".join(out["text"]))
            texts.append("".join(data.get("text/plain", "")))
            texts.append(re.sub(r"<[^>]+>", " ", "".join(data.get("text/html", ""))))  # tags
    text = "\n".join(texts)
    values = []
    for m in re.finditer(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d*\.?\d+(?:[eE][-+]?\d+)?", text):
        values.append(abs(float(m.group(0).replace(",", ""))))
    return sorted(set(values))


def held(value: float, half: float, outputs: list[float]) -> bool:
    """Some output (sorted) rounds to ``value`` at its precision (also read as a percentage)."""
    tol = half * (1 + 1e-9) + 1e-15
    candidates = [(value, tol), (value * 100, tol * 100)] if half < 0.5 else [(value, tol)]
    for target, t in candidates:
        i = bisect.bisect_left(outputs, target - t)
        if i < len(outputs) and outputs[i] <= target + t:
            return True
    return False


def allowed(path: Path) -> dict[str, str]:
    """The chapter's list: ``{number as written: why}``."""
    listed = LISTS / f"{path.stem}.txt"
    if not listed.exists():
        return {}
    entries = {}
    for line in listed.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            number, _, why = line.partition("#")
            entries[number.strip()] = why.strip()
    return entries


def _markdown(cells: list[dict]) -> str:
    return "\n\n".join(
        "".join(c["source"])
        for c in cells
        if c["cell_type"] == "markdown"
        and not {"tested-with", "remove-cell"} & set(c["metadata"].get("tags", []))
    )


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_number_in_the_prose_is_a_computed_output_or_listed(path):
    cells = json.loads(path.read_text())["cells"]
    outputs, listed = output_numbers(cells), allowed(path)
    loose = sorted(
        {
            written
            for written, value, half in prose_numbers(_markdown(cells))
            if written not in listed and not held(abs(value), half, outputs)
        }
    )
    assert not loose, (
        f"{path.name}: numbers in the prose that no output prints at that precision "
        f"(print them from a cell, or list them in tests/prose_numbers/{path.stem}.txt "
        f"with the reason): {loose}"
    )


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_list_of_uncomputed_numbers_has_no_stale_entry(path):
    written = {w for w, _, _ in prose_numbers(_markdown(json.loads(path.read_text())["cells"]))}
    stale = sorted(set(allowed(path)) - written)
    assert not stale, (
        f"tests/prose_numbers/{path.stem}.txt lists numbers the prose no longer has: {stale}"
    )  # noqa: E501


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_prose_says_the_number_instead_of_pointing_at_it(path):
    md = _markdown(json.loads(path.read_text())["cells"])
    pointers = re.findall(r"[^.\n]*\b(?:printed|shown) (?:above|below)\b[^.\n]*", md)
    assert not pointers, f"{path.name}: say the number in the sentence: {pointers[:3]}"


# --- the rules themselves -------------------------------------------------------------


def test_the_extractor_reads_numbers_as_a_reader_does():
    md = (
        "## 2.5 Proofs\nThe norm is 1.7321 and 95.4% agree; see §2.5 and Exercise 4.1. "
        "In $d=512$ the value $0.9600$ holds; `lr=3e-4` is code; lr 3e-4 is not; 1,024 tokens; "
        "float16, d2l and WikiText-103 are words; {cite}`vaswani2017` is a role; [x](http://a.b/1.5)."
    )
    got = [(w, round(v, 12)) for w, v, _ in prose_numbers(md)]
    assert got == [("1.7321", 1.7321), ("95.4%", 0.954), ("0.9600", 0.96), ("3e-4", 0.0003),
                   ("1,024", 1024.0)]  # fmt: skip


def test_prose_inside_a_dropdown_is_read_and_code_fences_are_not():
    md = "```{dropdown} An aside\nThe aside says 0.25.\n```\nThen 0.5.\n"
    md += "```python\nx = 0.75\n```\n1.25"
    assert [w for w, _, _ in prose_numbers(md)] == ["0.25", "0.5", "1.25"]


def test_a_number_is_held_only_at_the_precision_the_prose_writes():
    outputs = sorted([0.954, 1024.0, 0.0003, 1.73205])
    assert held(0.95, 0.005, outputs) and held(0.954, 0.0005, outputs)
    assert not held(0.953, 0.0005, outputs) and not held(0.96, 0.005, outputs)
    assert held(0.954, 0.0005, [95.4])  # a percentage printed as such
    assert held(1.7321, 0.00005, outputs) and not held(1.7322, 0.00005, outputs)
    assert held(1024, 0.5, outputs) and not held(1023, 0.5, outputs)
