r"""Training the character-level Shakespeare model (chapter 6). :func:`train` is one loop, read
top to bottom: a batch, the learning rate, :func:`~mini_transformer.core.train_step`, and every
``eval_interval`` steps :func:`~mini_transformer.core.estimate_loss` and a checkpoint. The recipe
is :mod:`~mini_transformer.core`, the files :mod:`~mini_transformer.checkpoints`; the command
line ``python -m mini_transformer.train`` runs :func:`mini_transformer.cli.main`.

Each robustness concern is one call defined below the loop: ``_read_window`` (divergence; the
losses are read once per window, so on one GPU the host waits for it once; under torchrun the
Ctrl-C flag syncs every step), ``_interrupt`` (Ctrl-C, read between steps, saves ``last.pt`` at
a step boundary: a resumed run is bit-identical), ``_unsaveable`` (nothing diverged is saved),
``_logged`` (the log) and ``_ddp_*`` (torchrun).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import shutil
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from . import checks, hardware
from .checkpoints import (
    PRETRAINED,
    atomic_write,
    check_output_dir,
    load_checkpoint,
    load_model,
    load_pretrained,
    output_lock,
    save_checkpoint,
    write_record,
)
from .checks import check_device
from .core import TrainConfig, configure_optimizer, estimate_loss, get_preset, train_step
from .data import CharTokenizer, get_batch, load_corpus
from .hardware import GPU_PEAK_FLOPS
from .model import TransformerLM

__all__ = [  # the loop, and the names the chapters use
    "train",
    "TrainingDivergedError",
    "get_preset",
    "configure_optimizer",
    "estimate_loss",
    "GPU_PEAK_FLOPS",
    "save_checkpoint",
    "load_checkpoint",
    "load_model",
    "load_pretrained",
    "read_log",
    "PRETRAINED",
]

#: A held-out loss above this many times the uniform guess ``ln V`` counts as diverged.
DIVERGED_LOSS_FACTOR = 2.0


class TrainingDivergedError(RuntimeError):
    """The loss, the gradient norm or the weights became NaN or infinite; the run stopped."""


def train(
    cfg: TrainConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    argv: list[str] | None = None,
    setup_hook: Callable[[TransformerLM], None] | None = None,
) -> dict:
    """Train ``TransformerLM(cfg.model)`` on the bundled corpus into ``out_dir`` (``last.pt``,
    ``best.pt``, ``metrics.jsonl``, ``config.json``); ``resume`` continues up to ``cfg.steps``,
    bit-identical to an uninterrupted run on the same machine and thread count. Rank 0 alone
    evaluates, logs and saves; ``setup_hook(model)`` runs once the model is built (tests inject
    faults with it). Raises ``TrainingDivergedError`` (nothing diverged was saved),
    ``KeyboardInterrupt`` after saving ``last.pt`` at a step boundary, or ``OSError`` (disk
    full: what was saved stays intact). ``out_dir`` is new, empty or a run's (``resume`` or
    ``overwrite`` it); another file there is never touched, and a second run into it is refused."""
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    out_dir, lock = Path(out_dir), contextlib.nullcontext()
    if hardware.ddp_ranks()[0] == 0:  # the folder is rank 0's until the run ends (others read)
        lock = output_lock(check_output_dir(out_dir, resume=resume, overwrite=overwrite))
    with lock, _ddp_group(cfg):
        run = _prepare(cfg, out_dir, resume, setup_hook)
        main, show = run.rank == 0, cfg.progress and run.rank == 0
        T, opt = run.model.config.block_size, run.optimizer
        with (
            _logged(run, argv),
            tqdm(
                total=cfg.steps, initial=run.step, disable=not show, desc=f"train {cfg.preset}"
            ) as bar,
            _stop_at_step_boundary() as flag,
            checks.trusted(),  # the batches, lrs and steps are the loop's own: not re-checked
        ):
            if main and not run.resume:
                _evaluate_and_save(run, None)  # the loss before any training: about ln(vocab_size)
            run.model.train()
            losses, norms, t0, stopping = [], [], time.perf_counter(), False  # tensors, unread
            while run.step < cfg.steps and not (stopping := _ddp_stop(run, flag)):
                g = torch.Generator().manual_seed(_seed_for(cfg.seed, run.rank, run.step))
                x, y = get_batch(run.train_ids, cfg.batch_size, T, g, run.device)
                if run.world > 1:  # each rank's dropout masks: a function of the step, resumable
                    torch.manual_seed(_seed_for(cfg.seed, run.rank, run.step, 1))
                lr = run.schedule(run.step)
                loss, norm = train_step(
                    run.step_model, opt, x, y, lr, grad_clip=cfg.grad_clip, autocast=run.autocast
                )
                losses.append(loss)
                norms.append(norm if norm is not None else torch.zeros((), device=run.device))
                run.step += 1
                bar.update(1)
                if run.step % cfg.eval_interval == 0 or run.step == cfg.steps:
                    rate = _read_window(run, losses, norms, t0, bar)  # divergence
                    if main:
                        _evaluate_and_save(run, rate)
                    t0 = time.perf_counter()
            if stopping:
                _read_window(run, losses, norms, t0, bar)
                _interrupt(run)  # last.pt at this step boundary, then KeyboardInterrupt
    return {
        "step": run.step,
        "losses": run.train_losses,
        "val_loss": run.val_loss,
        "best_val_loss": run.best_val_loss,
        "reason": "completed",
        "wall_time_s": run.elapsed(),
        "out_dir": str(out_dir),
    }


@dataclass
class Run:
    """Everything the loop reads and changes: settings, model, data, counters, files."""

    cfg: TrainConfig
    out_dir: Path
    device: torch.device
    model: TransformerLM
    optimizer: torch.optim.Optimizer
    tok: CharTokenizer
    train_ids: torch.Tensor
    val_ids: torch.Tensor
    precision: str | None  # "fp32" or "bf16"; None until measured (hardware.resolve_precision)
    resume: bool = False  # continues last.pt (restored by _prepare)
    rank: int = 0
    world: int = 1
    step_model: torch.nn.Module | None = None  # what a step calls: model, DDP or compiled
    step: int = 0
    best_val_loss: float = math.inf
    val_loss: float | None = None
    saved_step: int | None = None  # step of the last checkpoint written
    elapsed_before: float = 0.0
    t_start: float = field(default_factory=time.perf_counter)
    train_losses: list[float] = field(default_factory=list)  # every step's, read back
    peak: float | None = None
    peak_source: str = ""
    flops_per_token: float = 0.0  # the model's, for MFU (counted once)
    precision_s: dict | None = None  # a step's time in each precision, if "auto" measured
    log_path: Path | None = None  # metrics.jsonl (rank 0 only)

    last_path = property(lambda self: self.out_dir / "last.pt")
    best_path = property(lambda self: self.out_dir / "best.pt")

    @property
    def saved(self) -> str | None:
        return f"{self.last_path} (step {self.saved_step})" if self.saved_step is not None else None

    @property
    def tokens_per_step(self) -> int:
        return self.cfg.batch_size * self.model.config.block_size * self.world

    def __post_init__(self) -> None:
        self.schedule = self.cfg.schedule()  # the learning rate of each step

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.t_start

    def autocast(self):
        return hardware.autocast(self.precision, self.device)

    def estimate(self, split: str) -> float:
        """The loss on ``"train"`` or ``"val"``, each split on batches of its own fixed seed."""
        ids, key = (self.train_ids, 1) if split == "train" else (self.val_ids, 2)
        cfg, seed = self.cfg, _seed_for(self.cfg.seed, key)
        with self.autocast():
            return estimate_loss(
                self.model, ids, n_batches=cfg.eval_batches, batch_size=cfg.batch_size, seed=seed
            )


@functools.lru_cache(maxsize=1)
def _encoded_corpus() -> tuple[CharTokenizer, torch.Tensor, torch.Tensor]:
    tok = CharTokenizer.from_corpus()
    return tok, tok.encode(load_corpus("train")), tok.encode(load_corpus("val"))


def _seed_for(*keys: int) -> int:
    """A 63-bit seed from integers (one stream per rank and step)."""
    return int(np.random.SeedSequence(list(keys)).generate_state(2, np.uint64)[0] >> np.uint64(1))


def _prepare(cfg: TrainConfig, out_dir: Path, resume: bool, setup_hook) -> Run:
    """Device, data, model and optimizer (restored on resume), DDP and compile."""
    rank, local_rank, world = hardware.ddp_ranks()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    device = check_device("device", cfg.device, run=True, local_rank=local_rank)
    is_cuda = device.type == "cuda"
    if is_cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    tok, train_ids, val_ids = _encoded_corpus()
    if (v := cfg.model.vocab_size) != tok.vocab_size:
        raise ValueError(f"model.vocab_size must be the tokenizer's {tok.vocab_size}, got {v}")
    train_ids, val_ids = train_ids.to(device), val_ids.to(device)
    torch.manual_seed(cfg.seed)  # same initial weights on every rank
    model = TransformerLM(cfg.model)
    if is_cuda and not model.config.fused_attention:
        print("note: fused_attention=False; the fused kernel is faster on CUDA", file=sys.stderr)
    model.to(device)
    if setup_hook is not None:
        setup_hook(model)
    optimizer = configure_optimizer(model, cfg, fused=is_cuda)
    precision = hardware.resolve_precision(cfg.precision, device, d_model=model.config.d_model)
    run = Run(cfg, out_dir, device, model, optimizer, tok, train_ids, val_ids, precision, resume)
    run.rank, run.world, run.step_model = rank, world, model
    if resume:
        _restore(run)
    if run.precision is None:  # "auto" on a CPU with native bf16: timed before the clock starts
        x, y = get_batch(train_ids, cfg.batch_size, cfg.model.block_size, torch.Generator(), device)
        run.precision, run.precision_s = hardware.measure_precision(model, x, y)
        run.t_start = time.perf_counter()
    _ddp_wrap(run)
    if cfg.compile:
        run.step_model = torch.compile(run.step_model, mode=cfg.compile_mode)
    if rank == 0:
        run.peak, run.peak_source = hardware.peak_flops(device, cfg.peak_flops)
        run.flops_per_token = model.flops_per_token()
        run.log_path = out_dir / "metrics.jsonl"
    return run


def _restore(run: Run) -> None:
    """Continue from ``last.pt``: weights, optimizer, counters, RNG, best loss, auto's choice."""
    ckpt = load_checkpoint(run.last_path, run.model, run.optimizer, map_location=run.device)
    if run.cfg.precision == "auto":  # a checkpoint older than the key: decide anew
        run.precision = ckpt.get("precision", run.precision)
    run.step = run.saved_step = ckpt["step"]
    run.val_loss = ckpt.get("val_loss")
    run.elapsed_before = ckpt.get("elapsed_s", 0.0)
    bests = [ckpt.get("best_val_loss")]  # each a loss, inf or None (checked by the loader)
    if run.best_path.is_file():  # a crash between writing best.pt and last.pt
        with contextlib.suppress(ValueError):
            bests.append(load_checkpoint(run.best_path).get("best_val_loss"))
    run.best_val_loss = min((b for b in bests if b is not None), default=math.inf)
    if run.world == 1:  # RNG states must be CPU ByteTensors, whatever map_location did
        torch.set_rng_state(ckpt["rng"]["torch"].cpu())  # (torchrun: the loop seeds each step)
        if run.device.type == "cuda" and "cuda" in ckpt["rng"]:
            torch.cuda.set_rng_state_all([s.cpu() for s in ckpt["rng"]["cuda"]])


