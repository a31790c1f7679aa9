"""The package stays one a reader can hold in their head (issue 24's budget).

The measures are ``tools/package_stats.py``'s, the method of the 2026-11-24 package-style
review: a change that grows the package past its budget has to shrink something else.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import package_stats as ps  # noqa: E402

STATS = {str(f.relative_to(ps.PKG)): ps.module_stats(f) for f in sorted(ps.PKG.rglob("*.py"))}


# 7,000 lines until 2026-11-29, then 7,250: the three diagrams chapters 4-6 draw from the package
# (issue 33 asked for them in the plotting module: about 170 lines) were paid for in part by the
# check-once and trimming work of issue 35; what remains over 7,000 is those figures.
LINE_BUDGET = 7250


def test_package_within_its_line_budget_and_every_module_within_500():
    assert sum(s["lines"] for s in STATS.values()) <= LINE_BUDGET
    assert max(s["lines"] for s in STATS.values()) <= 500


def test_teaching_modules_at_most_a_fifth_argument_checks():
    teach = [STATS[f"{m}.py"] for m in ps.TEACHING]
    assert sum(s["check"] for s in teach) <= 0.20 * sum(s["code"] for s in teach)


def test_at_most_110_public_names():
    assert len({n for s in STATS.values() for n in s["exports"]}) <= 110


def test_the_classifier_sees_checks():  # so the share above cannot pass by counting nothing
    assert STATS["checks.py"]["check"] > 0.5 * STATS["checks.py"]["code"]


@pytest.mark.parametrize(
    ("mode", "args", "limit"), [("forward", (), 4), ("cli", ("--steps", "1"), 10)]
)
def test_reading_paths(mode, args, limit, tmp_path):
    if mode == "cli":
        args = ("--preset", "tiny", *args, "--out", str(tmp_path / "run"))
    modules = ps.traced_modules(mode, *args)
    assert "model.py" in modules  # the trace saw the package at all
    assert len(modules) <= limit, modules
