"""Sphinx extension: render ``$...$`` and ``$$...$$`` in the package's docstrings as math.

The docstrings of ``mini_transformer`` write formulas the way the chapters do (LaTeX between
dollar signs), which reads well in the source and in ``help()``. reStructuredText has no
dollar math, so before autodoc renders a docstring this hook turns ``$$...$$`` into a
``.. math::`` block and ``$...$`` into the ``:math:`` role. MathJax (bundled, offline)
renders both.
"""

from __future__ import annotations

import re

_DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
_INLINE = re.compile(r"(?<![\\$`])\$(?!\$)([^$\n]+?)(?<!\\)\$(?!\$)")


def _display(text: str) -> str:
    def repl(m: re.Match) -> str:
        start = text.rfind("\n", 0, m.start()) + 1
        indent = re.match(r"[ \t]*", text[start:]).group(0)
        body = "\n".join(indent + "   " + line.strip() for line in m.group(1).strip().splitlines())
        return f"\n\n{indent}.. math::\n\n{body}\n\n{indent}"

    return _DISPLAY.sub(repl, text)


def convert(app, what, name, obj, options, lines: list[str]) -> None:
    text = "\n".join(lines)
    if "$" not in text:
        return
    text = _display(text)
    text = _INLINE.sub(lambda m: f":math:`{m.group(1)}`", text)
    lines[:] = text.splitlines()


def setup(app):
    # before napoleon (priority 500), so the math survives its section parsing
    app.connect("autodoc-process-docstring", convert, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
