"""``make test-notebooks``: test the chapters the way a Colab reader runs them.

1. Build a wheel of the package and install it (``pip install --no-deps --target``) into a
   temporary folder outside the repository: the chapters import that copy, not the
   repository's source, so package data missing from the wheel fails here.
2. Copy each chapter, alone, into an empty folder of its own: a chapter that reads a path
   relative to the repository (``data/x.json``, ``../mini_transformer``) fails here.
3. In those folders, two checks per chapter, each executing it once:
   - ``tests/notebooks/rerun_check.py`` with this CPU's kernels: every code cell run twice in a
     row; its first run reproduces the stored output as strict nbval compares it (the same
     fields, the same sanitiser: ``tools/rerun_cells.py``), and its second run prints the same
     text as its first;
   - nbval itself (strict mode) under *another CPU's arithmetic* (``OTHER_CPU``: torch's
     portable kernels instead of this CPU's AVX2/AVX-512 ones, and MKL's conditional numerical
     reproducibility set to its SSE2 code path), so that an assert or a printed digit that
     holds only on the machine that made the outputs fails here too.
   (Until 2026-12 nbval also ran a third time, with this CPU's kernels; the first check's
   comparison does that work and saves one execution of every chapter, about 3 minutes.)

The 2 x (number of chapters) checks are separate pytest runs, one per core at a time, longest
first (each chapter's time from ``book/_data/execution_report.json``; running every cell twice
costs two, the portable kernels about two), so that the cores finish together: one long serial
run per check would leave a core idle while the slowest finished.

Usage: ``python tools/test_notebooks.py [book/NN_name.ipynb ...]`` (default: all chapters).
Prints each check's result as it ends, the whole pytest output of a failing one, and exits with
the first non-zero status.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
# Another CPU's arithmetic, reproduced on this one: torch dispatches its vectorised kernels by
# CPU (AVX-512 here, AVX2 or none elsewhere) and MKL picks its matmul code path the same way.
# Each reorders float32 sums, so a value printed to its last digit, or compared at rtol 1e-6,
# differs. Both variables are read once, at import time.
OTHER_CPU = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}
KERNELS = "import torch; print(torch.backends.cpu.get_cpu_capability())"


def install_wheel(where: Path) -> Path:
    """Build the package's wheel and install it under ``where/site``; return that folder."""
    dist, site, src = where / "dist", where / "site", where / "src"
    # Build from a clean copy: setuptools' build/ folder in the repository could carry files
    # that no longer exist in the source into the wheel.
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    shutil.copytree(ROOT / "mini_transformer", src / "mini_transformer", ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    quiet = {"check": True, "stdout": subprocess.DEVNULL}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(dist), str(src)],
        **quiet,
    )  # fmt: skip
    (wheel,) = dist.glob("mini_transformer-*.whl")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
         str(wheel)],
        **quiet,
    )  # fmt: skip
    return site


def sandbox(where: Path, notebooks: list[Path]) -> Path:
    """Each chapter alone in an empty folder ``where/chapters/<stem>/``."""
    chapters = where / "chapters"
    for nb in notebooks:
        (chapters / nb.stem).mkdir(parents=True)
        shutil.copy2(nb, chapters / nb.stem / nb.name)
    shutil.copy2(ROOT / ".ci" / "nbval_sanitize.cfg", where / "nbval_sanitize.cfg")
    return chapters


def stored_seconds() -> dict[str, float]:
    """Each chapter's execution time as ``make execute`` last recorded it (for the order)."""
    report = ROOT / "book" / "_data" / "execution_report.json"
    if not report.exists():
        return {}
    rows = json.loads(report.read_text())["notebooks"]
    return {row["notebook"]: float(row["seconds"]) for row in rows}


def main(argv: list[str]) -> int:
    notebooks = [Path(a).resolve() for a in argv] or sorted(
        (ROOT / "book").glob("[0-9][0-9]_*.ipynb")
    )
    with tempfile.TemporaryDirectory(prefix="mini_transformer_chapters_") as tmp:
        where = Path(tmp)
        site = install_wheel(where)
        chapters = sandbox(where, notebooks)
        env = dict(
            os.environ,
            PYTHONPATH=str(site),
            MT_CHAPTERS=str(chapters),
            MT_EXPECTED_CHAPTERS=str(len(notebooks)),
        )
        # The kernels must import the installed wheel, not the repository's source.
        probe = "import mini_transformer as m; print(m.__file__, m.__version__)"
        found = subprocess.run(
            [sys.executable, "-c", probe], env=env, cwd=where, capture_output=True, text=True
        ).stdout.split()
        if not found or not found[0].startswith(str(site)):
            print(f"the wheel is not what the chapters import: {found}", file=sys.stderr)
            return 1
        print(f"chapters run alone in {chapters}; mini_transformer {found[1]} from {site}")
        other = dict(env, **OTHER_CPU)
        native, portable = (
            subprocess.run(
                [sys.executable, "-c", KERNELS], env=e, capture_output=True, text=True
            ).stdout.strip()
            for e in (env, other)
        )
        print(f"stored outputs with this CPU's kernels ({native}, run-twice check) and with "
              f"another CPU's ({portable}, nbval, "
              f"{' '.join(f'{k}={v}' for k, v in OTHER_CPU.items())})")  # fmt: skip
        copy = where / "other_cpu"
        shutil.copytree(chapters, copy)
        nbval = PYTEST + ["--nbval", "--nbval-current-env", "--nbval-sanitize-with",
                          str(where / "nbval_sanitize.cfg")]  # fmt: skip
        rerun = PYTEST + [str(ROOT / "tests" / "notebooks" / "rerun_check.py")]
        seconds = stored_seconds()
        jobs = []  # (cost, name, command, environment)
        for nb in notebooks:
            cost = seconds.get(nb.name, 60.0)
            one = dict(
                env,
                MT_CHAPTERS=str(chapters / nb.stem),
                MT_EXPECTED_CHAPTERS="1",
                MT_COMPARE_STORED="1",
            )
            jobs += [
                (2 * cost, f"nbval {nb.stem} (another CPU)", nbval + [str(copy / nb.stem)], other),
                (2 * cost, f"stored + run-twice {nb.stem} (this CPU)", rerun, one),
            ]
        jobs.sort(key=lambda job: -job[0])

        def run(job: tuple) -> int:
            _, name, command, environment = job
            began = time.monotonic()
            done = subprocess.run(
                command, env=environment, cwd=where, capture_output=True, text=True
            )
            tail = done.stdout.strip().splitlines()[-1:] or ["(no output)"]
            print(f"{name}: {tail[0]} [{time.monotonic() - began:.0f} s]", flush=True)
            if done.returncode:
                print(done.stdout + done.stderr, flush=True)
            return done.returncode

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            codes = list(pool.map(run, jobs))
    return next((c for c in codes if c), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
