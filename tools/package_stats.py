"""How big the package is to read: the measures of the 2026-11-24 package-style review.

    python tools/package_stats.py            # the table
    python tools/package_stats.py --modules  # and one row per module

Lines come from the files; "code lines" leave out docstrings, comments and blank lines (read
with ``ast`` and ``tokenize``). A "check line" is a code line of a statement whose only job is
validation: a ``check_*``/``_check*`` call or function, an ``if`` whose body only raises
``ValueError``/``TypeError``, an ``assert``, or a loop whose body is only checks. The
classifier is a heuristic, like the review's (treat shares as +-5%).

The two reading paths are traced with ``sys.setprofile``: the package modules whose Python
code runs (functions called, not code run while a module is imported) while a default
``TransformerLM`` is built and runs one forward with targets, and while
``python -m mini_transformer.train --preset tiny --steps 1`` runs (in a subprocess).
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import subprocess
import sys
import tempfile
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "mini_transformer"
TEACHING = ("positional", "memn2n", "alibi", "attention", "masks", "layers", "model")


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def _code_lines(source: str, tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip and tok.type != tokenize.ENDMARKER:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return lines - _docstring_lines(tree)


def _is_check_name(name: str) -> bool:
    return name.startswith(("check_", "_check"))


def _call_name(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        f = node.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
    return ""


def _is_check(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Assert):
        return True
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return _is_check_name(stmt.name)
    if isinstance(stmt, ast.Expr):
        return _is_check_name(_call_name(stmt.value))
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
        return _is_check_name(_call_name(stmt.value))
    if isinstance(stmt, ast.Raise):
        exc = stmt.exc
        return _call_name(exc) in ("ValueError", "TypeError") or (
            isinstance(exc, ast.Name) and exc.id in ("ValueError", "TypeError")
        )
    if isinstance(stmt, ast.If):
        return all(_is_check(s) for s in stmt.body) and all(_is_check(s) for s in stmt.orelse)
    if isinstance(stmt, ast.For):
        return all(_is_check(s) for s in stmt.body) and not stmt.orelse
    return False


def _check_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and _is_check(node):
            lines.update(range(node.lineno, node.end_lineno + 1))
    return lines


def module_stats(path: Path) -> dict:
    source = path.read_text()
    tree = ast.parse(source)
    code = _code_lines(source, tree)
    exports: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            exports = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    return {
        "lines": len(source.splitlines()),
        "code": len(code),
        "check": len(code & _check_lines(tree)),
        "exports": exports,
    }


_TRACE = r"""
import sys, os, runpy
root = sys.argv[1]; mode = sys.argv[2]
seen = []
entry = os.path.join(root, "train.py")
def importing(frame):
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith("<frozen importlib"):  # an import statement's work
            return True
        if code.co_name == "<module>" and code.co_filename.startswith(root):
            if code.co_filename != entry:
                return True
        frame = frame.f_back
    return False
def prof(frame, event, arg):
    if event == "call":
        f = frame.f_code.co_filename
        if f.startswith(root) and f not in seen and not importing(frame):
            seen.append(f)
if mode == "forward":
    import torch
    from mini_transformer.model import TransformerConfig, TransformerLM
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=65, block_size=32, d_model=32, n_heads=2, n_layers=2)
    idx = torch.randint(0, 65, (2, 16))
    sys.setprofile(prof)
    model = TransformerLM(cfg)
    sys.setprofile(None)
    built = list(seen)
    seen.clear()
    sys.setprofile(prof)
    model(idx, idx)
    sys.setprofile(None)
    seen[:0] = [f for f in built if f not in seen]
else:
    sys.argv = ["mini_transformer.train"] + sys.argv[3:]
    sys.setprofile(prof)
    try:
        runpy.run_module("mini_transformer.train", run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    sys.setprofile(None)
print("\n".join(os.path.relpath(f, root) for f in seen), file=sys.__stderr__)
"""


def traced_modules(mode: str, *args: str) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-c", _TRACE, str(PKG), mode, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    files = [line for line in proc.stderr.splitlines() if line.endswith(".py")]
    if not files:
        raise SystemExit(f"trace {mode} failed:\n{proc.stdout}\n{proc.stderr}")
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", action="store_true", help="one row per module")
    parser.add_argument("--no-trace", action="store_true", help="skip the two traces")
    args = parser.parse_args()
    files = sorted(PKG.rglob("*.py"))
    stats = {str(f.relative_to(PKG)): module_stats(f) for f in files}
    total = sum(s["lines"] for s in stats.values())
    if args.modules:
        print(f"{'module':36} {'lines':>6} {'code':>6} {'check':>6} exports")
        for name, s in sorted(stats.items(), key=lambda kv: -kv[1]["lines"]):
            share = s["check"] / max(s["code"], 1)
            sizes = f"{s['lines']:6} {s['code']:6} {s['check']:4} {share:4.0%}"
            print(f"{name:36} {sizes} {len(s['exports'])}")
    teach = [stats[f"{m}.py"] for m in TEACHING if f"{m}.py" in stats]
    t_code, t_check = sum(s["code"] for s in teach), sum(s["check"] for s in teach)
    names = [n for s in stats.values() for n in s["exports"]]
    exercises = sum(s["lines"] for n, s in stats.items() if n.startswith("exercises/"))
    print(f"package: {len(files)} files, {total} lines ({total - exercises} outside exercises/)")
    largest = max(stats.items(), key=lambda kv: kv[1]["lines"])
    print(f"largest module: {largest[0]} {largest[1]['lines']} lines")
    print(f"teaching modules: {t_check}/{t_code} check lines = {t_check / t_code:.0%}")
    print(f"exports: {len(names)} __all__ entries, {len(set(names))} distinct names")
    if not args.no_trace:
        fwd = traced_modules("forward")
        print(f"forward of TransformerLM: {len(fwd)} modules run: {' '.join(fwd)}")
        with tempfile.TemporaryDirectory() as out:
            step = traced_modules("cli", "--preset", "tiny", "--steps", "1", "--out", out)
        print(f"CLI step (--preset tiny --steps 1): {len(step)} modules run: {' '.join(step)}")


if __name__ == "__main__":
    main()
