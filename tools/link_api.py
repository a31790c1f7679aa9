"""Link each chapter's first mention of a package function or class to the API reference.

A chapter's markdown mentions package names in backticks (`sinusoidal_encoding`,
`attention.causal_mask`). This script turns the *first* such mention of each public name
in each chapter into a Sphinx cross-reference, ``{py:obj}`name <mini_transformer.mod.name>```,
which the book renders as a link to the API appendix (and ``make book`` with ``-n`` fails
if the target does not exist). Later mentions stay plain, so the prose is not a sea of
links. Code cells and fenced code in markdown are left alone; the script is idempotent.

Usage: ``python tools/link_api.py [book/NN_name.ipynb ...]`` (default: all chapters).
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
MODULES = [
    "positional",
    "memn2n",
    "alibi",
    "attention",
    "masks",
    "additive",
    "layers",
    "model",
    "data",
    "tasks",
    "train",
    "exercises",
    "lab",
    "stability",
    "plotting",
]
# Names that are also ordinary words in the prose (a split called "train", ...).
SKIP = {"train", "data", "model", "setup", "main", "check_mask"}
# Prefixes that name other libraries' objects with the same names as ours.
FOREIGN = {"nn", "F", "functional", "torch", "np", "numpy", "math", "sklearn", "plt", "tf"}


def public_names() -> dict[str, str]:
    """name -> fully qualified target, for the documented functions and classes."""
    targets: dict[str, str] = {}
    for mod_name in MODULES:
        mod = importlib.import_module(f"mini_transformer.{mod_name}")
        names = getattr(mod, "__all__", None) or [n for n in vars(mod) if not n.startswith("_")]
        for name in names:
            obj = getattr(mod, name, None)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            if getattr(obj, "__module__", "") != mod.__name__ or not obj.__doc__:
                continue
            if name in SKIP:
                continue
            targets.setdefault(name, f"mini_transformer.{mod_name}.{name}")
    return targets


def link_notebook(path: Path, targets: dict[str, str]) -> int:
    nb = nbformat.read(path, as_version=4)
    linked = set(
        re.findall(
            r"<mini_transformer\.\w+\.(\w+)>",
            "".join(c.source for c in nb.cells if c.cell_type == "markdown"),
        )
    )
    # `name`, `module.name`, `P.name`, `name(...)` or `name()` in backticks, not already a role
    pattern = re.compile(r"(?<![`}\w])`((?:mini_transformer\.)?\w+\.)?(\w+)(\([^`]*\))?`")
    changes = 0
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        parts = re.split(r"(```.*?```)", cell.source, flags=re.S)  # keep fenced code as is
        for i in range(0, len(parts), 2):

            def repl(m: re.Match) -> str:
                nonlocal changes
                prefix, name = (m.group(1) or "").rstrip("."), m.group(2)
                if prefix.split(".")[-1] in FOREIGN:  # nn.LayerNorm is PyTorch's, not ours
                    return m.group(0)
                if name not in targets or name in linked:
                    return m.group(0)
                linked.add(name)
                changes += 1
                shown = m.group(0)[1:-1]
                return f"{{py:obj}}`{shown} <{targets[name]}>`"

            parts[i] = pattern.sub(repl, parts[i])
        cell.source = "".join(parts)
    if changes:
        nbformat.write(nb, path)
    return changes


def main(argv: list[str]) -> int:
    targets = public_names()
    paths = [Path(a) for a in argv] or sorted((ROOT / "book").glob("[0-9]*.ipynb"))
    for path in paths:
        print(f"{path.name}: {link_notebook(path, targets)} new API links")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
