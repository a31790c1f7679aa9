"""The book's structure: every chapter in the table of contents is a stored, executed notebook
with the sections a reader expects, checked exercises and hidden solutions, and the
configuration keeps the promises of the README (offline math, pinned toolchain)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOC = (ROOT / "_toc.yml").read_text()
CHAPTERS = sorted(ROOT.glob("book/[0-9][0-9]_*.ipynb"))


def _cells(path):
    return json.loads(path.read_text())["cells"]


def _text(cell):
    return "".join(cell["source"])


def test_every_chapter_notebook_is_in_the_toc_and_exists():
    listed = re.findall(r"file:\s*(book/\d\d_\w+)", TOC)
    assert len(listed) == 6
    assert sorted(f"{p.parent.name}/{p.stem}" for p in CHAPTERS) == sorted(listed)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_is_stored_executed_without_errors(path):
    code = [c for c in _cells(path) if c["cell_type"] == "code" and _text(c).strip()]
    assert code, "a chapter has code cells"
    assert all(c.get("execution_count") is not None for c in code), "re-run `make execute`"
    assert not any(o.get("output_type") == "error" for c in code for o in c["outputs"])


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_figures_are_png_not_svg(path):
    for cell in _cells(path):
        for out in cell.get("outputs", []):
            assert "image/svg+xml" not in out.get("data", {}), "SVG outputs break nbval"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_has_goals_summary_exercises_references(path):
    md = "\n".join(_text(c) for c in _cells(path) if c["cell_type"] == "markdown")
    assert re.search(r"learning goals", md, re.I)
    for heading in ("## Summary", "## Exercises", "## References"):
        assert heading in md, f"missing {heading!r}"
    assert md.count("### Exercise") >= 3


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_has_checked_exercises_with_hidden_executed_solutions(path):
    cells = _cells(path)
    checked = {
        m
        for c in cells
        if c["cell_type"] == "code"
        for m in re.findall(r'exercises\.check\(\s*"([\w-]+)"', _text(c))
    }
    assert len(checked) >= 2, "at least two exercises are checked by mini_transformer.exercises"
    solutions = [
        c
        for c in cells
        if c["cell_type"] == "code" and re.search(r"assert\s+exercises\.check\(", _text(c))
    ]
    assert len(solutions) >= 2
    for c in solutions:
        # hide-cell folds the code AND its output in the book (hide-input left the output open)
        assert "hide-cell" in c["metadata"].get("tags", []), "solutions are collapsed in the book"
        assert c["metadata"].get("jupyter", {}).get("source_hidden") is True
        assert c["metadata"].get("jupyter", {}).get("outputs_hidden") is True
    stubs = [
        c
        for c in cells
        if c["cell_type"] == "code"
        and c not in solutions
        and re.search(r"exercises\.check\(", _text(c))
    ]
    for c in stubs:  # an unanswered exercise shows its ✗ line and no stray value (no `False`)
        assert not any(o.get("output_type") == "execute_result" for o in c["outputs"])


def test_mathjax_is_served_locally():
    config = (ROOT / "_config.yml").read_text()
    assert "mathjax_path: mathjax/tex-svg.js" in config
    assert (ROOT / "book/_static/mathjax/tex-svg.js").stat().st_size > 1_000_000


def test_requirements_pin_the_toolchain():
    pins = dict(
        line.split("==")
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert pins["jupyter-book"].startswith("1."), "jupyter-book 2.x is a different tool"
    assert pins["torch"] == "2.13.0"
    for name in ("nbval", "pytest", "numpy", "matplotlib", "scikit-learn", "ipykernel", "tqdm"):
        assert name in pins, f"{name} is pinned"
    assert "jupyterlab_myst" in pins, "make lab renders MyST as the book does"


def test_jupyterlab_loads_the_myst_extension():
    """JupyterLab disables an extension built against other shared packages, saying so only in
    ``jupyter labextension list`` (jupyterlab_myst 2.7.0 under JupyterLab 4.6: "not compatible")."""
    jupyter = Path(sys.executable).parent / "jupyter"
    if not jupyter.exists():
        pytest.skip("JupyterLab is not installed in this environment")
    listed = subprocess.run(
        [str(jupyter), "labextension", "list"], capture_output=True, text=True, timeout=120
    )
    text = re.sub(r"\x1b\[[0-9;]*m", "", listed.stdout + listed.stderr)
    assert re.search(r"jupyterlab-myst v\S+ enabled OK", text), text
    assert "not compatible" not in text, text


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_install_cell_pins_the_version_that_made_the_outputs(path):
    import mini_transformer

    first = _cells(path)[0]
    assert "install-if-missing" in first["metadata"]["tags"]
    pinned = re.search(r'BOOK_VERSION = "([^"]+)"', _text(first))
    assert pinned and pinned.group(1) == mini_transformer.__version__, "re-run `make execute`"
    assert "@v{BOOK_VERSION}" in _text(first), "the install cell installs that exact version"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_chapter_reads_a_path_into_the_repository(path):
    code = "\n".join(_text(c) for c in _cells(path) if c["cell_type"] == "code")
    for pattern in (
        r"Path\(\s*['\"]\.\.",
        r"open\(\s*['\"](?:\.\./|data/)",
        r"['\"]data/[\w.]+\.json",
    ):
        assert not re.search(pattern, code), f"{path.name} reads a repository path ({pattern})"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_folded_code_is_folded_in_jupyterlab_and_an_asides_output_with_it(path):
    cells = _cells(path)
    for before, cell in zip(cells, cells[1:], strict=False):
        tags = set(cell["metadata"].get("tags", []))
        if cell["cell_type"] != "code" or not tags & {"hide-input", "hide-cell"}:
            continue
        assert cell["metadata"].get("jupyter", {}).get("source_hidden") is True, _text(cell)[:80]
        # the cell computing a folded aside shows nothing in the open: its output folds too
        aside = _text(before).rstrip()
        last = aside[aside.rfind(":::{") :] if ":::{" in aside else ""
        if before["cell_type"] == "markdown" and last.startswith(":::{dropdown}"):
            assert "hide-cell" in tags, f"aside cell shows its output: {_text(cell)[:80]}"


@pytest.mark.parametrize("path", [*CHAPTERS, *ROOT.glob("book/*.md")], ids=lambda p: p.name)
def test_directives_are_colon_fenced_so_jupyterlab_and_colab_show_markdown(path):
    """A backtick fence (```` ```{dropdown} ````) is a code block to every renderer without
    MyST: JupyterLab without jupyterlab-myst, Colab, GitHub. A colon fence (``:::{dropdown}``)
    shows its content as Markdown there. Code and math fences are not directives."""
    if path.suffix == ".ipynb":
        texts = [_text(c) for c in _cells(path) if c["cell_type"] == "markdown"]
    else:
        texts = [path.read_text()]
    allowed = ("{math}", "{code-cell}", "{code}", "{bibliography}", "{toctree}", "{eval-rst}")
    for text in texts:
        for m in re.finditer(r"^\s*`{3,}\s*(\{[\w:-]+\})", text, re.M):
            assert m.group(1) in allowed, f"{path.name}: backtick-fenced {m.group(1)}: use :::"


_EXERCISES_ALONE = """
import json, sys
import matplotlib
matplotlib.use("Agg")
cells = json.load(open(sys.argv[1]))["cells"]
def heading(c, h):
    return c["cell_type"] == "markdown" and h in "".join(c["source"])
start = next(i for i, c in enumerate(cells) if heading(c, "## Exercises"))
end = next(i for i, c in enumerate(cells) if heading(c, "## References"))
ns = {}
for c in cells[start:end]:
    if c["cell_type"] == "code":
        src = "".join(c["source"]).splitlines()
        exec("\\n".join(line for line in src if not line.startswith("%")), ns)
"""


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_exercises_run_without_the_chapter_above(path):
    # a reader who opens a notebook at its Exercises (or copies them out) runs only the
    # import cell the section starts with: a name it forgets fails here (NameError), as
    # chapter 1's `positional` did
    done = subprocess.run(
        [sys.executable, "-c", _EXERCISES_ALONE, str(path)],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "OMP_NUM_THREADS": "1"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
