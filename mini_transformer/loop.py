r"""The training loop: a few named steps over one explicit state object (:class:`Run`).

1. ``_prepare``: device, data, model, optimizer (restored on resume), DDP/compile wrap.
2. ``_log_start``: the run's folder and the first log record (where it ran).
3. ``_train_window``: :func:`~mini_transformer.core.train_step` until the next
   evaluation; the losses stay on the device and are read once per window, so a GPU never
   waits for the host, and a non-finite one stops the run before anything is saved.
4. ``_evaluate_and_save``: losses on both splits, a log record, and checkpoints only
   if the held-out loss and the weights are finite (``best.pt`` before ``last.pt``).

Ctrl-C is read between steps (:func:`~mini_transformer.core.stop_at_step_boundary`), so
``last.pt`` is saved at a step boundary and a resumed run is bit-identical. The command
line, the public names and a summary of the recipe are in :mod:`mini_transformer.train`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from .checkpoints import MetricsLog, is_finite_state, load_checkpoint, save_checkpoint
from .cli import open_temporary
from .core import Schedule, StopFlag, TrainingDivergedError, stop_at_step_boundary, train_step
from .data import CharTokenizer, get_batch, load_corpus
from .devices import measure_matmul_flops, peak_flops, resolve_device, where_it_ran
from .model import TransformerLM
from .precision import autocast, describe, resolve_precision
from .presets import TrainConfig, configure_optimizer, lr_at

__all__ = ["DIVERGED_LOSS_FACTOR", "Run", "train"]

#: A held-out loss above this many times the uniform guess ``ln V`` counts as diverged.
DIVERGED_LOSS_FACTOR = 2.0


# ---------------------------------------------------------------------------- data, loss


@functools.lru_cache(maxsize=1)
def _encoded_corpus() -> tuple[CharTokenizer, torch.Tensor, torch.Tensor]:
    tok = CharTokenizer.from_corpus()
    return tok, tok.encode(load_corpus("train")), tok.encode(load_corpus("val"))


def _seed_for(*keys: int) -> int:
    """A 63-bit seed from a tuple of integers (independent streams per rank and step)."""
    return int(np.random.SeedSequence(list(keys)).generate_state(2, np.uint64)[0] >> np.uint64(1))


@torch.no_grad()
def _estimate_loss(run: Run, data: torch.Tensor, seed: int) -> float:
    """Mean loss on ``eval_batches`` random batches drawn with a fixed seed (same every eval)."""
    g = torch.Generator().manual_seed(seed)
    model, cfg = run.model, run.cfg
    model.eval()
    losses = []
    for _ in range(cfg.eval_batches):
        x, y = get_batch(data, cfg.batch_size, model.config.block_size, g, run.device)
        with run.autocast():
            losses.append(model(x, y)[1])
    model.train()
    return sum(torch.stack(losses).tolist()) / len(losses)  # one host sync per evaluation


# ---------------------------------------------------------------------------- the run's state


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
    rank: int = 0
    world: int = 1
    step_model: torch.nn.Module | None = None  # what a step calls: model, DDP or compiled
    precision: str = "fp32"  # resolved: "fp32" or "bf16" (autocast), see precision.py
    step: int = 0
    best_val: float = math.inf
    val_loss: float | None = None
    saved_step: int | None = None  # step of the last checkpoint written (all checks passed)
    elapsed_before: float = 0.0
    t_start: float = field(default_factory=time.perf_counter)
    losses: list[float] = field(default_factory=list)
    peak: float | None = None
    peak_source: str = ""
    log: MetricsLog = field(default_factory=lambda: MetricsLog(None))

    @property
    def last_path(self) -> Path:
        return self.out_dir / "last.pt"

    @property
    def best_path(self) -> Path:
        return self.out_dir / "best.pt"

    @property
    def tokens_per_step(self) -> int:
        return self.cfg.batch_size * self.model.config.block_size * self.world

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.t_start

    def autocast(self):
        return autocast(self.precision, self.device)


def _distributed() -> tuple[int, int, int]:
    """(rank, local_rank, world_size) from torchrun's environment; (0, 0, 1) otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 0, 1
    return int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0")), world