@contextlib.contextmanager
def _logged(run: Run, argv: list[str] | None) -> Iterator[None]:
    """The log's first record and its last (why the run ended: the files stay, and say it)."""
    reason = "error"
    if run.rank == 0:
        _log_start(run, argv)
    try:
        yield
        reason = "completed"
    except (TrainingDivergedError, KeyboardInterrupt) as err:
        reason = "diverged" if isinstance(err, TrainingDivergedError) else "interrupted"
        raise
    finally:
        end = {"event": "end", "step": run.step, "reason": reason, "val_loss": run.val_loss}
        end |= {"best_val_loss": run.best_val_loss, "wall_time_s": run.elapsed()}  # inf: null
        write_record(run.log_path, end)


def _log_start(run: Run, argv: list[str] | None) -> None:
    """The run's ``config.json`` and the log's first record (where it ran)."""
    if not run.resume:  # --overwrite: a new log
        run.log_path.unlink(missing_ok=True)
    model, cfg = run.model, run.cfg
    configs = {"model_config": model.config.to_dict(), "train_config": cfg.to_dict()}
    atomic_write(run.out_dir / "config.json", json.dumps(configs, indent=2))
    write_record(
        run.log_path,
        {
            "event": "resume" if run.resume else "start",
            "step": run.step,
            **hardware.where_it_ran(run.device),
            "world_size": run.world,
            "dtype": hardware.log_label(run.precision, run.device),
            "precision": run.precision,
            "precision_step_s": run.precision_s,  # fp32 and bf16 forward+backward, if measured
            "compile": cfg.compile,
            "preset": cfg.preset,
            "seed": cfg.seed,
            "command": " ".join(argv if argv is not None else sys.argv),
            **configs,
            "n_parameters": model.num_parameters(),
            "parameters_by_component": model.num_parameters(by_component=True),
            "flops_per_token": run.flops_per_token,
            "tokens_per_step": run.tokens_per_step,
            "peak_flops": run.peak,
            "peak_flops_source": run.peak_source,
            "train_tokens": len(run.train_ids),
            "val_tokens": len(run.val_ids),
        },
    )


