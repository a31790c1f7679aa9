"""Running a reader's answer: a time limit, global state restored, a forked child process.

Why a child process (Linux, where there is ``fork``): the parent kills it and every process it
started (the child leads its own process group) at most a second past the time limit whatever
the code does (a C-level loop, a bare ``except:``, a ``__repr__`` that never returns), a crash
or ``os._exit`` in it is reported, and what the code changes (default dtype, grad mode,
``np.seterr``, warning filters, random states) stays in the child. The limit counts the
reader's calls only: the child says when each starts and ends; the checker's own work between
them has a separate, generous limit. The child's messages are plain data that the parent reads
with ``torch.load(weights_only=True)``: nothing in them can run code in the parent.
In-process, a SIGALRM timer stops the code and the global state is restored after each call,
but a C-level call that never returns cannot be stopped.

Out of reach, by design: the answer runs in the child's process, so code written to cheat can
forge the child's verdict; code written to do harm can delete files, kill the notebook, or
start a process in a session of its own (``setsid``) that outlives the check.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import io
import multiprocessing
import os
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
_OWN_WORK = 120.0  # seconds the checker's own work in the child may take between two calls
_MAX_BYTES = 2**27  # a longer message from the child is not read
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
    """The body of the checking child process; never returns. ``work(report)`` returns the
    outcome as plain data; ``report("run", case, seconds)`` and ``report("ran")`` mark the
    reader's calls."""
    try:
        os.setpgid(0, 0)  # a process group of its own: the parent kills all of it
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
        outcome = work(lambda *message: _send(conn, message))
        _send(conn, ("done", {**outcome, "stdout": out.getvalue(), "stderr": err.getvalue()}))
    except BaseException as error:  # the checker's own failure: report it, do not hang
        with contextlib.suppress(BaseException):
            _send(conn, ("crash", f"{type(error).__name__}: {error}"))
    finally:
        os._exit(0)


def _send(conn, message: tuple) -> None:
    buffer = io.BytesIO()  # torch.save: Connection.send would share tensors through a helper
    torch.save(message, buffer)
    conn.send_bytes(buffer.getvalue())


def _receive(read) -> tuple:
    """The child's next message, read as plain data only; a message that is not is refused."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            message = torch.load(io.BytesIO(read.recv_bytes(_MAX_BYTES)), weights_only=True)
    except (EOFError, KeyboardInterrupt):
        raise
    except BaseException as error:  # noqa: BLE001 (a forged or cut message)
        return ("crash", f"its result could not be read: {type(error).__name__}")
    if type(message) is tuple and message and type(message[0]) is str:
        return message
    return ("crash", "its result was malformed")


def _no_input(*args: Any) -> str:
    raise RuntimeError("input() is not available while an answer is checked")


def in_child(work: Callable, seconds: float) -> tuple[str, Any, int | None]:
    """Run ``work(report)`` in a forked child; the reader's calls get ``seconds`` in all (and
    ``_GRACE`` more before the kill), the checker's own work ``_OWN_WORK`` between two calls.

    Returns ("done", outcome, None), ("timeout", None, case running) when the reader's time
    ran out, ("slow", None, None) when the checker's own did, ("died", how it ended, case
    running), ("crash", text, None), or ("no fork", None, None).
    """
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
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)  # also here, so that no kill can come before the child's own call
    deadline, last, reader = time.monotonic() + _OWN_WORK, None, False
    try:
        while read.poll(max(deadline - time.monotonic(), 0.0)):
            kind, *payload = _receive(read)
            if kind == "run" and len(payload) == 2 and type(payload[1]) is float:  # the reader's
                last, reader = (payload[0] if type(payload[0]) is int else None), True
                deadline = time.monotonic() + float(payload[1]) + _GRACE
            elif kind == "ran":
                reader, deadline = False, time.monotonic() + _OWN_WORK
            else:
                _kill(pid)  # done: no process the answer started outlives the check
                return kind, (payload or [None])[0], None
    except EOFError:  # the child has gone
        pass
    except BaseException:  # Ctrl-C: stop the child, then let the interrupt through
        _kill(pid)
        raise
    finally:
        read.close()
    if time.monotonic() >= deadline:
        _kill(pid)
        return ("timeout", None, last) if reader else ("slow", None, None)
    _, status = os.waitpid(pid, 0)
    _kill(pid)
    if os.WIFSIGNALED(status):
        return "died", f"the process running it was killed by signal {os.WTERMSIG(status)}", last
    code = os.waitstatus_to_exitcode(status)
    return "died", f"it ended the process running it (exit status {code})", last


def _kill(pid: int) -> None:
    """Kill the child's process group (the child and what it started), then reap the child."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
