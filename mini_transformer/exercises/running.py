"""Running a reader's answer: a time limit, global state restored, a forked child process.

Why a child process (Linux, where there is ``fork``): the parent kills it at most a second past
the time limit whatever the code does (a C-level loop, a bare ``except:``, a ``__repr__`` that
never returns), a crash or ``os._exit`` in it is reported, and what the code changes (default
dtype, grad mode, ``np.seterr``, warning filters, random states) stays in the child. In-process
a SIGALRM timer stops the code and the global state is restored after each call, but a C-level
call that never returns cannot be stopped. Neither is a sandbox: code written to do harm on
purpose can still delete files or kill the notebook's process.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import io
import multiprocessing
import os
import pickle
import random
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

_GRACE = 1.0  # seconds the parent waits past the time limit before it kills the child
_MAX_OUTPUT = 20_000  # characters of the reader's printed output relayed to the notebook


class _TimeUp(BaseException):
    """Raised in the reader's code when its time is up: not an ``Exception``, so a bare
    ``except Exception`` in the reader's code cannot swallow it."""


@contextlib.contextmanager
def global_state_kept():
    """Restore what the reader's code may change globally: the random states, torch's default
    dtype and device, grad and anomaly mode, the deterministic flags, thread count and matmul
    precision, NumPy's error handling and print options, the warning filters,
    ``sys.stdout``/``sys.stderr`` and the recursion limit."""
    py_state, np_state, dtype = random.getstate(), np.random.get_state(), torch.get_default_dtype()
    grad, anomaly = torch.is_grad_enabled(), torch.is_anomaly_enabled()
    threads, matmul = torch.get_num_threads(), torch.get_float32_matmul_precision()
    deterministic = _deterministic()
    device = torch.get_default_device() if hasattr(torch, "get_default_device") else None  # 2.3+
    np_err, np_print = np.geterr(), np.get_printoptions()
    out, err, recursion = sys.stdout, sys.stderr, sys.getrecursionlimit()
    try:
        with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
            yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
        torch.set_anomaly_enabled(anomaly)
        if torch.get_num_threads() != threads:  # the setters below are slow: only if changed
            torch.set_num_threads(threads)
        if _deterministic() != deterministic:
            torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
        if torch.get_float32_matmul_precision() != matmul:
            torch.set_float32_matmul_precision(matmul)
        if device is not None and torch.get_default_device() != device:
            torch.set_default_device(device)
        np.seterr(**np_err)
        np.set_printoptions(**np_print)
        sys.stdout, sys.stderr = out, err
        sys.setrecursionlimit(recursion)


def _deterministic() -> tuple[bool, bool]:
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )


def run_limited(fn: Callable[..., Any], args: tuple, seconds: float) -> tuple[str, Any]:
    """fn(*args) within ``seconds``: ("ok", value), ("error", exception) or ("timeout", None).

    In the main thread a SIGALRM timer interrupts the call, and again every 50 ms until it
    returns (a loop whose bare ``except:`` swallows one interruption meets the next);
    elsewhere the call runs in a daemon thread, abandoned when the time is up.
    """
    with global_state_kept():
        main = threading.current_thread() is threading.main_thread()
        if not (main and hasattr(signal, "setitimer")):
            box: list[tuple[str, Any]] = []

            def target():
                try:
                    box.append(("ok", fn(*args)))
                except BaseException as err:  # reported to the caller
                    box.append(("error", err))

            worker = threading.Thread(target=target, daemon=True)
            worker.start()
            worker.join(seconds)
            return box[0] if box else ("timeout", None)

        def time_up(signum, frame):
            raise _TimeUp

        previous = signal.signal(signal.SIGALRM, time_up)
        try:
            signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3), 0.05)
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


class _Capped(io.StringIO):
    """An output stream keeping the first ``_MAX_OUTPUT`` characters."""

    def write(self, s: str) -> int:
        room = _MAX_OUTPUT - self.tell()
        if room > 0:
            super().write(s[:room])
            if len(s) > room:
                super().write("\n[... the rest of your printed output was cut]\n")
        return len(s)


def _child(work: Callable, conn) -> None:
    """The body of the checking child process; never returns. ``work`` returns an outcome
    made of builtin values, arrays and tensors only (the parent never unpickles a reader's
    own class)."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
        gc.freeze()  # the collector leaves the inherited objects alone (no copy-on-write)
        torch.set_num_threads(1)  # OpenMP's threads do not survive a fork
        sys.stdout, sys.stderr = out, err = _Capped(), _Capped()
        # No input() and no rich display: they would talk to the Jupyter kernel over the
        # parent's sockets, which is not safe from a forked process.
        builtins.input = _no_input
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
        if getattr(shell, "display_pub", None) is not None:
            shell.display_pub.publish = lambda *args, **kwargs: None
        outcome = work(lambda index: _send(conn, ("case", index)))
        outcome.stdout, outcome.stderr = out.getvalue(), err.getvalue()
        _send(conn, ("done", outcome))
    except BaseException as error:  # the checker's own failure: report it, do not hang
        with contextlib.suppress(BaseException):
            _send(conn, ("crash", f"{type(error).__name__}: {error}"))
    finally:
        os._exit(0)


def _send(conn, message: Any) -> None:
    # Plain pickle: Connection.send's pickler would share tensors through a helper process.
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def _no_input(*args: Any) -> str:
    raise RuntimeError("input() is not available while an answer is checked")


_ZOMBIES: list[int] = []  # children that sent their outcome and are exiting


def in_child(work: Callable, seconds: float) -> tuple[str, Any, int | None]:
    """Run ``work(progress)`` in a forked child, killed ``_GRACE`` s past ``seconds``.

    Returns ("done", outcome, None), ("timeout", None, last case started), ("died", how it
    ended, last case started), ("crash", text, None), or ("no fork", None, None).
    """
    for pid in list(_ZOMBIES):
        with contextlib.suppress(ChildProcessError):
            if not os.waitpid(pid, os.WNOHANG)[0]:
                continue
        _ZOMBIES.remove(pid)
    read, write = multiprocessing.Pipe(duplex=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12: fork with threads
            pid = os.fork()
    except OSError:  # no memory or too many processes: check in-process instead
        read.close()
        write.close()
        return "no fork", None, None
    if pid == 0:
        read.close()
        _child(work, write)
    write.close()
    deadline, last = time.monotonic() + seconds + _GRACE, None
    try:
        while read.poll(max(deadline - time.monotonic(), 0.0)):
            kind, payload = pickle.loads(read.recv_bytes())
            if kind != "case":
                _ZOMBIES.append(pid)
                return kind, payload, None
            last = payload
    except EOFError:  # the child has gone
        pass
    except BaseException:  # Ctrl-C: stop the child, then let the interrupt through
        _kill(pid)
        raise
    finally:
        read.close()
    if time.monotonic() >= deadline:
        _kill(pid)
        return "timeout", None, last
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return "died", f"the process running it was killed by signal {os.WTERMSIG(status)}", last
    code = os.waitstatus_to_exitcode(status)
    return "died", f"it ended the process running it (exit status {code})", last


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, ChildProcessError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