def _check_out_dir(out_dir: Path, resume: bool, overwrite: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"out_dir {out_dir} is a file, not a folder")
    last = out_dir / "last.pt"
    if not resume and last.exists() and not overwrite:
        raise ValueError(
            f"{out_dir} already holds a checkpoint; resume it (--resume) or choose another --out"
        )
    if resume and not last.is_file():
        raise FileNotFoundError(f"cannot resume: checkpoint not found: {last}")


def _prepare(
    cfg: TrainConfig,
    out_dir: Path,
    resume: bool,
    overwrite: bool,
    setup_hook,
    rank: int,
    local_rank: int,
    world: int,
) -> Run:
    """Step 1: device, data, model and optimizer (restored from ``last.pt`` on resume)."""
    _check_out_dir(out_dir, resume, overwrite)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device, local_rank)
    is_cuda = device.type == "cuda"
    if is_cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    tok, train_ids, val_ids = _encoded_corpus()
    if is_cuda:
        train_ids, val_ids = train_ids.to(device), val_ids.to(device)
    torch.manual_seed(cfg.seed)  # same initial weights on every rank
    model = TransformerLM(cfg.model_config(tok.vocab_size))
    # The token ids are checked once here, for the whole corpus, instead of in every
    # forward pass (where reading a GPU tensor's min and max makes the host wait).
    for ids in (train_ids, val_ids):
        if int(ids.min()) < 0 or int(ids.max()) >= tok.vocab_size:
            raise ValueError("the encoded corpus holds ids outside the tokenizer's vocabulary")
    model.check_token_ids = False
    if is_cuda and not model.config.fused_attention:
        print("note: fused_attention=False; the fused kernel is faster on CUDA", file=sys.stderr)
    model.to(device)
    if setup_hook is not None:
        setup_hook(model)
    run = Run(
        cfg,
        out_dir,
        device,
        model,
        configure_optimizer(model, cfg, fused=is_cuda),
        tok,
        train_ids,
        val_ids,
        rank=rank,
        world=world,
        precision=resolve_precision(cfg.precision, device, d_model=model.config.d_model),
    )
    if resume:
        _restore(run)
    elif world > 1:
        torch.manual_seed(_seed_for(cfg.seed, rank))  # different dropout masks per rank
    run.step_model = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        run.step_model = DDP(model, device_ids=[device.index] if is_cuda else None)
    if cfg.compile:
        run.step_model = torch.compile(run.step_model, mode=cfg.compile_mode)
    if rank == 0:
        run.peak, run.peak_source = peak_flops(device, cfg.peak_flops)
        run.log = MetricsLog(out_dir / "metrics.jsonl")
    return run


def _restore(run: Run) -> None:
    """Continue from ``last.pt``: weights, optimizer, counters, RNG, and the true best loss."""
    ckpt = load_checkpoint(run.last_path, run.model, run.optimizer, map_location=run.device)
    run.step = run.saved_step = ckpt["step"]
    run.val_loss = ckpt.get("val_loss")
    run.elapsed_before = ckpt.get("elapsed_s", 0.0)
    run.best_val = ckpt.get("best_val_loss", math.inf)
    if run.best_path.is_file():  # a crash between writing best.pt and last.pt
        with contextlib.suppress(ValueError):
            best = load_checkpoint(run.best_path).get("best_val_loss")
            run.best_val = min(run.best_val, best if best is not None else math.inf)
    if run.rank == 0:  # RNG states must be CPU ByteTensors, whatever map_location did
        torch.set_rng_state(ckpt["rng"]["torch"].cpu())
        if run.device.type == "cuda" and "cuda" in ckpt["rng"]:
            torch.cuda.set_rng_state_all([s.cpu() for s in ckpt["rng"]["cuda"]])
    else:
        torch.manual_seed(_seed_for(run.cfg.seed, run.rank, run.step))


