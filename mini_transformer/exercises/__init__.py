"""Self-checking exercises: ``check(name, answer)`` tells a reader whether an answer is right.

How a verdict is reached. Each exercise is one block below: a *reference* (the answer,
written independently of the rest of the package, as the package's own tests are), the
function that draws random inputs for it, fixed *edge cases* chosen for the classic
mistakes of that exercise (a fully masked row, a step past the end of a schedule, large
logits in float32, an input that must not be modified), and a few named *mistakes*.
:func:`check` runs the reader's function on every edge case and on fresh random cases,
compares each result with the reference and stops at the first disagreement. It then
prints the inputs, the seed that reproduces the case, what differs, and, when the
reader's output equals one of the named mistakes, the mistake's name ("the transpose
R(-offset)", "Post-LN instead of Pre-LN", ...).

Fresh cases on every call: an answer cannot pass by memorising inputs. The random cases
come from a NumPy generator seeded by a new seed on each call (or by ``seed=``), and a
failure message names that seed, so ``check(name, answer, seed=...)`` replays it.

The reader's code cannot break the notebook: every exception it raises is reported,
never raised; it runs under a time limit (``time_limit`` seconds in all, a SIGALRM timer
in the main thread, which interrupts a Python loop inside a Jupyter kernel); it gets
copies of the inputs, and an input it modified in place is reported; the global random
states of Python, NumPy and torch are restored after it ran.

In a chapter::

    from mini_transformer import exercises

    def my_binary(n, n_bits):
        ...  # your code here
    exercises.check("binary-encoding", my_binary)

:func:`check` prints one line (``✓ ...`` or ``✗ ...``) and returns a :class:`Verdict`,
true when the answer passed, which Jupyter does not echo; solution cells call
``assert exercises.check(...)`` so CI executes every solution against its checker.
"""

from __future__ import annotations

import copy
import math
import random
import secrets
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["Exercise", "Verdict", "exercise", "check", "available", "describe"]

# --------------------------------------------------------------------------------------
# The machinery
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exercise:
    """One exercise.

    Attributes:
        name: what readers pass to :func:`check`, e.g. ``"binary-encoding"``.
        task: one sentence saying what the answer must compute.
        reference: the answer. For a function exercise it takes the same arguments as the
            reader's function; for a value exercise it takes none.
        inputs: ``rng -> tuple`` of arguments for one random case; ``None`` for a value
            exercise.
        edge_cases: ``{description: arguments}`` tried before the random cases.
        mistakes: ``{name of the mistake: wrong function (or wrong value)}``; when the
            reader's output equals one of them the message names the mistake.
        compare: ``(expected, got) -> None | str`` (``None`` when they agree).
        n_random: how many random cases each call tries.
    """

    name: str
    task: str
    reference: Callable[..., Any]
    inputs: Callable[[np.random.Generator], tuple] | None
    edge_cases: dict[str, tuple] = field(default_factory=dict)
    mistakes: dict[str, Any] = field(default_factory=dict)
    compare: Callable[[Any, Any], str | None] | None = None
    n_random: int = 10


@dataclass(frozen=True)
class Verdict:
    """What :func:`check` found: true when the answer passed.

    ``seed`` replays the random cases (``check(name, answer, seed=verdict.seed)``).
    Jupyter does not echo a verdict (the message has already been printed).
    """

    name: str
    passed: bool
    message: str
    seed: int | None = None

    def __bool__(self) -> bool:
        return self.passed

    def _ipython_display_(self) -> None:  # printed by check already; show nothing more
        pass


_REGISTRY: dict[str, Exercise] = {}


def exercise(
    name: str,
    task: str,
    *,
    inputs: Callable[[np.random.Generator], tuple] | None = None,
    edge_cases: dict[str, tuple] | None = None,
    mistakes: dict[str, Any] | None = None,
    compare: Callable[[Any, Any], str | None] | None = None,
    n_random: int = 10,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the reference answer of exercise ``name``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if name in _REGISTRY:
        raise ValueError(f"an exercise named {name!r} is already registered")
    if not isinstance(n_random, int) or n_random < 0:
        raise ValueError(f"n_random must be a non-negative integer, got {n_random!r}")
    if inputs is not None and n_random == 0 and not edge_cases:
        raise ValueError(f"exercise {name!r} would check nothing: give n_random > 0 or edge_cases")

    def register(reference: Callable[..., Any]) -> Callable[..., Any]:
        _REGISTRY[name] = Exercise(
            name,
            task,
            reference,
            inputs,
            dict(edge_cases or {}),
            dict(mistakes or {}),
            compare,
            n_random,
        )
        return reference

    return register


def available() -> list[str]:
    """The names of all exercises, sorted."""
    return sorted(_REGISTRY)


def describe(name: str) -> str:
    """The one-sentence task of exercise ``name``."""
    return _get(name).task


def _get(name: str) -> Exercise:
    if name not in _REGISTRY:
        raise ValueError(f"unknown exercise {name!r}; available: {', '.join(available())}")
    return _REGISTRY[name]


# --- comparing ------------------------------------------------------------------------


def _array(x: Any) -> np.ndarray | None:
    """x as a NumPy array when it is array-like (tensor, array, number, list of numbers)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        return x.double().numpy() if x.is_floating_point() else x.numpy()
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 2**62:
        return np.asarray(float(x))  # counts of FLOPs exceed int64
    if isinstance(x, (bool, int, float, np.number, np.bool_)):
        return np.asarray(x)
    if isinstance(x, (list, tuple)) and all(
        isinstance(e, (bool, int, float, np.number, np.bool_)) for e in x
    ):
        return np.asarray(x)
    return None


def _dtype_name(x: Any) -> str:
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return str(x.dtype).replace("torch.", "")
    return type(x).__name__


def close(rtol: float = 1e-5, atol: float = 1e-6, same_dtype: bool = False):
    """A comparison of numbers, arrays and tensors (and tuples of them) within tolerances.

    ``same_dtype``: a tensor or array answer must have the reference's dtype (a mask must
    be bool; a float32 input gives a float32 output).
    """

    def compare(expected: Any, got: Any) -> str | None:
        if isinstance(expected, tuple):
            if not isinstance(got, tuple) or len(got) != len(expected):
                return f"expected a tuple of {len(expected)} items, got {_describe(got)}"
            for i, (e, g) in enumerate(zip(expected, got, strict=True)):
                msg = compare(e, g)
                if msg is not None:
                    return f"item {i} of the tuple: {msg}"
            return None
        e, g = _array(expected), _array(got)
        if g is None or g.dtype == object:
            return f"expected {_describe(expected)}, got {_describe(got)}"
        if same_dtype and isinstance(expected, (torch.Tensor, np.ndarray)):
            if _dtype_name(got) != _dtype_name(expected):
                return f"expected dtype {_dtype_name(expected)}, got {_dtype_name(got)}"
        if e.shape != g.shape:
            return f"expected shape {tuple(e.shape)}, got shape {tuple(g.shape)}"
        if g.dtype.kind in "fc" and (~np.isfinite(g) & np.isfinite(e)).any():
            return "your answer contains NaN or inf"
        if e.dtype == bool or g.dtype == bool:
            bad = np.argwhere(e != g)
        else:
            bad = np.argwhere(~np.isclose(g, e, rtol=rtol, atol=atol))
        if len(bad):
            idx = tuple(int(i) for i in bad[0])
            where = f" at index {idx}" if idx else ""
            return f"expected {_num(e[idx])}{where}, got {_num(g[idx])}" + (
                f" ({len(bad)} of {e.size} entries differ)" if e.size > 1 else ""
            )
        return None

    return compare


def exact_int(expected: Any, got: Any) -> str | None:
    """An integer answer (a position, a count): exactly right or wrong. ``None`` allowed."""
    if expected is None or got is None:
        return None if got is expected else f"expected {expected!r}, got {_describe(got)}"
    if isinstance(got, (bool, np.bool_)) or not isinstance(got, (int, np.integer)):
        return f"expected an integer, got {_describe(got)}"
    if int(got) != expected:
        return f"expected {expected:,}, got {int(got):,}"
    return None


def int_list(expected: list[int], got: Any) -> str | None:
    """A list of integers, in order (a NumPy or torch vector is accepted)."""
    g = _array(got)
    if g is None or g.ndim != 1 or (g.size and g.dtype.kind not in "iu"):
        return f"expected a list of integers, got {_describe(got)}"
    return None if g.tolist() == list(expected) else f"expected {expected}, got {g.tolist()}"


def _num(x: Any) -> str:
    x = x.item() if hasattr(x, "item") else x
    return f"{x:.6g}" if isinstance(x, float) else repr(x)


def _describe(x: Any) -> str:
    """A short description of a value for a message: never a module's full repr."""
    if isinstance(x, nn.Module):
        return f"a {type(x).__name__} module"
    if isinstance(x, (torch.Tensor, np.ndarray)):
        kind = "tensor" if isinstance(x, torch.Tensor) else "array"
        if x.ndim == 0:
            return f"a 0-d {kind} ({_dtype_name(x)}) {_num(x)}"
        if (x.size if isinstance(x, np.ndarray) else x.numel()) <= 12:
            a = _array(x)
            vals = np.array2string(a, precision=4, separator=", ", threshold=12)
            return f"{kind} {_dtype_name(x)} {vals}".replace("\n", "")
        return f"a {kind} of shape {tuple(x.shape)} ({_dtype_name(x)})"
    if isinstance(x, (list, tuple)) and len(x) > 8:
        return f"a {type(x).__name__} of {len(x)} items"
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _same(a: Any, b: Any) -> bool:
    """True when a and b are equal values (NaN equal to NaN), for naming mistakes."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    x, y = _array(a), _array(b)
    if x is None or y is None:
        return x is None and y is None and a == b
    if x.shape != y.shape or x.dtype == object or y.dtype == object:
        return False
    if x.dtype.kind in "fc" or y.dtype.kind in "fc":
        return bool(np.allclose(x, y, rtol=1e-4, atol=1e-6, equal_nan=True))
    return bool((x == y).all())


def _copy(args: tuple) -> tuple:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else copy.deepcopy(a) for a in args)


def _unchanged(before: Any, after: Any) -> bool:
    if isinstance(before, torch.Tensor):
        return before.dtype == after.dtype and torch.equal(before, after)
    if isinstance(before, np.ndarray):
        return before.dtype == after.dtype and np.array_equal(before, after, equal_nan=True)
    if isinstance(before, nn.Module):
        s1, s2 = before.state_dict(), after.state_dict()
        return s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)
    return True


# --- running the reader's code --------------------------------------------------------


class _TimeUp(BaseException):
    """Raised inside the reader's code when its time is up (not an Exception: a bare
    ``except Exception`` in the reader's code cannot swallow it)."""


