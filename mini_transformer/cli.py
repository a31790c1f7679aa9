r"""The command line of chapter 6, ``python -m mini_transformer.train`` (train.py calls
:func:`main`)::

    python -m mini_transformer.train --preset cpu --out runs/cpu           # train
    python -m mini_transformer.train --preset gpu --out runs/gpu --compile # on a GPU
    python -m mini_transformer.train --out runs/cpu --resume --steps 3000  # continue
    python -m mini_transformer.train sample --ckpt gpu --prompt "ROMEO:"  # bundled model
    python -m mini_transformer.train export --ckpt runs/cpu/best.pt --overwrite  # -> assets/

This command line and the sweeps in ``tools/`` refuse bad arguments and output paths (exit 2)
before they write anything (``run_cli``); an existing file is replaced only with ``--overwrite``,
an input never.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from . import hardware
from .checkpoints import (
    PRETRAINED,
    RunFolderInUse,
    check_output_dir,
    config_diff,
    load_checkpoint,
    load_model,
    prepare_export,
)
from .checks import check_device
from .core import COMPILE_MODES, PRESETS, TrainConfig, get_preset
from .model import POSITIONAL_SCHEMES, TransformerLM
from .train import train

__all__ = ["main"]


def _number(text: str, kind: type, ok: Callable[[float], bool], what: str):
    try:
        if ok(value := kind(text)):
            return value
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")


def positive_int(text: str) -> int:
    return _number(text, int, lambda v: v >= 1, "a positive integer")


def positive_float(text: str) -> float:
    return _number(text, float, lambda v: v > 0 and math.isfinite(v), "a positive number")


def printable(text: str) -> str:
    """``text`` safe to print on any UTF-8 stream (a path's undecodable bytes become U+FFFD)."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    if not isinstance(err, (OSError, ValueError)):
        text = f"{type(err).__name__}: {text}"
    return text[:2000]


def run_cli(
    parser: argparse.ArgumentParser, check: Callable[[], object],
    work: Callable[[object], object] | None = None,
):  # fmt: skip
    """Run a command with the package's exit codes: 2 (with the usage) for a ``ValueError``,
    ``TypeError`` or ``FileNotFoundError`` from ``check()``; 1 (one line on stderr) for any
    failure in ``work(checked)`` or an ``OSError`` from ``check``; 130 for Ctrl-C."""
    try:
        try:
            checked = check()
        except (ValueError, TypeError, FileNotFoundError) as err:
            parser.error(_one_line(err))
        if work is None:
            return checked
        return work(checked)
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except RunFolderInUse as err:  # another run took the folder after check(): exit 2
        parser.error(_one_line(err))
    except Exception as err:  # not SystemExit: parser.error's exit 2 passes through
        print(f"{parser.prog}: error: {_one_line(err)}", file=sys.stderr)
        raise SystemExit(1) from None


#: For the refusal of ``--preset gpu`` on a CPU: the share of the measured fp32 matmul
#: ceiling a training step of the gpu model reaches on a CPU (benchmarks/results/train_step_*:
#: fp32, 2-core EPYC, 57% on 2 threads, 70% on 1 by CPU clock); the estimate uses 50%.
CPU_STEP_CEILING_SHARE = 0.5


def _train_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mini_transformer.train",
        description="Train the character-level Shakespeare model. Other commands: "
        "'sample' (generate text) and 'export' (write a small weights file).",
    )
    p.add_argument("--preset", choices=sorted(PRESETS), help="model size and schedule")
    p.add_argument("--out", required=True, help="run folder (checkpoints, metrics.jsonl)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    p.add_argument("--overwrite", action="store_true", help="start afresh even if OUT has a run")
    p.add_argument("--steps", type=int, help="total steps (on --resume: a new total)")
    for name in ("--batch-size", "--eval-interval", "--eval-batches", "--seed"):
        p.add_argument(name, type=int)  # TrainConfig checks them all (exit 2)
    p.add_argument("--lr", type=float)
    p.add_argument("--positional", choices=POSITIONAL_SCHEMES)
    p.add_argument("--device", help="auto (default), cpu, cuda or cuda:N")
    p.add_argument(
        "--compile", nargs="?", const="default", choices=COMPILE_MODES, help="torch.compile"
    )
    p.add_argument("--threads", type=int, help="default: one per physical core")
    p.add_argument("--precision", choices=hardware.PRECISIONS, help="auto (default), fp32 or bf16")
    p.add_argument("--peak-tflops", type=positive_float, help="device peak for MFU (TFLOP/s)")
    p.add_argument("--no-progress", action="store_false", dest="progress", default=None)
    p.add_argument("--allow-cpu", action="store_true", help="train the gpu preset without CUDA")
    return p


def _overrides(args: argparse.Namespace) -> dict:
    names = ("steps", "batch_size", "lr", "eval_interval", "eval_batches", "seed", "positional")
    overrides = {k: getattr(args, k) for k in (*names, "device", "precision", "progress")}
    cores = None if args.resume else max(1, hardware.physical_cores() // hardware.ddp_ranks()[2])
    overrides["threads"] = args.threads if args.threads is not None else cores
    overrides["peak_flops"] = args.peak_tflops * 1e12 if args.peak_tflops else None
    if args.compile:
        overrides |= {"compile": True, "compile_mode": args.compile}
    return overrides


def _resume_config(parser, args, overrides: dict) -> TrainConfig:
    last = Path(args.out) / "last.pt"
    try:
        ckpt = load_checkpoint(last)
    except (FileNotFoundError, ValueError) as err:
        parser.error(f"cannot resume: {err}")
    stored = TrainConfig.from_dict(ckpt["train_config"])
    if args.preset is not None:
        if (wanted := get_preset(args.preset, **overrides).model) != stored.model:
            parser.error(
                f"{last} was trained with a different model config than preset "
                f"{args.preset!r} ({config_diff(stored.model.to_dict(), wanted.to_dict())})"
            )
    if args.positional is not None:  # the one model setting the command line has
        parser.error("model settings (e.g. --positional) cannot change on --resume")
    run = {**stored.to_dict(), **{k: v for k, v in overrides.items() if v is not None}}
    return TrainConfig.from_dict(run)


def gpu_preset_refusal(cfg: TrainConfig) -> str | None:
    """Why the ``gpu`` preset should not run here, with a time estimate (the run's FLOPs over
    :data:`CPU_STEP_CEILING_SHARE` of a matmul ceiling measured now); ``None`` if it may."""
    if cfg.preset != "gpu" or torch.cuda.is_available() or cfg.device.startswith("cuda"):
        return None
    model = TransformerLM(cfg.model)
    tokens = cfg.steps * cfg.batch_size * model.config.block_size
    rate = CPU_STEP_CEILING_SHARE * hardware.measure_matmul_flops(n=1024, repeats=3)
    hours = tokens * model.flops_per_token() / rate / 3600
    return (
        f"--preset gpu needs a CUDA GPU, and none is available. On this CPU its "
        f"{cfg.steps} steps x {cfg.batch_size * model.config.block_size:,} tokens would take "
        f"about {hours:,.0f} hours (estimated at {rate / 1e9:.0f} GFLOP/s, half of the fp32 "
        "matmul rate this CPU reaches right now; a busy machine measures less). Instead: "
        "train '--preset cpu' (about 70 s on 2 quiet cores), or sample the committed "
        "H100 model: python -m mini_transformer.train sample --ckpt gpu. "
        "Pass --allow-cpu to train the gpu preset here anyway."
    )


def _main_train(argv: list[str]) -> int:
    parser = _train_parser()
    args = parser.parse_args(argv)

    def check() -> TrainConfig:  # what the run would refuse, before it starts (writes nothing)
        rank, local_rank, _ = hardware.ddp_ranks()  # torchrun's environment, checked
        overrides = _overrides(args)
        if rank == 0:  # the folder is rank 0's
            check_output_dir(args.out, resume=args.resume, overwrite=args.overwrite)
        if args.resume:
            cfg = _resume_config(parser, args, overrides)
        elif args.preset is None:
            raise ValueError("--preset is required (unless --resume)")
        else:
            cfg = get_preset(args.preset, **overrides)
        device = check_device("device", cfg.device, run=True, local_rank=local_rank)
        hardware.resolve_precision(cfg.precision, device)  # a forced bf16 on a GPU without it
        if cfg.preset == "gpu" and not args.allow_cpu and (refusal := gpu_preset_refusal(cfg)):
            raise ValueError(refusal)  # (it times a matmul on a CPU)
        return cfg

    def work(cfg: TrainConfig) -> int:  # a diverged run: run_cli's one line and exit 1
        command = ["python", "-m", "mini_transformer.train", *argv]
        result = train(cfg, args.out, resume=args.resume, overwrite=args.overwrite, argv=command)
        if hardware.ddp_ranks()[0] == 0:
            print(
                f"done: step {result['step']}, val loss {result['val_loss']:.4f}, "
                f"best {result['best_val_loss']:.4f}, {result['wall_time_s']:.0f} s; "
                + printable(f"checkpoints in {args.out}")
            )
        return 0

    return run_cli(parser, check, work)


def _main_sample(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mini_transformer.train sample",
        description="Generate text from a checkpoint.",
    )
    p.add_argument("--ckpt", default="cpu", help="a checkpoint or weights file, 'cpu' or 'gpu'")
    p.add_argument("--prompt", default="\n", help="text to continue")
    p.add_argument("--tokens", type=positive_int, default=500, help="characters to generate")
    p.add_argument("--temperature", type=positive_float, default=0.8)
    p.add_argument("--top-k", type=positive_int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)

    def check():
        if not args.prompt:
            raise ValueError("--prompt must hold at least one character (default: a newline)")
        if args.tokens > 100_000:  # one forward each: about a play at most
            raise ValueError(f"--tokens must be at most 100000, got {args.tokens}")
        check_device("--device", args.device)  # a clear error for "tpu" or a missing GPU
        model, tok, _ = load_model(args.ckpt, args.device)
        if (args.top_k or 0) > (v := model.config.vocab_size):  # before any sampling
            raise ValueError(f"--top-k must be at most the model's vocab_size {v}")
        return model, tok, tok.encode(args.prompt)[None, :].to(args.device)

    def work(checked) -> int:
        model, tok, idx = checked
        g = torch.Generator().manual_seed(args.seed)
        out = model.generate(idx, args.tokens, args.temperature, args.top_k, generator=g)
        print(printable(tok.decode(out[0])))
        return 0

    return run_cli(p, check, work)


def _main_export(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mini_transformer.train export",
        description="Write a half-precision weights-only file.",
    )
    p.add_argument("--ckpt", required=True, help="a full checkpoint, e.g. runs/cpu/best.pt")
    p.add_argument("--out", default=str(PRETRAINED["cpu"]), help="the weights file (.pt)")
    p.add_argument("--log", help="metrics log to copy beside it (default: the run's, if any)")
    p.add_argument("--overwrite", action="store_true", help="replace a committed model's files")
    args = p.parse_args(argv)

    def check() -> Callable[[], Path]:  # checks and builds the files in memory; writes nothing
        if args.log is not None and not Path(args.log).is_file():
            raise FileNotFoundError(f"--log {args.log}: no such file")
        log = Path(args.log) if args.log else Path(args.ckpt).parent / "metrics.jsonl"
        log = log if log.is_file() else None
        return prepare_export(args.ckpt, args.out, log, overwrite=args.overwrite)

    def work(write: Callable[[], Path]) -> int:
        path = write()
        print(printable(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)"))
        return 0

    return run_cli(p, check, work)


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``train`` (default), ``sample`` or ``export``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {"train": _main_train, "sample": _main_sample, "export": _main_export}
    if argv and argv[0] in commands:
        return commands[argv[0]](argv[1:])
    return _main_train(argv)