def read_log(which: str | Path = "cpu") -> list[dict]:
    """The records of a JSONL metrics log (``"cpu"``/``"gpu"``: a committed model's): ``"start"``
    (device, versions, configs, command, seed, peak FLOP/s), ``"eval"`` (``step``, ``val_loss``,
    ``train_loss``, ``lr``, ``tokens_per_s``, ``mfu``, ...), ``"resume"`` where a run continued,
    and ``"end"`` (``reason``, ``wall_time_s``, ``best_val_loss``)."""
    path = PRETRAINED[which].with_suffix(".jsonl") if which in PRETRAINED else Path(which)
    if not path.is_file():
        raise FileNotFoundError(f"metrics log not found: {path}")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _read_window(run: Run, losses: list, norms: list, t0: float, bar) -> float | None:
    """Read and empty the window's losses and gradient norms (on one GPU the one host sync;
    ``_ddp_stop`` syncs each step under torchrun); a non-finite one stops the run before
    anything is saved. Returns the window's tokens/s."""
    if not losses:
        return None
    values = torch.stack(losses).float().tolist()
    grad_norms, first = torch.stack(norms).tolist(), run.step - len(values)
    losses.clear()
    norms.clear()
    for what, seq in (("loss", values), ("gradient norm", grad_norms)):
        if (bad := next((i for i, v in enumerate(seq) if not math.isfinite(v)), None)) is not None:
            raise _diverged(run, what, seq[bad], first + bad)
    run.train_losses.extend(values)
    rate = len(values) * run.tokens_per_step / (time.perf_counter() - t0)
    bar.set_postfix(loss=f"{values[-1]:.3f}", tok_s=f"{rate:,.0f}", refresh=False)
    return rate