def _run_limited(fn: Callable[..., Any], args: tuple, seconds: float) -> tuple[str, Any]:
    """Call fn(*args) within ``seconds``: ("ok", value), ("error", exception) or ("timeout", None).

    In the main thread (a script, a Jupyter kernel) a SIGALRM timer interrupts the call;
    elsewhere the call runs in a daemon thread that is abandoned when the time is up.
    The random states of Python, NumPy and torch are restored afterwards, so the reader's
    code does not shift the notebook's own random numbers.
    """
    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            if threading.current_thread() is threading.main_thread() and hasattr(
                signal, "setitimer"
            ):
                return _run_with_alarm(fn, args, seconds)
            return _run_in_thread(fn, args, seconds)
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


def _run_with_alarm(fn, args, seconds):
    def time_up(signum, frame):
        raise _TimeUp

    previous = signal.signal(signal.SIGALRM, time_up)
    try:
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
        try:
            return "ok", fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _TimeUp:
        return "timeout", None
    except (Exception, SystemExit) as err:  # a reader's bug is reported, not raised
        return "error", err
    finally:
        signal.signal(signal.SIGALRM, previous)


def _run_in_thread(fn, args, seconds):
    box: dict[str, Any] = {}

    def target():
        try:
            box["ok"] = fn(*args)
        except BaseException as err:  # reported to the caller
            box["error"] = err

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        return "timeout", None
    return ("ok", box["ok"]) if "ok" in box else ("error", box["error"])


# --- check ----------------------------------------------------------------------------


def check(name: str, answer: Any, *, seed: int | None = None, time_limit: float = 10.0) -> Verdict:
    """Check a reader's answer to exercise ``name``; print ``✓ ...`` or ``✗ ...``.

    Args:
        name: the exercise's name as given in the chapter (see :func:`available`).
        answer: a function (run on the edge cases and on random cases, compared with the
            reference) or, for a value exercise, the value (or a function of no arguments
            returning it).
        seed: replays the random cases of an earlier call (its message gives the seed);
            by default every call draws new cases.
        time_limit: seconds the reader's code may run in all, across the cases.

    Returns:
        A :class:`Verdict`, true when every case agrees. Exceptions from the reader's code,
        a time-out and an input modified in place are reported in the message, not raised.
        An unknown ``name`` raises ``ValueError`` (that is the caller's mistake, not the
        answer's).
    """
    ex = _get(name)
    if seed is None:
        seed = secrets.randbelow(2**31)
    elif not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
    if not isinstance(time_limit, (int, float)) or not time_limit > 0:
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    if ex.inputs is None:
        passed, msg = _check_value(ex, answer, time_limit)
        seed = None
    else:
        passed, msg = _check_function(ex, answer, int(seed), float(time_limit))
    print(("✓ " if passed else "✗ ") + f"{name}: {msg}")
    return Verdict(name, passed, msg, seed)


def _check_value(ex: Exercise, answer: Any, time_limit: float) -> tuple[bool, str]:
    """A value is right or not; the message never shows the expected value (no spoiler)."""
    compare = ex.compare or close()
    if callable(answer):
        status, answer = _run_limited(answer, (), time_limit)
        if status != "ok":
            return False, _failure(status, answer, time_limit)
    if answer is None:
        return False, "no answer yet (the value is None)."
    expected = ex.reference()
    msg = compare(expected, answer)
    if msg is None:
        return True, "correct."
    if msg.startswith("expected an") or msg.startswith("expected shape"):
        return False, msg + "."  # the kind of answer is wrong: saying so gives nothing away
    side = ""
    e, g = _array(expected), _array(answer)
    if e is not None and g is not None and e.ndim == 0 and g.ndim == 0 and g.dtype.kind in "iuf":
        side = " (too small)" if g < e else " (too large)"
    named = [m for m, wrong in ex.mistakes.items() if _same(wrong, answer)]
    return False, f"{_describe(answer)} is not right{side}." + (
        f" This looks like: {named[0]}." if named else ""
    )


def _failure(status: str, err: Any, time_limit: float) -> str:
    if status == "timeout":
        return (
            f"your code did not finish within {time_limit:g} s in all (an endless loop, "
            "or far too slow); it was stopped."
        )
    if isinstance(err, NotImplementedError):
        return "not implemented yet (your function raised NotImplementedError)."
    return f"your code raised {type(err).__name__}: {err}"


def _check_function(ex: Exercise, answer: Any, seed: int, time_limit: float) -> tuple[bool, str]:
    if not callable(answer):
        return False, f"expected a function, got {_describe(answer)}."
    compare = ex.compare or close()
    rng = np.random.default_rng(seed)
    cases = [(f"edge case '{label}'", args) for label, args in ex.edge_cases.items()]
    cases += [(f"random case {i + 1} (seed {seed})", None) for i in range(ex.n_random)]
    deadline = time.monotonic() + time_limit
    for label, args in cases:
        if args is None:
            args = ex.inputs(rng)
        given = _copy(args)
        expected = ex.reference(*_copy(args))
        status, got = _run_limited(answer, given, deadline - time.monotonic())
        if status != "ok":
            if isinstance(got, NotImplementedError):
                return False, _failure(status, got, time_limit)
            return False, f"{label}, inputs {_show(args)}: {_failure(status, got, time_limit)}"
        changed = [
            i for i, (a, b) in enumerate(zip(args, given, strict=True)) if not _unchanged(a, b)
        ]
        if changed:
            return False, (
                f"{label}, inputs {_show(args)}: your function modified its argument "
                f"{changed[0] + 1} in place; it must leave its inputs unchanged."
            )
        msg = compare(expected, got)
        if msg is not None:
            named = _name_mistake(ex, args, got)
            hint = f" This looks like: {named}." if named else ""
            return False, f"{label}, inputs {_show(args)}: {msg}.{hint}"
    if ex.edge_cases:
        return True, f"all {len(ex.edge_cases)} edge cases and {ex.n_random} random cases agree."
    return True, f"all {ex.n_random} random cases agree."