def _log_start(run: Run, resume: bool, argv: list[str] | None) -> None:
    """Step 2: the run's folder, its ``config.json`` and the first log record."""
    run.out_dir.mkdir(parents=True, exist_ok=True)
    if not resume:
        (run.out_dir / "metrics.jsonl").unlink(missing_ok=True)
    model, cfg = run.model, run.cfg
    configs = {"model_config": model.config.to_dict(), "train_config": cfg.to_dict()}
    config_path = run.out_dir / "config.json"
    tmp, f = open_temporary(config_path)
    try:
        with f:
            f.write(json.dumps(configs, indent=2))
        os.replace(tmp, config_path)
    finally:
        tmp.unlink(missing_ok=True)
    run.log.write(
        {
            "event": "resume" if resume else "start",
            "step": run.step,
            **where_it_ran(run.device),
            "world_size": run.world,
            "dtype": describe(run.precision, run.device),
            "precision": run.precision,
            "compile": cfg.compile,
            "preset": cfg.preset,
            "seed": cfg.seed,
            "command": " ".join(argv if argv is not None else sys.argv),
            **configs,
            "n_parameters": model.num_parameters(),
            "parameters_by_component": model.num_parameters(by_component=True),
            "flops_per_token": model.flops_per_token(),
            "tokens_per_step": run.tokens_per_step,
            "peak_flops": run.peak,
            "peak_flops_source": run.peak_source,
            "train_tokens": len(run.train_ids),
            "val_tokens": len(run.val_ids),
        }
    )


# ---------------------------------------------------------------------------- the loop steps


def _diverged(run: Run, what: str, value: float, step: int) -> TrainingDivergedError:
    good = (
        f"{run.last_path} (step {run.saved_step})"
        if run.saved_step is not None
        else "none: nothing was saved"
    )
    return TrainingDivergedError(
        f"the {what} became {value:.4g} at step {step} (lr {lr_at(step, run.cfg):.3g}); the "
        f"weights after it were not saved. The last good checkpoint is {good}. "
        "Lower the learning rate or raise warmup_steps."
    )


def _train_window(run: Run, end: int, stop: StopFlag, bar) -> float | None:
    """Step 3: train up to step ``end`` (or a Ctrl-C); return tokens/s of the window.

    The losses and gradient norms stay on the device until the window ends; then they
    are read once, and a non-finite one raises
    :class:`~mini_transformer.core.TrainingDivergedError`.
    """
    cfg, model, first = run.cfg, run.model, run.step
    schedule: Schedule = cfg.schedule()
    losses, norms = [], []
    t0 = time.perf_counter()
    while run.step < end and not (stop.requested and run.world == 1):
        g = torch.Generator().manual_seed(_seed_for(cfg.seed, run.rank, run.step))
        x, y = get_batch(run.train_ids, cfg.batch_size, model.config.block_size, g, run.device)
        loss, norm = train_step(
            run.step_model,
            run.optimizer,
            x,
            y,
            schedule(run.step),
            grad_clip=cfg.grad_clip,
            autocast=run.autocast,
        )
        losses.append(loss)
        norms.append(norm if norm is not None else torch.zeros((), device=run.device))
        run.step += 1
        bar.update(1)
    if not losses:
        return None
    values = torch.stack(losses).float().tolist()  # the window's one host sync
    for what, seq in (("loss", values), ("gradient norm", torch.stack(norms).tolist())):
        bad = next((i for i, v in enumerate(seq) if not math.isfinite(v)), None)
        if bad is not None:
            raise _diverged(run, what, seq[bad], first + bad)
    run.losses.extend(values)
    rate = len(values) * run.tokens_per_step / (time.perf_counter() - t0)
    bar.set_postfix(loss=f"{values[-1]:.3f}", tok_s=f"{rate:,.0f}", refresh=False)
    return rate