def _diverged(run: Run, what: str, value: float, step: int) -> TrainingDivergedError:
    return TrainingDivergedError(
        f"the {what} became {value:.4g} at step {step} (lr {run.schedule(step):.3g}); the "
        f"weights after it were not saved. The last good checkpoint is "
        f"{run.saved or 'none: nothing was saved'}. Lower the learning rate or raise warmup_steps."
    )


def _evaluate_and_save(run: Run, tokens_per_s: float | None) -> None:
    """Losses on both splits, a log record, and checkpoints if all is well."""
    train_loss, val_loss = run.estimate("train"), run.estimate("val")
    mfu = None
    if tokens_per_s is not None and run.peak:
        mfu = tokens_per_s * run.flops_per_token / (run.peak * run.world)
    write_record(
        run.log_path,
        {
            "event": "eval",
            "step": run.step,
            "train_loss": train_loss,
            "val_loss": val_loss,
            "lr": run.schedule(max(run.step - 1, 0)),
            "tokens_per_s": tokens_per_s,
            "mfu": mfu,
            "peak_flops": run.peak,
            "tokens_seen": run.step * run.tokens_per_step,
            "elapsed_s": run.elapsed(),
        },
    )
    if (problem := _unsaveable(run, val_loss)) is not None:
        raise _diverged(run, *problem[:2], run.step)
    run.val_loss, best = val_loss, val_loss < run.best_val_loss
    run.best_val_loss = min(run.best_val_loss, val_loss)
    _save(run, best=best)