def _name_mistake(ex: Exercise, args: tuple, got: Any) -> str | None:
    for mistake, wrong in ex.mistakes.items():
        try:
            if _same(wrong(*_copy(args)), got):
                return mistake
        except Exception:  # a mistake that cannot run on these inputs is not this one
            continue
    return None


def _show(args: tuple) -> str:
    return "(" + ", ".join(_describe(a) for a in args) + ")"


# --------------------------------------------------------------------------------------
# The exercises, one block each, chapter by chapter. References are written from the
# formulas (loops where that is clearer), independently of the package's modules.
# --------------------------------------------------------------------------------------

# === Chapter 1: why position ===========================================================


def _bits(n: int, n_bits: int, msb_first: bool = False, first: int = 0) -> np.ndarray:
    out = np.array([[(pos >> k) & 1 for k in range(n_bits)] for pos in range(first, first + n)])
    return out.reshape(n, n_bits)[:, ::-1] if msb_first else out.reshape(n, n_bits)


@exercise(
    "binary-encoding",
    "f(n, n_bits) -> the (n, n_bits) 0/1 matrix whose column k holds bit k of pos, least "
    "significant bit first (positions past 2**n_bits wrap around).",
    inputs=lambda rng: (int(rng.integers(1, 300)), int(rng.integers(1, 10))),
    edge_cases={
        "one position, one bit": (1, 1),
        "more positions than codes": (20, 3),
        "more bits than needed": (5, 12),
    },
    mistakes={
        "most significant bit first (column 0 must be the fastest bit)": lambda n, b: _bits(
            n, b, msb_first=True
        ),
        "positions counted from 1": lambda n, b: _bits(n, b, first=1),
    },
)
def _binary_encoding(n: int, n_bits: int) -> np.ndarray:
    return _bits(n, n_bits)


def _rows(rng: np.random.Generator) -> tuple:
    return (rng.standard_normal((int(rng.integers(2, 40)), int(rng.integers(1, 9)))),)


@exercise(
    "neighbour-distances",
    "f(pe) -> the Euclidean distances between consecutive rows of the (n, d) array pe, "
    "shape (n - 1,).",
    inputs=_rows,
    edge_cases={"two rows, one column": (np.array([[0.0], [-3.0]]),)},
    mistakes={
        "squared distances (no square root)": lambda pe: ((pe[1:] - pe[:-1]) ** 2).sum(axis=1),
        "distances to row 0 instead of to the previous row": lambda pe: np.linalg.norm(
            pe[1:] - pe[0], axis=1
        ),
    },
)
def _neighbour_distances(pe: np.ndarray) -> np.ndarray:
    return np.array(
        [
            math.sqrt(sum((b - a) ** 2 for a, b in zip(pe[p], pe[p + 1], strict=True)))
            for p in range(len(pe) - 1)
        ]
    )


def _first_return(tol: float) -> int:
    pos = np.arange(1, 100_000)
    return int(pos[np.argmax(np.hypot(np.sin(pos), np.cos(pos) - 1.0) < tol)])


@exercise(
    "first-return",
    "The first position pos >= 1 whose point (sin pos, cos pos) lies within 0.01 of the "
    "point of position 0 (an integer).",
    mistakes={
        "the first return within 0.05, not 0.01": _first_return(0.05),
        "one turn, 2 pi ~ 6 radians (the circle never closes exactly)": 6,
    },
    compare=exact_int,
)
def _first_return_answer() -> int:
    return _first_return(0.01)


def _share(n: int, d: int, every_channel: bool = True, n_minus_1: bool = False) -> float:
    p2 = np.mean([(pos / (n - 1 if n_minus_1 and n > 1 else n)) ** 2 for pos in range(n)])
    return float(p2 / (1 + p2)) if every_channel else float(p2 / (d + p2))


@exercise(
    "position-share",
    "f(N, d) -> the expected share of ||x||^2 carried by the position when pos/N is added "
    "to every one of the d channels of an N(0, 1) embedding (averaged over pos = 0..N-1).",
    inputs=lambda rng: (int(rng.integers(1, 200)), int(rng.integers(1, 2049))),
    edge_cases={"one position": (1, 8), "one channel": (10, 1)},
    mistakes={
        "the one-channel share p^2/(d + p^2): a copy in every channel scales the "
        "position's energy by d too": lambda n, d: _share(n, d, every_channel=False),
        "positions scaled by N - 1 instead of N": lambda n, d: _share(n, d, n_minus_1=True),
    },
)
def _position_share(n: int, d: int) -> float:
    signal_ = d * sum((pos / n) ** 2 for pos in range(n))  # sum over pos of E||p||^2
    noise = d * n  # sum over pos of E||e||^2
    return float(signal_ / (signal_ + noise))


def _probe_inputs(rng: np.random.Generator) -> tuple:
    n, d, m = int(rng.integers(20, 60)), int(rng.integers(1, 6)), int(rng.integers(10, 30))
    w, b = rng.normal(size=d), rng.normal(0, 3)
    x, x_test = rng.normal(size=(n, d)), rng.normal(size=(m, d))
    noise = rng.uniform(0.1, 2.0)
    return (
        x,
        x @ w + b + noise * rng.normal(size=n),
        x_test,
        x_test @ w + b + noise * rng.normal(size=m),
    )


def _lstsq_predict(x, y, x_test, intercept=True):
    if intercept:
        x, x_test = np.c_[x, np.ones(len(x))], np.c_[x_test, np.ones(len(x_test))]
    return x_test @ np.linalg.lstsq(x, y, rcond=None)[0]


def _r2(y, pred):
    return float(1 - np.sum((y - pred) ** 2) / np.sum((y - np.mean(y)) ** 2))


@exercise(
    "probe-r2",
    "f(x, y, x_test, y_test) -> the held-out R^2 of a least-squares linear probe (with an "
    "intercept) fitted on (x, y) and scored on (x_test, y_test).",
    inputs=_probe_inputs,
    mistakes={
        "no intercept (the probe is forced through the origin)": lambda x, y, xt, yt: _r2(
            yt, _lstsq_predict(x, y, xt, intercept=False)
        ),
        "scored on the training data (in-sample R^2)": lambda x, y, xt, yt: _r2(
            y, _lstsq_predict(x, y, x)
        ),
    },
)
def _probe_r2(x, y, x_test, y_test) -> float:
    a = np.column_stack([x, np.ones(len(x))])  # (n, d + 1)
    coef = np.linalg.solve(a.T @ a, a.T @ y)  # normal equations
    pred = np.column_stack([x_test, np.ones(len(x_test))]) @ coef
    ss_res = sum((t - p) ** 2 for t, p in zip(y_test, pred, strict=True))
    ss_tot = sum((t - np.mean(y_test)) ** 2 for t in y_test)
    return float(1 - ss_res / ss_tot)


# === Chapter 2: sinusoidal encoding ====================================================