def _evaluate_and_save(run: Run, tokens_per_s: float | None) -> None:
    """Step 4 (rank 0): losses on both splits, a log record, and checkpoints if all is well."""
    cfg, model = run.cfg, run.model
    if run.device.type == "cpu" and cfg.peak_flops is None and tokens_per_s is not None:
        run.peak = max(run.peak, measure_matmul_flops(repeats=3))
    train_loss = _estimate_loss(run, run.train_ids, _seed_for(cfg.seed, 1))
    val_loss = _estimate_loss(run, run.val_ids, _seed_for(cfg.seed, 2))
    mfu = None
    if tokens_per_s is not None and run.peak:
        mfu = tokens_per_s * model.flops_per_token() / (run.peak * run.world)
    run.log.write(
        {
            "event": "eval",
            "step": run.step,
            "train_loss": train_loss,
            "val_loss": val_loss,
            "lr": lr_at(max(run.step - 1, 0), cfg),
            "tokens_per_s": tokens_per_s,
            "mfu": mfu,
            "peak_flops": run.peak,
            "tokens_seen": run.step * run.tokens_per_step,
            "elapsed_s": run.elapsed(),
        }
    )
    problem = _unsaveable(run, val_loss)
    if problem is not None:
        raise _diverged(run, *problem, run.step)
    run.val_loss = val_loss
    if val_loss < run.best_val:  # best.pt first: last.pt must never claim a better best
        run.best_val = val_loss
        _save(run, run.best_path)
        _copy_atomically(run.best_path, run.last_path)
    else:
        _save(run, run.last_path)
    run.saved_step = run.step


def _loss_limit(run: Run) -> float:
    """The held-out loss above which the weights count as diverged: 2 ln V."""
    return DIVERGED_LOSS_FACTOR * math.log(run.model.config.vocab_size)


def _unsaveable(run: Run, val_loss: float) -> tuple[str, float] | None:
    """Why the current weights must not be saved, as ``(what, value)``; ``None`` if they may.

    The one test both saving paths (evaluation and Ctrl-C) apply: a finite held-out loss
    no higher than :func:`_loss_limit`, and finite weights.
    """
    if not (math.isfinite(val_loss) and val_loss <= _loss_limit(run)):
        return "held-out loss", val_loss
    if not is_finite_state(run.model):
        return "weights (some entries)", math.nan
    return None