def _unsaveable(run: Run, val_loss: float) -> tuple[str, float, float] | None:
    """Why the weights must not be saved, ``(what, value, limit)``, or ``None``: the one test
    of both saving paths (evaluation and Ctrl-C), one host sync."""
    limit = DIVERGED_LOSS_FACTOR * math.log(run.model.config.vocab_size)
    if not (math.isfinite(val_loss) and val_loss <= limit):
        return "held-out loss", val_loss, limit
    state = [t for t in run.model.state_dict().values() if t.is_floating_point()]
    if not bool(torch.stack([torch.isfinite(t).all() for t in state]).all()):
        return "weights (some entries)", math.nan, limit
    return None


def _save(run: Run, best: bool = False) -> None:
    """``last.pt``; a new best goes to ``best.pt`` first and is copied: ``last.pt`` must never
    claim a better best than ``best.pt`` holds."""
    items = {"step": run.step, "train_config": run.cfg, "tokenizer": run.tok}
    items |= {"best_val_loss": run.best_val_loss, "val_loss": run.val_loss}
    items |= {"precision": run.precision}  # --resume keeps what "auto" chose
    path = run.best_path if best else run.last_path
    save_checkpoint(path, run.model, run.optimizer, **items, elapsed_s=run.elapsed())
    if best:
        with run.best_path.open("rb") as src:
            atomic_write(run.last_path, lambda f: shutil.copyfileobj(src, f))
    run.saved_step = run.step


def _interrupt(run: Run) -> None:
    """After Ctrl-C: rank 0 saves ``last.pt`` if the weights pass the test of an evaluation,
    measured anew (a run diverging since the last one must not leave diverged weights for
    ``--resume``); then ``KeyboardInterrupt`` on every rank."""
    if run.rank == 0:
        head = f"\ninterrupted at step {run.step};"
        kept = f"kept {run.saved}" if run.saved else "nothing was saved"
        if run.step == run.saved_step:
            print(f"{head} {kept}", file=sys.stderr)
        elif (problem := _unsaveable(run, run.estimate("val"))) is not None:
            what, value, limit = problem
            message = f"the {what} is {value:.4g} (limit {limit:.3g}, a diverging run)"
            print(f"{head} not saved: {message}; {kept}", file=sys.stderr)
        else:
            _save(run)
            print(f"{head} saved {run.last_path}", file=sys.stderr)
    raise KeyboardInterrupt


@contextlib.contextmanager
def _stop_at_step_boundary() -> Iterator[types.SimpleNamespace]:
    """The first Ctrl-C only sets ``flag.requested``, read between steps; a second one stops now.
    A ``KeyboardInterrupt`` mid-step (some parameters updated, dropout's RNG advanced) would
    leave a checkpoint that resumes differently. Outside the main thread Ctrl-C acts as usual."""
    flag = types.SimpleNamespace(requested=False)
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum, frame):
        if flag.requested:  # asked twice: the user wants out now
            raise KeyboardInterrupt
        flag.requested = True

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


# ---------------------------------------------------------------- data parallel (torchrun)


@contextlib.contextmanager
def _ddp_group(cfg: TrainConfig) -> Iterator[None]:
    """Under torchrun, one process group for the run."""
    world = hardware.ddp_ranks()[2]
    if world > 1 and not dist.is_initialized():
        gpu = cfg.device != "cpu" and torch.cuda.is_available()
        dist.init_process_group("nccl" if gpu else "gloo")
    try:
        yield
    finally:
        if world > 1 and dist.is_initialized():
            dist.destroy_process_group()


def _ddp_wrap(run: Run) -> None:
    """The model each step calls syncs gradients (each rank draws its own dropout masks)."""
    if run.world > 1:
        ids = [run.device.index] if run.device.type == "cuda" else None
        run.step_model = torch.nn.parallel.DistributedDataParallel(run.model, device_ids=ids)


def _ddp_stop(run: Run, flag) -> bool:
    """Whether Ctrl-C was pressed (read between steps), on any rank: all stop at the same step."""
    if run.world == 1:
        return flag.requested
    t = torch.tensor([float(flag.requested)], device=run.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


if __name__ == "__main__":  # python -m mini_transformer.train
    from .cli import main

    sys.exit(main())