def _omega(d_model: int, base: float = 10000.0) -> np.ndarray:
    """The d_model/2 angular frequencies base^(-2i/d_model), i = 0..d_model/2 - 1."""
    return np.array([base ** (-2 * i / d_model) for i in range(d_model // 2)])


def _pe(n: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """The paper's encoding, interleaved layout: sin in column 2i, cos in column 2i+1."""
    pe = np.zeros((n, d_model))
    for pos in range(n):
        for i, w in enumerate(_omega(d_model, base)):
            pe[pos, 2 * i], pe[pos, 2 * i + 1] = math.sin(pos * w), math.cos(pos * w)
    return pe


def _even(rng: np.random.Generator, high: int = 17) -> int:
    return 2 * int(rng.integers(1, high))


@exercise(
    "sinusoidal-encoding",
    "f(n_positions, d_model) -> the (n_positions, d_model) sinusoidal encoding, paper layout "
    "(sin in even columns, cos in odd columns, base 10000).",
    inputs=lambda rng: (int(rng.integers(1, 60)), _even(rng)),
    edge_cases={"one position": (1, 4), "two channels": (7, 2)},
    mistakes={
        "the concat layout (all sines, then all cosines)": lambda n, d: np.concatenate(
            [_pe(n, d)[:, 0::2], _pe(n, d)[:, 1::2]], axis=1
        )
    },
)
def _sinusoidal_encoding(n_positions: int, d_model: int) -> np.ndarray:
    return _pe(n_positions, d_model)


@exercise(
    "sinusoidal-dot-offset",
    "f(k, d_model) -> PE[pos] . PE[pos + k] (a float) for the paper's encoding, without "
    "building the encoding.",
    inputs=lambda rng: (int(rng.integers(-200, 201)), _even(rng)),
    edge_cases={"offset 0": (0, 8), "negative offset": (-5, 6), "two channels": (3, 2)},
    mistakes={
        "sines instead of cosines": lambda k, d: float(np.sin(k * _omega(d)).sum()),
        "one frequency per column (d_model terms with exponent 2i/d_model for every "
        "column i)": lambda k, d: float(
            sum(math.cos(k * 10000.0 ** (-2 * i / d)) for i in range(d))
        ),
        "exponent i/d_model instead of 2i/d_model": lambda k, d: float(
            sum(math.cos(k * 10000.0 ** (-i / d)) for i in range(d // 2))
        ),
    },
)
def _dot_offset(k: int, d_model: int) -> float:
    return float(sum(math.cos(k * w) for w in _omega(d_model)))


def _rotation(offset: int, d_model: int, sign: int = 1) -> np.ndarray:
    r = np.zeros((d_model, d_model))
    for i, w in enumerate(_omega(d_model)):
        c, s = math.cos(offset * w), sign * math.sin(offset * w)
        r[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, s], [-s, c]]
    return r


@exercise(
    "rotation-matrix",
    "f(offset, d_model) -> the (d_model, d_model) matrix R with PE[pos + offset] = R @ PE[pos] "
    "for every pos (paper layout, base 10000).",
    inputs=lambda rng: (int(rng.integers(-100, 101)), _even(rng)),
    edge_cases={"offset 0 (the identity)": (0, 4), "offset 1, two channels": (1, 2)},
    mistakes={
        "the transpose R(-offset): rotates the wrong way (PE[pos - offset])": lambda k, d: (
            _rotation(k, d, sign=-1)
        ),
        "frequencies in reverse order (slowest pair first)": lambda k, d: _rotation(k, d)[
            ::-1, ::-1
        ].copy(),
    },
)
def _rotation_matrix(offset: int, d_model: int) -> np.ndarray:
    # PE[pos + k] in block i from PE[pos]: sin(a + b) = sin a cos b + cos a sin b,
    # cos(a + b) = cos a cos b - sin a sin b.
    return _rotation(offset, d_model)


def _near_repeat(d_model, base, n, tol, shift=0, exponent=2):
    pe = np.zeros((n, d_model))
    w = np.array([base ** (-exponent * i / d_model) for i in range(d_model // 2)])
    pe[:, 0::2], pe[:, 1::2] = np.sin(np.arange(n)[:, None] * w), np.cos(np.arange(n)[:, None] * w)
    hits = np.flatnonzero(np.linalg.norm(pe[1:] - pe[0], axis=1) < tol)
    return int(hits[0]) + 1 - shift if len(hits) else None


def _near_repeat_inputs(rng: np.random.Generator) -> tuple:
    return (
        _even(rng, 5),
        float(10 ** rng.uniform(0.5, 4)),
        int(rng.integers(2, 3000)),
        float(rng.uniform(0.05, 0.6)),
    )


@exercise(
    "near-repeat",
    "f(d_model, base, n, tol) -> the smallest pos in 1..n-1 with ||PE[pos] - PE[0]|| < tol "
    "for the sinusoidal encoding with that base, or None if there is none.",
    inputs=_near_repeat_inputs,
    edge_cases={
        "d_model 2, the first return": (2, 10000.0, 400, 0.01),
        "no repeat in range": (2, 10000.0, 300, 0.01),
        "one position": (4, 100.0, 1, 0.5),
    },
    mistakes={
        "an index into PE[1:], one less than the position": lambda d, b, n, t: _near_repeat(
            d, b, n, t, shift=1
        ),
        "exponent i/d_model instead of 2i/d_model": lambda d, b, n, t: _near_repeat(
            d, b, n, t, exponent=1
        ),
    },
    compare=exact_int,
)
def _near_repeat_ref(d_model: int, base: float, n: int, tol: float) -> int | None:
    pe = _pe(n, d_model, base)
    for pos in range(1, n):
        if math.dist(pe[pos], pe[0]) < tol:
            return pos
    return None


def _rope_half(x, pos, base, sign=1, interleaved=False):
    t, d = x.shape
    h = d // 2
    ang = (
        np.asarray(pos, dtype=np.float64)[:, None]
        * np.array([base ** (-2 * i / d) for i in range(h)])[None, :]
    )
    c, s = np.cos(ang), sign * np.sin(ang)
    out = np.empty_like(x, dtype=np.float64)
    a_idx, b_idx = (
        (np.arange(0, d, 2), np.arange(1, d, 2)) if interleaved else (np.arange(h), np.arange(h, d))
    )
    out[:, a_idx] = x[:, a_idx] * c - x[:, b_idx] * s
    out[:, b_idx] = x[:, a_idx] * s + x[:, b_idx] * c
    return out


def _rope_inputs(rng: np.random.Generator) -> tuple:
    t, d = int(rng.integers(1, 9)), _even(rng, 9)
    return (rng.normal(size=(t, d)), rng.integers(0, 500, size=t), float(rng.choice([100.0, 1e4])))


@exercise(
    "rope-half",
    "f(x, pos, base) -> RoPE in the half-split (concat) layout: for x of shape (T, d), rotate "
    "each pair (x[:, i], x[:, i + d/2]) by the angle pos * base^(-2i/d), counter-clockwise.",
    inputs=_rope_inputs,
    edge_cases={"position 0 (unchanged)": (np.arange(4.0)[None, :], np.array([0]), 1e4)},
    mistakes={
        "adjacent pairs (2i, 2i+1): the interleaved layout, not half-split": lambda x, p, b: (
            _rope_half(x, p, b, interleaved=True)
        ),
        "rotated clockwise (by -pos * theta)": lambda x, p, b: _rope_half(x, p, b, sign=-1),
    },
)
def _rope_half_ref(x: np.ndarray, pos: np.ndarray, base: float) -> np.ndarray:
    t, d = x.shape
    out = np.array(x, dtype=np.float64)
    for row in range(t):
        for i in range(d // 2):
            a = pos[row] * base ** (-2 * i / d)
            u, v = x[row, i], x[row, i + d // 2]
            out[row, i], out[row, i + d // 2] = (
                u * math.cos(a) - v * math.sin(a),
                u * math.sin(a) + v * math.cos(a),
            )
    return out


# === Chapter 3: MemN2N, learned and relative encodings =================================


def _alibi(n_heads, t, first=1, sign=-1, signed=False):
    out = np.empty((n_heads, t, t))
    for h in range(n_heads):
        m = 2.0 ** (-8.0 * (h + first) / n_heads)
        for i in range(t):
            for j in range(t):
                out[h, i, j] = sign * m * ((i - j) if signed else abs(i - j))
    return out


@exercise(
    "alibi-bias",
    "f(n_heads, T) -> the (n_heads, T, T) ALiBi bias -m_h |i - j| with slopes "
    "m_h = 2^(-8h/n_heads) for h = 1..n_heads (n_heads a power of two).",
    inputs=lambda rng: (int(2 ** rng.integers(0, 5)), int(rng.integers(1, 13))),
    edge_cases={"one head": (1, 4), "one position": (4, 1)},
    mistakes={
        "slopes from h = 0 (the first head gets slope 1)": lambda n, t: _alibi(n, t, first=0),
        "a positive bias (+m|i - j| rewards distant keys)": lambda n, t: _alibi(n, t, sign=1),
        "signed distance i - j instead of |i - j|": lambda n, t: _alibi(n, t, signed=True),
    },
)
def _alibi_ref(n_heads: int, T: int) -> np.ndarray:
    return _alibi(n_heads, T)


def _memn2n(J, d):
    """MemN2N's l_kj = (1 - j/J) - (k/d)(1 - 2j/J), 1-based j, k; row j-1, column k-1."""
    return np.array(
        [
            [(1 - j / J) - (k / d) * (1 - 2 * j / J) for k in range(1, d + 1)]
            for j in range(1, J + 1)
        ]
    )


@exercise(
    "memn2n-blind",
    "f(J, d) -> the sorted 1-based dimensions k of MemN2N's sentence vector that no swap of "
    "two words (J >= 2) can change, for any embedding.",
    inputs=lambda rng: (int(rng.integers(2, 13)), int(rng.integers(1, 41))),
    edge_cases={"odd d": (5, 7), "even d": (3, 10), "d = 2": (2, 2)},
    mistakes={
        "0-based index": lambda J, d: [d // 2 - 1] if d % 2 == 0 else [],
        "d/2 rounded for odd d": lambda J, d: [max(1, round(d / 2))],
    },
    compare=int_list,
)
def _memn2n_blind(J: int, d: int) -> list[int]:
    l_ = _memn2n(J, d)
    return [k + 1 for k in range(d) if np.ptp(l_[:, k]) < 1e-12]  # l_kj the same for every j


def _unseen(T, L, causal=True, strict=False):
    pairs = [(i, j) for i in range(T) for j in range(T) if (j <= i or not causal)]
    bad = [1 for i, j in pairs if (abs(i - j) > L if strict else abs(i - j) >= L)]
    return len(bad) / len(pairs)


@exercise(
    "unseen-offsets",
    "f(T, L) -> the share of causal (query i, key j <= i) pairs in a sequence of length T whose "
    "offset i - j was never seen when training on sequences of length L.",
    inputs=lambda rng: (int(rng.integers(1, 80)), int(rng.integers(1, 40))),
    edge_cases={"T = L (nothing unseen)": (16, 16), "T = 2L": (32, 16), "T = L + 1": (9, 8)},
    mistakes={
        "all T^2 pairs, not only causal ones": lambda T, L: _unseen(T, L, causal=False),
        "offsets > L: the longest trained offset is L - 1, so L is unseen": lambda T, L: _unseen(
            T, L, strict=True
        ),
        "share of unseen query positions (i >= L) instead of pairs": lambda T, L: max(0, T - L) / T,
    },
)
def _unseen_offsets(T: int, L: int) -> float:
    pairs = T * (T + 1) // 2  # offsets r = 0..T-1, T - r pairs each
    unseen = sum(T - r for r in range(L, T))  # offsets r >= L
    return unseen / pairs


def _window_inputs(rng: np.random.Generator) -> tuple:
    T = int(rng.integers(1, 300))
    return float(2.0 ** -rng.integers(1, 9)), T, int(rng.integers(1, T + 1))


def _window(m, T, w, base2=False, plus=0):
    wts = np.array([(2.0 if base2 else math.e) ** (-m * r) for r in range(T)])
    return float(wts[: w + plus].sum() / wts.sum())


@exercise(
    "alibi-window",
    "f(slope, T, w) -> the attention mass the last query of a causal ALiBi head with equal "
    "content scores puts on its w nearest keys (offsets 0..w-1) out of T keys.",
    inputs=_window_inputs,
    edge_cases={"one key": (0.5, 1, 1), "window = T": (0.25, 10, 10)},
    mistakes={
        "2^(-m r) instead of e^(-m r): softmax exponentiates with base e": lambda m, T, w: _window(
            m, T, w, base2=True
        ),
        "w + 1 keys (offsets 0..w)": lambda m, T, w: _window(m, T, w, plus=1),
    },
)
def _alibi_window(slope: float, T: int, w: int) -> float:
    scores = [-slope * r for r in range(T)]  # bias -m * offset
    z = sum(math.exp(s) for s in scores)
    return sum(math.exp(s) for s in scores[:w]) / z


# === Chapter 4: attention ==============================================================


def _tensor(rng, *shape, scale=1.0, dtype=torch.float64):
    return torch.from_numpy(rng.normal(0.0, scale, size=shape)).to(dtype)


@exercise(
    "causal-mask",
    "f(T) -> a (T, T) bool tensor, True where query i may attend to key j (j <= i).",
    inputs=lambda rng: (int(rng.integers(1, 13)),),
    edge_cases={"T = 1": (1,), "T = 3": (3,)},
    mistakes={
        "the transpose (j >= i): every query sees the future": lambda T: (
            torch.ones(T, T).triu().bool()
        ),
        "strict (j < i): a token may not see itself": lambda T: torch.ones(T, T).tril(-1).bool(),
        "a float 0/1 mask: PyTorch adds a float mask to the scores": lambda T: torch.ones(
            T, T
        ).tril(),
    },
    compare=close(same_dtype=True),
)
def _causal_mask(T: int) -> torch.Tensor:
    return torch.tensor([[j <= i for j in range(T)] for i in range(T)], dtype=torch.bool).reshape(
        T, T
    )


def _softmax_rows(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Row by row: softmax over the allowed keys (shifted by their maximum), 0 elsewhere."""
    out = torch.zeros_like(scores, dtype=torch.float64)
    for i in range(scores.shape[0]):
        allowed = mask[i]
        if allowed.any():
            s = scores[i, allowed].double()
            e = torch.exp(s - s.max())
            out[i, allowed] = e / e.sum()
    return out.to(scores.dtype)


def _masked_softmax_inputs(rng: np.random.Generator) -> tuple:
    T_q, T_k = (int(n) for n in rng.integers(1, 7, size=2))
    dtype = torch.float32 if rng.random() < 0.5 else torch.float64
    scores = _tensor(rng, T_q, T_k, scale=3.0, dtype=dtype)
    mask = torch.from_numpy(rng.random((T_q, T_k)) < 0.6)
    if rng.random() < 0.5:
        mask[int(rng.integers(T_q))] = False
    return scores, mask


_FULLY_MASKED = (
    torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]]),
    torch.tensor([[True, False, True], [False, False, False]]),
)
_LARGE = (
    torch.tensor([[1000.0, 998.0, 990.0], [-1000.0, -1001.0, 5.0]]),
    torch.tensor([[True, True, False], [True, True, False]]),
)


def _softmax_fill_inf(s, m):
    return s.masked_fill(~m, float("-inf")).softmax(-1)


@exercise(
    "masked-softmax",
    "f(scores, mask) -> softmax over the last axis of scores where mask is True, exactly 0 "
    "where it is False, an all-zero row where a row is fully masked; same dtype as scores.",
    inputs=_masked_softmax_inputs,
    edge_cases={
        "a fully masked row": _FULLY_MASKED,
        "large scores in float32": _LARGE,
        "one allowed key": (torch.tensor([[3.0, 4.0]]), torch.tensor([[False, True]])),
    },
    mistakes={
        "masked scores filled with -inf: a fully masked row becomes 0/0 = NaN": _softmax_fill_inf,
        "softmax over all keys, then zeroed (the row no longer sums to 1)": lambda s, m: (
            s.softmax(-1) * m
        ),
        "exp without subtracting the row maximum: overflows for large scores": lambda s, m: (
            (s.exp() * m) / (s.exp() * m).sum(-1, keepdim=True).clamp_min(1e-300)
        ),
    },
    compare=close(rtol=1e-5, atol=1e-6, same_dtype=True),
)
def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return _softmax_rows(scores, mask)


def _attention_inputs(rng: np.random.Generator) -> tuple:
    T_q, T_k, d_v = (int(n) for n in rng.integers(1, 7, size=3))
    d_k = int(rng.choice([1, 4, 16, 64]))
    q, k, v = _tensor(rng, T_q, d_k), _tensor(rng, T_k, d_k), _tensor(rng, T_k, d_v)
    mask = torch.from_numpy(rng.random((T_q, T_k)) < 0.7)
    mask[:, int(rng.integers(T_k))] = True  # every query may attend to at least one key
    return q, k, v, mask


def _attention_scaled(q, k, v, mask, scale):
    w = _softmax_rows(q @ k.T * scale, mask)
    return w @ v, w


@exercise(
    "attention-weights",
    "f(q, k, v, mask) -> (out, weights) of masked scaled dot-product attention: weights = "
    "softmax(q k^T / sqrt(d_k)) with masked keys at 0, out = weights v.",
    inputs=_attention_inputs,
    edge_cases={
        "d_k = 64, where the scaling matters": (
            torch.linspace(-1, 1, 128).reshape(2, 64).double(),
            torch.linspace(1, -1, 192).reshape(3, 64).double(),
            torch.arange(6.0).reshape(3, 2).double(),
            torch.ones(2, 3, dtype=torch.bool),
        )
    },
    mistakes={
        "no 1/sqrt(d_k) scaling": lambda q, k, v, m: _attention_scaled(q, k, v, m, 1.0),
        "divided by d_k instead of sqrt(d_k)": lambda q, k, v, m: _attention_scaled(
            q, k, v, m, 1.0 / q.shape[-1]
        ),
        "divided by sqrt(d_v) instead of sqrt(d_k)": lambda q, k, v, m: _attention_scaled(
            q, k, v, m, 1.0 / math.sqrt(v.shape[-1])
        ),
    },
)
def _attention(q, k, v, mask):
    d_k = q.shape[-1]
    scores = torch.tensor(
        [
            [float((q[i] * k[j]).sum()) / math.sqrt(d_k) for j in range(k.shape[0])]
            for i in range(q.shape[0])
        ],
        dtype=q.dtype,
    ).reshape(q.shape[0], k.shape[0])
    weights = _softmax_rows(scores, mask)
    return weights @ v, weights


def _prefix(T, P, plus=0, prefix_sees_all=False):
    return torch.tensor(
        [
            [(j <= i or j < P + plus or (prefix_sees_all and i < P)) for j in range(T)]
            for i in range(T)
        ],
        dtype=torch.bool,
    ).reshape(T, T)


@exercise(
    "prefix-lm-mask",
    "f(T, n_prefix) -> the (T, T) bool mask of a prefix-LM: the first n_prefix tokens (the "
    "prompt) are seen by every query, the rest causally (key j visible from i when j <= i).",
    inputs=lambda rng: (lambda T: (T, int(rng.integers(0, T + 1))))(int(rng.integers(1, 12))),
    edge_cases={
        "no prefix (plain causal)": (4, 0),
        "all prefix (bidirectional)": (4, 4),
        "T = 5, prefix 2": (5, 2),
    },
    mistakes={
        "prefix one token too long (j <= n_prefix)": lambda T, P: _prefix(T, P, plus=1),
        "prefix queries see every key: the prompt reads the answer": lambda T, P: _prefix(
            T, P, prefix_sees_all=True
        ),
        "the transpose (queries in columns)": lambda T, P: _prefix(T, P).T.contiguous(),
    },
    compare=close(same_dtype=True),
)
def _prefix_lm_mask(T: int, n_prefix: int) -> torch.Tensor:
    return _prefix(T, n_prefix)


def _jacobian_inputs(rng: np.random.Generator) -> tuple:
    return (_tensor(rng, int(rng.integers(1, 9)), scale=float(rng.choice([0.5, 3.0, 10.0]))),)


@exercise(
    "softmax-jacobian",
    "f(s) -> the (n, n) Jacobian J[i, j] = d p_i / d s_j of p = softmax(s) for a score vector "
    "s of shape (n,).",
    inputs=_jacobian_inputs,
    edge_cases={
        "one score (J = 0)": (torch.tensor([2.0], dtype=torch.float64),),
        "saturated scores": (torch.tensor([40.0, 0.0, -3.0], dtype=torch.float64),),
    },
    mistakes={
        "sign flipped: p p^T - diag(p)": lambda s: (
            torch.outer(s.softmax(0), s.softmax(0)) - torch.diag(s.softmax(0))
        ),
        "diagonal only: diag(p (1 - p))": lambda s: torch.diag(s.softmax(0) * (1 - s.softmax(0))),
        "diag(p) alone (the -p p^T term forgotten)": lambda s: torch.diag(s.softmax(0)),
    },
)
def _softmax_jacobian(s: torch.Tensor) -> torch.Tensor:
    e = [math.exp(v - float(s.max())) for v in s.tolist()]
    p = [x / sum(e) for x in e]
    n = len(p)
    return torch.tensor(
        [[p[i] * ((i == j) - p[j]) for j in range(n)] for i in range(n)], dtype=s.dtype
    ).reshape(n, n)


# === Chapter 5: LayerNorm, residuals, Pre-LN ===========================================


def _ln_inputs(rng: np.random.Generator) -> tuple:
    B, T, d = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(2, 9))
    dtype = torch.float32 if rng.random() < 0.5 else torch.float64
    x = _tensor(rng, B, T, d, scale=float(rng.uniform(0.1, 5)), dtype=dtype) + float(
        rng.normal(0, 3)
    )
    gamma = (1.0 + _tensor(rng, d, scale=0.5)).to(dtype)
    beta = _tensor(rng, d, scale=0.5, dtype=dtype)
    return x, gamma, beta, float(rng.choice([1e-5, 1e-3, 0.1, 1.0]))


def _ln(x, g, b, eps, unbiased=False, eps_outside=False, dims=(-1,), one_pass=False):
    mu = x.mean(dims, keepdim=True)
    var = (
        (x * x).mean(dims, keepdim=True) - mu * mu
        if one_pass
        else x.var(dims, keepdim=True, unbiased=unbiased)
    )
    return g * (x - mu) / (var.sqrt() + eps if eps_outside else (var + eps).sqrt()) + b


_OFFSET32 = (
    torch.tensor([[[1000.0, 1001.0, 999.0, 1002.5], [-1000.5, -999.0, -1001.0, -998.0]]]),
    torch.ones(4),
    torch.zeros(4),
    1e-5,
)


@exercise(
    "layer-norm",
    "f(x, gamma, beta, eps) -> LayerNorm of x (B, T, d): each token vector normalised with its "
    "own mean and biased variance (eps inside the root), scaled by gamma, shifted by beta; "
    "same shape and dtype as x, x left unchanged.",
    inputs=_ln_inputs,
    edge_cases={
        "eps = 1 (where eps goes matters)": (
            torch.tensor([[[1.0, 2.0, 4.0]]]),
            torch.ones(3),
            torch.zeros(3),
            1.0,
        ),
        "float32 values near 1000 (E[x^2] - E[x]^2 cancels)": _OFFSET32,
        "a constant token": (torch.full((1, 1, 4), 3.0), torch.ones(4), torch.arange(4.0), 1e-5),
    },
    mistakes={
        "unbiased variance (divided by d - 1; LayerNorm divides by d)": lambda x, g, b, e: _ln(
            x, g, b, e, unbiased=True
        ),
        "eps added outside the square root": lambda x, g, b, e: _ln(x, g, b, e, eps_outside=True),
        "statistics over the batch and positions (BatchNorm's axes)": lambda x, g, b, e: _ln(
            x, g, b, e, dims=(0, 1)
        ),
        "one-pass variance E[x^2] - E[x]^2: cancels in float32": lambda x, g, b, e: _ln(
            x, g, b, e, one_pass=True
        ),
    },
    compare=close(rtol=1e-4, atol=1e-4, same_dtype=True),
)
def _layer_norm(x, gamma, beta, eps):
    z = x.double()
    d = z.shape[-1]
    mu = z.sum(-1, keepdim=True) / d
    var = ((z - mu) ** 2).sum(-1, keepdim=True) / d  # biased: divide by d
    return (gamma.double() * (z - mu) / torch.sqrt(var + eps) + beta.double()).to(x.dtype)


def _bn_inputs(rng: np.random.Generator) -> tuple:
    B, T, d = int(rng.integers(2, 6)), int(rng.integers(1, 6)), int(rng.integers(1, 6))
    return (_tensor(rng, B, T, d, scale=2.0) + _tensor(rng, d, scale=2.0),)


@exercise(
    "batch-norm-stats",
    "f(x) for x of shape (B, T, d) -> (mean, var): BatchNorm's per-feature statistics over the "
    "batch and position axes, each of shape (d,), var biased.",
    inputs=_bn_inputs,
    edge_cases={"one position": (torch.arange(6.0).reshape(3, 1, 2).double(),)},
    mistakes={
        "unbiased variance": lambda x: (x.mean((0, 1)), x.var((0, 1), unbiased=True)),
        "statistics over the batch axis only (one per position and feature)": lambda x: (
            x.mean(0),
            x.var(0, unbiased=False),
        ),
        "statistics over the features (LayerNorm's axis)": lambda x: (
            x.mean(-1),
            x.var(-1, unbiased=False),
        ),
    },
)
def _batch_norm_stats(x):
    rows = x.reshape(-1, x.shape[-1]).double()  # (B*T, d): every token is a sample
    mean = rows.sum(0) / len(rows)
    return mean.to(x.dtype), (((rows - mean) ** 2).sum(0) / len(rows)).to(x.dtype)


class CausalSelfAttention(nn.Module):
    """Causal multi-head self-attention built on PyTorch's own module: attn(h) -> (B, T, d)."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.mha = nn.MultiheadAttention(d_model, n_heads, batch_first=True)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        T = h.shape[1]
        future = torch.ones(T, T, dtype=torch.bool).triu(1)  # True = may NOT attend
        return self.mha(h, h, h, attn_mask=future, need_weights=False)[0]


def _block_inputs(rng: np.random.Generator) -> tuple:
    d, seed = 4 * int(rng.integers(1, 5)), int(rng.integers(2**31))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        attn = CausalSelfAttention(d, 2)
        ffn = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        ln1, ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        with torch.no_grad():
            for ln in (ln1, ln2):
                ln.weight.normal_(1.0, 0.3)
                ln.bias.normal_(0.0, 0.3)
        x = 2.0 * torch.randn(int(rng.integers(1, 4)), int(rng.integers(1, 7)), d)
    return x, attn, ffn, ln1, ln2


def _no_grad(fn):
    def run(*args):
        with torch.no_grad():
            return fn(*args)

    return run


@exercise(
    "pre-ln-block",
    "f(x, attn, ffn, ln1, ln2) -> one Pre-LN block: h = x + attn(ln1(x)), then h + ffn(ln2(h)); "
    "attn(h) is causal self-attention returning a tensor like h.",
    inputs=_block_inputs,
    mistakes={
        "Post-LN instead of Pre-LN: ln1(x + attn(x)), then ln2(h + ffn(h))": _no_grad(
            lambda x, a, f, l1, l2: (lambda h: l2(h + f(h)))(l1(x + a(x)))
        ),
        "no residual connections: ffn(ln2(attn(ln1(x))))": _no_grad(
            lambda x, a, f, l1, l2: f(l2(a(l1(x))))
        ),
        "ln1 used for both sub-layers": _no_grad(
            lambda x, a, f, l1, l2: (lambda h: h + f(l1(h)))(x + a(l1(x)))
        ),
        "residual added after the norm: x' = ln1(x) + attn(ln1(x))": _no_grad(
            lambda x, a, f, l1, l2: (lambda h: l2(h) + f(l2(h)))(l1(x) + a(l1(x)))
        ),
    },
    compare=close(rtol=1e-4, atol=1e-5),
    n_random=6,
)
def _pre_ln_block(x, attn, ffn, ln1, ln2):
    with torch.no_grad():
        h = x + attn(ln1(x))  # x + Attn(LN1(x))
        return h + ffn(ln2(h))  # h + FFN(LN2(h))


def _rms(x, g, eps, center=False, l2=False, eps_outside=False):
    if center:
        x = x - x.mean(-1, keepdim=True)
    ms = (x * x).sum(-1, keepdim=True) if l2 else (x * x).mean(-1, keepdim=True)
    return g * x / (ms.sqrt() + eps if eps_outside else (ms + eps).sqrt())


def _rms_inputs(rng: np.random.Generator) -> tuple:
    B, T, d = int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.integers(2, 9))
    x = _tensor(rng, B, T, d, scale=float(rng.uniform(0.2, 4))) + float(rng.normal(0, 2))
    return x, 1.0 + _tensor(rng, d, scale=0.5), float(rng.choice([1e-6, 1e-2, 0.5]))


@exercise(
    "rms-norm",
    "f(x, gain, eps) -> RMSNorm of x (..., d): x / sqrt(mean(x^2 over d) + eps) * gain, "
    "with no mean subtraction and no shift.",
    inputs=_rms_inputs,
    edge_cases={
        "eps = 1 (where eps goes matters)": (
            torch.tensor([[3.0, 4.0]]).double(),
            torch.ones(2).double(),
            1.0,
        ),
        "a token with a large mean": (
            torch.tensor([[10.0, 11.0, 12.0]]).double(),
            torch.ones(3).double(),
            1e-6,
        ),
    },
    mistakes={
        "subtracted the mean: that is LayerNorm without beta": lambda x, g, e: _rms(
            x, g, e, center=True
        ),
        "divided by the L2 norm (the 1/d inside the root is missing)": lambda x, g, e: _rms(
            x, g, e, l2=True
        ),
        "eps added outside the square root": lambda x, g, e: _rms(x, g, e, eps_outside=True),
    },
)
def _rms_norm(x, gain, eps):
    d = x.shape[-1]
    rms = torch.sqrt((x.double() ** 2).sum(-1, keepdim=True) / d + eps)  # sqrt(mean x^2 + eps)
    return (gain.double() * x.double() / rms).to(x.dtype)


def _ln_jac(x, eps, drop_mean=False, drop_scale=False, unbiased=False):
    d = x.shape[0]
    z = x - x.mean()
    sigma = torch.sqrt(z.var(unbiased=unbiased) + eps)
    y = z / sigma
    j = torch.eye(d, dtype=x.dtype)
    if not drop_mean:
        j = j - 1.0 / d
    if not drop_scale:
        j = j - torch.outer(y, y) / d
    return j / sigma


@exercise(
    "ln-jacobian",
    "f(x, eps) -> the (d, d) Jacobian J[i, j] = d y_i / d x_j of y = (x - mean(x)) / "
    "sqrt(var(x) + eps) (biased variance, no gain or shift) for a vector x of shape (d,).",
    inputs=lambda rng: (
        _tensor(rng, int(rng.integers(2, 9)), scale=float(rng.uniform(0.3, 3))),
        float(rng.choice([1e-5, 0.1])),
    ),
    edge_cases={"d = 2": (torch.tensor([1.0, 3.0], dtype=torch.float64), 1e-5)},
    mistakes={
        "the mean treated as a constant (no -1/d term)": lambda x, e: _ln_jac(x, e, drop_mean=True),
        "the standard deviation treated as a constant (no -y y^T / d term)": lambda x, e: _ln_jac(
            x, e, drop_scale=True
        ),
        "unbiased variance": lambda x, e: _ln_jac(x, e, unbiased=True),
    },
)
def _ln_jacobian(x, eps):
    # Central differences of the plain formula, in float64: an independent numerical statement.
    def ln(v):
        mu = sum(v) / len(v)
        var = sum((a - mu) ** 2 for a in v) / len(v)
        return [(a - mu) / math.sqrt(var + eps) for a in v]

    v, d, h = x.tolist(), len(x), 1e-6
    cols = []
    for j in range(d):
        up, down = list(v), list(v)
        up[j] += h
        down[j] -= h
        cols.append([(a - b) / (2 * h) for a, b in zip(ln(up), ln(down), strict=True)])
    return torch.tensor(cols, dtype=torch.float64).T.to(x.dtype)


# === Chapter 6: training ===============================================================


def _lr(step, lr, min_lr, warmup, steps, cap=True, from_zero=False, to_zero=False):
    if step < warmup:
        return lr * (step if from_zero else step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    progress = min(1.0, progress) if cap else progress
    low = 0.0 if to_zero else min_lr
    return low + 0.5 * (lr - low) * (1 + math.cos(math.pi * progress))


def _lr_inputs(rng: np.random.Generator) -> tuple:
    lr = float(10 ** rng.uniform(-4, -2))
    warmup = int(rng.integers(0, 50))
    steps = warmup + int(rng.integers(1, 500))
    return (
        int(rng.integers(0, steps + 200)),
        lr,
        float(lr * rng.choice([0.0, 0.1, 0.5])),
        warmup,
        steps,
    )


@exercise(
    "lr-schedule",
    "f(step, lr, min_lr, warmup_steps, steps) -> the rate of update step (0-based): lr * (step "
    "+ 1) / warmup_steps during warm-up, then half a cosine from lr to min_lr at step = steps, "
    "and min_lr after it.",
    inputs=_lr_inputs,
    edge_cases={
        "no warm-up, first step": (0, 1e-3, 1e-4, 0, 100),
        "well past the last step": (250, 1e-3, 1e-4, 10, 100),
        "the last step": (100, 1e-3, 1e-4, 10, 100),
        "first warm-up step": (0, 1e-3, 0.0, 10, 100),
    },
    mistakes={
        "cosine not capped past the last step (the rate climbs back up)": lambda *a: _lr(
            *a, cap=False
        ),
        "warm-up from 0 (update 0 gets rate 0 and is wasted)": lambda *a: _lr(*a, from_zero=True),
        "cosine down to 0 instead of min_lr": lambda *a: _lr(*a, to_zero=True),
    },
    compare=close(rtol=1e-9, atol=1e-15),
)
def _lr_schedule(step, lr, min_lr, warmup_steps, steps):
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps  # linear warm-up
    if step >= steps:
        return min_lr  # after the schedule
    t = (step - warmup_steps) / (steps - warmup_steps)  # 0 -> 1 over the decay
    return min_lr + (lr - min_lr) * (1 + math.cos(math.pi * t)) / 2


def _ppl_inputs(rng: np.random.Generator) -> tuple:
    B, T, V = int(rng.integers(1, 4)), int(rng.integers(1, 9)), int(rng.integers(2, 30))
    logits = _tensor(rng, B, T, V, scale=float(rng.uniform(0.5, 4.0)), dtype=torch.float32)
    return logits + float(rng.choice([0.0, 50.0, -200.0])), torch.from_numpy(
        rng.integers(0, V, size=(B, T))
    )


def _naive_ppl(z, t, per_token=False, no_exp=False, stable=False):
    p = z.double().softmax(-1) if stable else z.exp() / z.exp().sum(-1, keepdim=True)
    nll = -p.gather(-1, t[..., None]).squeeze(-1).log()
    if no_exp:
        return float(nll.mean())
    return float(nll.exp().mean()) if per_token else float(nll.mean().exp())


@exercise(
    "perplexity",
    "f(logits, targets) for logits (B, T, V) and targets (B, T) -> exp of the mean cross-entropy "
    "(natural log) of the targets, a Python float, computed stably.",
    inputs=_ppl_inputs,
    edge_cases={
        "float32 logits near 1000 (exp overflows)": (
            torch.tensor([[[1000.0, 999.0, 997.0], [1001.0, 1000.0, 1000.0]]]),
            torch.tensor([[0, 2]]),
        ),
        "float32 logits near -1000 (exp underflows)": (
            torch.tensor([[[-1000.0, -999.0, -1003.0]]]),
            torch.tensor([[1]]),
        ),
        "one class": (torch.zeros(1, 3, 1), torch.zeros(1, 3, dtype=torch.long)),
    },
    mistakes={
        "exp without subtracting the maximum (overflows or underflows in float32)": _naive_ppl,
        "2 ** loss with the loss in nats: mixing the bases (e ** nats = 2 ** bits)": lambda z, t: (
            2.0 ** _naive_ppl(z, t, no_exp=True, stable=True)
        ),
        "mean of per-token perplexities instead of exp of the mean loss": lambda z, t: _naive_ppl(
            z, t, per_token=True, stable=True
        ),
        "the cross-entropy itself, not its exponential": lambda z, t: _naive_ppl(
            z, t, no_exp=True, stable=True
        ),
    },
    compare=close(rtol=1e-4, atol=0.0),  # float32 logits near 200: log-sum-exp error ~1e-5
)
def _perplexity(logits, targets):
    total, count = 0.0, 0
    for row, tgt in zip(
        logits.double().reshape(-1, logits.shape[-1]), targets.reshape(-1), strict=True
    ):
        m = float(row.max())
        log_z = m + math.log(sum(math.exp(float(v) - m) for v in row))  # logsumexp
        total += log_z - float(row[int(tgt)])  # -log p(target)
        count += 1
    return math.exp(total / count)


def _count(V, block, d, L, d_ff, positional, bias, head=False, final_ln=True, learned_always=False):
    b = int(bias)
    per_layer = 4 * (d * d + b * d) + d * d_ff + b * d_ff + d_ff * d + b * d + 2 * (1 + b) * d
    pos = block * d if (positional == "learned" or learned_always) else 0
    return V * d * (2 if head else 1) + pos + L * per_layer + ((1 + b) * d if final_ln else 0)


def _count_inputs(rng: np.random.Generator) -> tuple:
    d = 4 * int(rng.integers(1, 33))
    return (
        int(rng.integers(2, 300)),
        int(rng.integers(1, 513)),
        d,
        int(rng.integers(1, 7)),
        int(rng.integers(1, 5)) * d,
        str(rng.choice(["learned", "rope", "sinusoidal"])),
        bool(rng.integers(0, 2)),
    )


@exercise(
    "param-count",
    "f(vocab_size, block_size, d_model, n_layers, d_ff, positional, bias) -> the number of "
    "trainable parameters of the chapter's decoder-only LM (Pre-LN, final LayerNorm, head tied "
    "to the token embedding; with bias=False no linear biases and LayerNorms without shift).",
    inputs=_count_inputs,
    edge_cases={
        "learned positions, biases": (65, 256, 384, 6, 1536, "learned", True),
        "RoPE, no biases": (84, 128, 128, 4, 512, "rope", False),
    },
    mistakes={
        "the tied head counted a second time": lambda *a: _count(*a, head=True),
        "the final LayerNorm forgotten": lambda *a: _count(*a, final_ln=False),
        "a position table counted for every scheme": lambda *a: _count(*a, learned_always=True),
    },
    compare=exact_int,
)
def _param_count(vocab_size, block_size, d_model, n_layers, d_ff, positional, bias):
    linear = lambda n_in, n_out: n_in * n_out + (n_out if bias else 0)  # noqa: E731
    norm = d_model * (2 if bias else 1)  # gain (+ shift)
    block = 4 * linear(d_model, d_model) + linear(d_model, d_ff) + linear(d_ff, d_model) + 2 * norm
    table = block_size * d_model if positional == "learned" else 0
    return vocab_size * d_model + table + n_layers * block + norm


def _flops(N, L, d, T, tokens, fwd=False, attn=True, seq=False):
    per_token = (2 if fwd else 6) * N + ((12 * L * d * (T * T if seq else T)) if attn else 0)
    return per_token * tokens


def _flops_inputs(rng: np.random.Generator) -> tuple:
    L, d = int(rng.integers(1, 49)), 64 * int(rng.integers(1, 65))
    N = 12 * L * d * d + int(rng.integers(1000, 10**8))
    return N, L, d, int(2 ** rng.integers(6, 14)), int(rng.integers(10**6, 10**12))


@exercise(
    "train-flops",
    "f(n_params, n_layers, d_model, T, n_tokens) -> the floating-point operations of training "
    "on n_tokens tokens: (6 N + 12 L d T) per token (forward and backward, attention scores "
    "included).",
    inputs=_flops_inputs,
    edge_cases={"nanoGPT's shakespeare-char size": (10_650_000, 6, 384, 256, 5000 * 64 * 256)},
    mistakes={
        "forward pass only (2 N per token)": lambda *a: _flops(*a, fwd=True),
        "the attention term 12 L d T left out": lambda *a: _flops(*a, attn=False),
        "attention counted per sequence (T^2) for every token": lambda *a: _flops(*a, seq=True),
    },
    compare=close(rtol=1e-9, atol=0.0),
)
def _train_flops(n_params, n_layers, d_model, T, n_tokens):
    matmuls = 2 * n_params  # a multiply and an add per weight, forward
    attention = 2 * n_layers * T * d_model * 2  # q k^T and weights @ v, forward, per token
    return 3 * (matmuls + attention) * n_tokens  # backward costs twice the forward


def _top_k_inputs(rng: np.random.Generator) -> tuple:
    B, V = int(rng.integers(1, 4)), int(rng.integers(1, 20))
    return _tensor(rng, B, V, scale=2.0, dtype=torch.float32), int(rng.integers(1, V + 3))


def _topk(z, k, fill=float("-inf"), plus=0, smallest=False):
    out = z.clone()
    for row in out:
        order = sorted(row.tolist(), reverse=not smallest)
        kth = order[min(k + plus, len(order)) - 1]
        for c in range(len(row)):
            if (row[c] > kth) if smallest else (row[c] < kth):
                row[c] = fill
    return out


@exercise(
    "top-k",
    "f(logits, k) for logits (B, V) -> a new tensor in which every logit smaller than the k-th "
    "largest of its row is -inf (ties with the k-th are kept; k >= V keeps all); logits unchanged.",
    inputs=_top_k_inputs,
    edge_cases={
        "ties at the k-th value": (torch.tensor([[1.0, 3.0, 3.0, 0.5, 3.0]]), 2),
        "k larger than the vocabulary": (torch.tensor([[0.0, -1.0]]), 5),
        "k = 1": (torch.tensor([[0.2, 0.9, -0.3], [2.0, 1.0, 0.0]]), 1),
    },
    mistakes={
        "the others set to 0, not -inf (a logit of 0 is not a probability of 0)": lambda z, k: (
            _topk(z, k, fill=0.0)
        ),
        "k + 1 kept": lambda z, k: _topk(z, k, plus=1),
        "the k smallest kept": lambda z, k: _topk(z, k, smallest=True),
    },
    compare=close(rtol=0.0, atol=0.0, same_dtype=True),
)
def _top_k(logits, k):
    out = logits.clone()
    for row in out:
        kth = sorted(row.tolist(), reverse=True)[min(k, len(row)) - 1]  # k-th largest value
        row[row < kth] = float("-inf")
    return out