def _copy_atomically(source: Path, path: Path) -> None:
    """Copy ``source`` to ``path`` through a fresh ``path.tmp`` (never a symlink's target)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp, f = open_temporary(path, "wb")
        with f, source.open("rb") as src:
            shutil.copyfileobj(src, f)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _save(run: Run, path: Path) -> None:
    save_checkpoint(
        path,
        run.model,
        run.optimizer,
        step=run.step,
        train_config=run.cfg,
        tokenizer=run.tok,
        best_val_loss=run.best_val,
        val_loss=run.val_loss,
        elapsed_s=run.elapsed(),
    )


def _stop_requested(run: Run, stop: StopFlag) -> bool:
    """Whether any rank saw Ctrl-C (all ranks must stop at the same step)."""
    if run.world == 1:
        return stop.requested
    flag = torch.tensor([float(stop.requested)], device=run.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def _save_on_interrupt(run: Run) -> None:
    """At a step boundary after Ctrl-C: ``last.pt`` if the weights pass the same test as at
    an evaluation (a finite held-out loss within the limit, finite weights; rank 0).

    The held-out loss is measured once more here (it costs one evaluation, on Ctrl-C only):
    a run diverging between two evaluations must not leave its diverged weights as
    ``last.pt`` for ``--resume`` to continue from. The evaluation draws from its own
    generator, so a resumed run stays bit-identical.
    """
    if run.rank != 0:
        return
    kept = (
        f"kept {run.last_path} (step {run.saved_step})"
        if run.saved_step is not None
        else "nothing was saved"
    )
    if run.step == run.saved_step:
        print(f"\ninterrupted at step {run.step}; {kept}", file=sys.stderr)
        return
    val_loss = _estimate_loss(run, run.val_ids, _seed_for(run.cfg.seed, 2))
    problem = _unsaveable(run, val_loss)
    if problem is not None:
        what, value = problem
        print(
            f"\ninterrupted at step {run.step}; not saved: the {what} is {value:.4g} "
            f"(limit {_loss_limit(run):.3g}, a diverging run); {kept}",
            file=sys.stderr,
        )
        return
    _save(run, run.last_path)
    run.saved_step = run.step
    print(f"\ninterrupted at step {run.step}; saved {run.last_path}", file=sys.stderr)


def _loop(run: Run, resume: bool) -> None:
    """Step 3 and 4 in turn until ``cfg.steps`` (the first evaluation is at step 0)."""
    cfg = run.cfg
    bar = tqdm(
        total=cfg.steps,
        initial=run.step,
        disable=not cfg.progress or run.rank != 0,
        desc=f"train {cfg.preset}",
        dynamic_ncols=True,
    )
    with bar, stop_at_step_boundary() as stop:
        if run.rank == 0 and not resume:
            _evaluate_and_save(run, None)  # the loss before any training: about ln(vocab_size)
        run.model.train()
        while run.step < cfg.steps:
            next_eval = (run.step // cfg.eval_interval + 1) * cfg.eval_interval
            rate = _train_window(run, min(next_eval, cfg.steps), stop, bar)
            if _stop_requested(run, stop):
                _save_on_interrupt(run)
                raise KeyboardInterrupt
            if run.rank == 0 and (run.step % cfg.eval_interval == 0 or run.step == cfg.steps):
                _evaluate_and_save(run, rate)


def _remove_unfinished(out_dir: Path, created: bool) -> None:
    """After a fresh run failed before its first checkpoint: its ``config.json`` and
    ``metrics.jsonl`` go (they describe a run that left nothing), and the folder too if
    this run created it and it is now empty."""
    for name in ("config.json", "metrics.jsonl"):
        with contextlib.suppress(OSError):
            (out_dir / name).unlink(missing_ok=True)
    if created:
        with contextlib.suppress(OSError):
            out_dir.rmdir()  # only if empty


def train(
    cfg: TrainConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    argv: list[str] | None = None,
    setup_hook: Callable[[TransformerLM], None] | None = None,
) -> dict:
    """Train a ``TransformerLM`` on the bundled corpus; write checkpoints and a log.

    Args:
        cfg: the run's settings (see :func:`~mini_transformer.presets.get_preset`).
        out_dir: folder for ``last.pt``, ``best.pt``, ``metrics.jsonl`` and ``config.json``.
        resume: continue from ``out_dir/last.pt`` up to ``cfg.steps`` (bit-identical to an
            uninterrupted run on the same machine and thread count).
        overwrite: allow a fresh run in a folder that already holds a checkpoint.
        argv: the command line to record (default ``sys.argv``).
        setup_hook: called with the model after it is built (tests use it to inject faults).

    Returns:
        ``{"step", "losses" (per-step training losses of this call), "val_loss",
        "best_val_loss", "reason" ("completed"), "wall_time_s", "out_dir"}``.

    Raises:
        mini_transformer.core.TrainingDivergedError: the run diverged (nothing diverged was saved).
        KeyboardInterrupt: after saving ``last.pt`` at a step boundary.
        OSError: a write failed (disk full); checkpoints already written stay intact, and a
            fresh run that saved none leaves no ``config.json``/``metrics.jsonl`` behind.
    """
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    out_dir = Path(out_dir)
    created = not out_dir.exists()
    rank, local_rank, world = _distributed()
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if cfg.device != "cpu" and torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    run, started = None, False
    try:
        run = _prepare(cfg, out_dir, resume, overwrite, setup_hook, rank, local_rank, world)
        if rank == 0:
            started = True  # from here on, config.json and metrics.jsonl are this run's
            _log_start(run, resume, argv)
        reason = "error"
        try:
            _loop(run, resume)
            reason = "completed"
        except TrainingDivergedError:
            reason = "diverged"
            raise
        except KeyboardInterrupt:
            reason = "interrupted"
            raise
        finally:
            best = run.best_val if math.isfinite(run.best_val) else None
            run.log.write(
                {
                    "event": "end",
                    "step": run.step,
                    "reason": reason,
                    "val_loss": run.val_loss,
                    "best_val_loss": best,
                    "wall_time_s": run.elapsed(),
                }
            )
    except BaseException as err:
        if started and not resume and not isinstance(err, TrainingDivergedError):
            if run.saved_step is None:  # a fresh run that saved nothing
                _remove_unfinished(out_dir, created)
        raise
    finally:
        if world > 1 and dist.is_initialized():
            dist.destroy_process_group()
    return {
        "step": run.step,
        "losses": run.losses,
        "val_loss": run.val_loss,
        "best_val_loss": run.best_val,
        "reason": reason,
        "wall_time_s": run.elapsed(),
        "out_dir": str(out_dir),
    }
