r"""Training the character-level Shakespeare model: loop, checkpoints, metrics log, command line.

The loop is the standard recipe for small GPTs (nanoGPT's, in one file):

- **AdamW** with two parameter groups: weight decay on the matrices of the linear layers,
  none on biases, LayerNorm gains and embeddings (decaying those only shrinks what the
  LayerNorm undoes anyway, or makes rare tokens' vectors vanish).
- **Learning rate**: linear warm-up from 0 over ``warmup_steps``, then a cosine decay to
  ``min_lr`` at ``steps`` (:func:`lr_at`).
- **Gradient clipping** to a global norm of ``grad_clip``.
- On CUDA: **bf16 autocast**, fused attention (``F.scaled_dot_product_attention``), TF32
  matmuls, and optionally ``torch.compile``. On the CPU everything stays float32.
- **Periodic evaluation** on fixed batches of the training works and of the held-out plays
  (:data:`mini_transformer.data.VAL_WORKS`), a **JSONL metrics log** (the first record
  says where and how the run happened), and **checkpoints** ``last.pt`` / ``best.pt``,
  written atomically, holding everything needed to resume the run bit for bit.
- A **NaN/inf loss stops** the run before the bad update is applied; the last good
  checkpoint stays. **Ctrl-C** saves ``last.pt`` first.
- ``torchrun --nproc_per_node=N`` runs it data-parallel (DDP; gloo on CPU, nccl on CUDA);
  rank 0 evaluates, logs and saves.

Command line::

    python -m mini_transformer.train --preset cpu --out runs/cpu           # train
    python -m mini_transformer.train --preset gpu --out runs/gpu --compile # on a GPU
    python -m mini_transformer.train --out runs/cpu --resume --steps 3000  # continue
    python -m mini_transformer.train sample --ckpt gpu --prompt "ROMEO:"  # bundled model
    python -m mini_transformer.train export --ckpt runs/cpu/best.pt        # -> assets/

In Python (chapter 6)::

    from mini_transformer.train import load_pretrained, read_log
    model, tok = load_pretrained("gpu")  # a committed model ("cpu" or "gpu"), eval mode
    log = read_log("gpu")                # its metrics log: a list of dicts
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from .data import ASSETS_DIR, CharTokenizer, get_batch, load_corpus
from .model import POSITIONAL_SCHEMES, TransformerConfig, TransformerLM
from .precision import PRECISIONS, autocast, describe, physical_cores, resolve_precision

__all__ = [
    "PRESETS",
    "TrainConfig",
    "get_preset",
    "lr_at",
    "configure_optimizer",
    "measure_matmul_flops",
    "peak_flops",
    "evaluate",
    "train",
    "TrainingDivergedError",
    "save_checkpoint",
    "load_checkpoint",
    "load_model",
    "export_weights",
    "load_pretrained",
    "read_log",
    "PRETRAINED",
    "PRETRAINED_WEIGHTS",
    "PRETRAINED_LOG",
    "PRETRAINED_CONFIG",
    "main",
]

CHECKPOINT_FORMAT = "mini_transformer.checkpoint"
WEIGHTS_FORMAT = "mini_transformer.weights"

#: The committed models (written by ``python -m mini_transformer.train export``): the
#: ``cpu`` preset trained on a 2-core CPU and the ``gpu`` preset trained on one H100.
#: Each ``.pt`` has a ``.jsonl`` metrics log and a ``.json`` configuration beside it.
PRETRAINED = {
    "cpu": ASSETS_DIR / "shakespeare_char.pt",
    "gpu": ASSETS_DIR / "shakespeare_char_gpu.pt",
}
PRETRAINED_WEIGHTS = PRETRAINED["cpu"]
PRETRAINED_LOG = PRETRAINED_WEIGHTS.with_suffix(".jsonl")
PRETRAINED_CONFIG = PRETRAINED_WEIGHTS.with_suffix(".json")

#: Dense bf16 tensor-core peaks (FLOP/s) from the vendors' data sheets, for MFU.
GPU_PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}

# ---------------------------------------------------------------------------- configuration

#: Model hyper-parameters of each preset (``vocab_size`` comes from the tokenizer) and the
#: training settings that differ from :class:`TrainConfig`'s defaults.
PRESETS: dict[str, dict] = {
    # Seconds on one CPU core: for tests and for watching the loop in chapter 6.
    "tiny": dict(
        model=dict(block_size=32, d_model=32, n_heads=2, n_layers=2, dropout=0.0),
        batch_size=8, steps=60, lr=1e-2, min_lr=1e-3, warmup_steps=5,
        eval_interval=20, eval_batches=2,
    ),
    # About a minute on a quiet 2-core CPU (2 threads, bf16 where native): the committed
    # model when no GPU is at hand. 1360 steps x 2048 tokens = 2.8M tokens, 0.6 epoch.
    # Two layers: at an equal compute budget (7.9 TFLOP) a shallower model seeing more
    # text reached a lower held-out loss (benchmarks/results/cpu_recipe_sweep.json:
    # 2 layers x 1360 steps 1.72, 3 x 910 1.77, 4 x 690 1.82), and on 2 threads a step's
    # time was proportional to its FLOPs (benchmarks/results/cpu_step_ab_2threads.json).
    "cpu": dict(
        model=dict(block_size=128, d_model=128, n_heads=4, n_layers=2, dropout=0.0),
        batch_size=16, steps=1360, lr=3e-3, min_lr=3e-4, warmup_steps=50,
        eval_interval=170, eval_batches=8,
    ),
    # nanoGPT's shakespeare-char configuration (~10.7M parameters); minutes on one GPU.
    "gpu": dict(
        model=dict(block_size=256, d_model=384, n_heads=6, n_layers=6, dropout=0.2),
        batch_size=64, steps=5000, lr=1e-3, min_lr=1e-4, warmup_steps=100,
        eval_interval=250, eval_batches=100, beta2=0.99,
    ),
}

MODEL_KEYS = tuple(f.name for f in fields(TransformerConfig) if f.name != "vocab_size")


@dataclass
class TrainConfig:
    """Everything a run needs besides the data. ``model`` holds TransformerConfig fields
    (without ``vocab_size``, which the tokenizer fixes).

    Attributes:
        preset: name of the preset it came from (recorded in the log).
        batch_size: sequences per step (per process under DDP).
        steps: total optimizer steps.
        lr: peak learning rate (reached at the end of the warm-up).
        min_lr: the floor of the cosine decay.
        warmup_steps: linear warm-up length.
        weight_decay: AdamW's decoupled weight decay (not applied to biases, norms, embeddings).
        beta1: AdamW's first-moment decay.
        beta2: AdamW's second-moment decay.
        grad_clip: maximum global gradient norm (0 disables clipping).
        eval_interval: evaluate, log and save every this many steps (and at the end).
        eval_batches: batches per split in each evaluation.
        seed: seeds the initialisation, the batches and dropout.
        device: ``"auto"`` (CUDA if available), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        compile: wrap the model in ``torch.compile``.
        progress: show a tqdm progress bar.
        peak_flops: the device's peak FLOP/s for MFU; ``None``: the GPU table, or a quick
            matmul benchmark on the CPU.
        threads: ``torch.set_num_threads`` (``None``: leave it; the command line passes
            one thread per physical core).
        precision: ``"auto"`` (bf16 autocast where the device multiplies bf16 natively and
            the model is wide enough for it to pay, see :mod:`mini_transformer.precision`),
            ``"fp32"`` or ``"bf16"``.
    """

    preset: str = "custom"
    model: dict = field(default_factory=dict)
    batch_size: int = 32
    steps: int = 1000
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    eval_interval: int = 100
    eval_batches: int = 20
    seed: int = 0
    device: str = "auto"
    compile: bool = False
    progress: bool = True
    peak_flops: float | None = None
    threads: int | None = None
    precision: str = "auto"

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        unknown = sorted(set(self.model) - set(MODEL_KEYS))
        if unknown:
            raise ValueError(f"unknown model settings {unknown}; known: {list(MODEL_KEYS)}")
        for name in ("batch_size", "steps", "eval_interval", "eval_batches"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        for name in ("warmup_steps", "seed"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
        for name in ("lr", "min_lr", "weight_decay", "grad_clip"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr must be <= lr, got min_lr={self.min_lr}, lr={self.lr}")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)!r}")
        if self.peak_flops is not None and not self.peak_flops > 0:
            raise ValueError(f"peak_flops must be positive or None, got {self.peak_flops!r}")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise ValueError(f"threads must be a positive integer or None, got {self.threads!r}")

    def model_config(self, vocab_size: int) -> TransformerConfig:
        """The :class:`TransformerConfig` of this run."""
        return TransformerConfig(vocab_size=vocab_size, **self.model)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def get_preset(name: str, **overrides) -> TrainConfig:
    """The :class:`TrainConfig` of preset ``name`` (``"tiny"``, ``"cpu"``, ``"gpu"``).

    ``overrides`` may name training fields (``steps=10``) or model fields
    (``positional="alibi"``, ``dropout=0.1``); ``None`` values are ignored.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    settings = {k: v for k, v in PRESETS[name].items() if k != "model"}
    model = dict(PRESETS[name]["model"])
    train_keys = {f.name for f in fields(TrainConfig)} - {"model", "preset"}
    for k, v in overrides.items():
        if v is None:
            continue
        if k in MODEL_KEYS:
            model[k] = v
        elif k in train_keys:
            settings[k] = v
        else:
            raise ValueError(f"unknown setting {k!r}")
    return TrainConfig(preset=name, model=model, **settings)


def lr_at(step: int, cfg: TrainConfig) -> float:
    r"""Learning rate of update ``step`` (0-based): linear warm-up, then cosine decay.

    .. math::

        \eta(s) = \begin{cases} \eta_\max \frac{s + 1}{w} & s < w \\
        \eta_\min + \tfrac12 (\eta_\max - \eta_\min)(1 + \cos \pi p),\;
        p = \frac{s - w}{S - w} & s \ge w \end{cases}

    with ``w = warmup_steps`` and ``S = steps`` (``p`` capped at 1).
    """
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (cfg.lr - cfg.min_lr)


def configure_optimizer(model: TransformerLM, cfg: TrainConfig, fused: bool = False):
    """AdamW with weight decay only on the weight matrices of linear layers.

    Biases, LayerNorm gains and the embeddings (token and position; the tied LM head is
    the token embedding) are not decayed.
    """
    no_decay = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding)
                for p in m.parameters(recurse=False)}
    if model.pos_emb is not None:
        no_decay |= {id(p) for p in model.pos_emb.parameters()}
    decay, other = [], []
    for m in model.modules():
        for name, p in m.named_parameters(recurse=False):
            if id(p) in no_decay or not p.requires_grad:
                continue
            (decay if isinstance(m, torch.nn.Linear) and name == "weight" else other).append(p)
    seen = {id(p) for p in decay + other}
    other += [p for p in model.parameters() if id(p) not in seen]  # the embeddings
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": other, "weight_decay": 0.0},
    ]
    kwargs = {"fused": True} if fused else {}
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), **kwargs)


# ---------------------------------------------------------------------------- device facts


def measure_matmul_flops(n: int = 1024, repeats: int = 5, device: str = "cpu",
                         dtype: torch.dtype = torch.float32) -> float:
    """The machine's matmul ceiling: best FLOP/s of ``repeats`` timed ``n x n`` products.

    A square matmul is the most efficient thing a CPU or GPU does, so its rate is a
    realistic peak to measure a training step against (the "fraction of the ceiling").
    Uses the current ``torch.get_num_threads()``.
    """
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    inner = max(1, int(2e9 // (2 * n**3)))  # about 2 GFLOP per timing
    for _ in range(2):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(inner):
            a @ b
        sync()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 * inner / best


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    return f"CPU ({name}, {os.cpu_count()} cores)"


def peak_flops(device: torch.device, given: float | None = None) -> tuple[float | None, str]:
    """Peak FLOP/s of one device for MFU, and where the number comes from."""
    if given is not None:
        return float(given), "given"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, value in GPU_PEAK_FLOPS.items():
            if key in name:
                return value, f"data sheet, bf16 dense ({key})"
        return None, f"unknown GPU {name!r}: pass --peak-tflops"
    threads = torch.get_num_threads()
    return measure_matmul_flops(), (
        f"measured: fp32 1024x1024 matmul, {threads} thread(s); re-measured at each "
        "evaluation, the best so far is used (a shared CPU's rate varies with its load)"
    )


# ---------------------------------------------------------------------------- data


@functools.lru_cache(maxsize=1)
def _encoded_corpus() -> tuple[CharTokenizer, torch.Tensor, torch.Tensor]:
    tok = CharTokenizer.from_corpus()
    return tok, tok.encode(load_corpus("train")), tok.encode(load_corpus("val"))


def _seed_for(*keys: int) -> int:
    """A 63-bit seed from a tuple of integers (independent streams per rank and step)."""
    return int(np.random.SeedSequence(list(keys)).generate_state(2, np.uint64)[0] >> np.uint64(1))


@torch.no_grad()
def evaluate(model: TransformerLM, ids: torch.Tensor, block_size: int | None = None,
             batch_size: int = 16, max_batches: int | None = None) -> float:
    """Mean next-token loss (nats) over consecutive, non-overlapping windows of ``ids``.

    Deterministic (no sampling): the windows ``ids[i*T : (i+1)*T + 1]`` are taken in order,
    ``batch_size`` at a time, up to ``max_batches`` batches. ``exp`` of the result is the
    perplexity. ``block_size`` may exceed the model's for schemes that extrapolate.
    """
    T = block_size or model.config.block_size
    n_windows = (len(ids) - 1) // T
    if n_windows < 1:
        raise ValueError(f"ids has {len(ids)} tokens, fewer than block_size + 1 = {T + 1}")
    if max_batches is not None:
        n_windows = min(n_windows, max_batches * batch_size)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, n_windows, batch_size):
        rows = torch.arange(start, min(start + batch_size, n_windows))[:, None] * T
        idx = rows + torch.arange(T + 1)[None, :]  # (b, T + 1)
        chunk = ids[idx].to(device)
        _, loss = model(chunk[:, :-1], chunk[:, 1:])
        total += loss.item() * len(rows)
        count += len(rows)
    model.train(was_training)
    return total / count


@torch.no_grad()
def _estimate_loss(model, data, cfg, seed, device, amp) -> float:
    """Mean loss on ``eval_batches`` random batches drawn with a fixed seed (same every eval)."""
    g = torch.Generator().manual_seed(seed)
    block = model.config.block_size
    model.eval()
    losses = []
    for _ in range(cfg.eval_batches):
        x, y = get_batch(data, cfg.batch_size, block, generator=g, device=device)
        with amp():
            losses.append(model(x, y)[1].item())
    model.train()
    return sum(losses) / len(losses)


# ---------------------------------------------------------------------------- checkpoints


def _atomic_save(obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)  # a reader sees the old file or the new one, never half of one


def save_checkpoint(path: str | Path, model: TransformerLM, optimizer=None, *, step: int = 0,
                    train_config: TrainConfig | dict | None = None,
                    tokenizer: CharTokenizer | None = None, **extra) -> Path:
    """Write a full checkpoint atomically (temporary file, then ``os.replace``).

    Contents (only tensors, numbers, strings, lists and dicts, so it loads with
    ``torch.load(weights_only=True)``): ``format``, ``model_config`` (a plain dict),
    ``model`` (state dict), ``optimizer`` (state dict or None), ``step``, ``train_config``,
    ``tokenizer``, ``rng`` (CPU and CUDA generator states, for an exact resume) and any
    ``extra`` items (e.g. ``best_val_loss``).
    """
    if isinstance(train_config, TrainConfig):
        train_config = train_config.to_dict()
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    ckpt = {
        "format": CHECKPOINT_FORMAT,
        "version": 1,
        "model_config": model.config.to_dict(),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "step": int(step),
        "train_config": train_config,
        "tokenizer": tokenizer.to_dict() if tokenizer is not None else None,
        "rng": rng,
        **extra,
    }
    path = Path(path)
    _atomic_save(ckpt, path)
    return path


def _config_diff(a: dict, b: dict) -> str:
    keys = sorted(set(a) | set(b))
    return ", ".join(f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in keys if a.get(k) != b.get(k))


def load_checkpoint(path: str | Path, model: TransformerLM | None = None, optimizer=None,
                    map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint (or an exported weights file) with ``torch.load(weights_only=True)``.

    If ``model`` is given, its config must equal the stored one and the weights are loaded
    into it; likewise ``optimizer``. Returns the checkpoint dict.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is corrupt or not a mini_transformer checkpoint, or its model
            config differs from ``model``'s (the message lists the differing fields).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # truncated zip, random bytes, a pickle with code in it ...
        raise ValueError(
            f"could not read checkpoint {path}: the file is corrupt or not a torch checkpoint "
            f"({type(err).__name__}: {str(err)[:200]})"
        ) from None
    if not isinstance(ckpt, dict) or ckpt.get("format") not in (CHECKPOINT_FORMAT, WEIGHTS_FORMAT):
        raise ValueError(f"{path} is not a mini_transformer checkpoint (no 'format' marker)")
    if model is not None:
        stored = ckpt["model_config"]
        if stored != model.config.to_dict():
            raise ValueError(
                f"checkpoint {path} was saved from a different model config "
                f"(checkpoint vs model: {_config_diff(stored, model.config.to_dict())})"
            )
        model.load_state_dict(ckpt["model"])
    if optimizer is not None:
        if ckpt.get("optimizer") is None:
            raise ValueError(f"checkpoint {path} holds no optimizer state (a weights-only file?)")
        optimizer.load_state_dict(ckpt["optimizer"])
    return ckpt


def load_model(path: str | Path, device: str | torch.device = "cpu"
               ) -> tuple[TransformerLM, CharTokenizer, dict]:
    """Build the model stored in a checkpoint or weights file: ``(model, tokenizer, ckpt)``.

    The model is float32, on ``device``, in eval mode.
    """
    ckpt = load_checkpoint(path)
    model = TransformerLM(TransformerConfig.from_dict(ckpt["model_config"]))
    load_checkpoint(path, model)  # re-validates and loads (fp16 weights are cast to fp32)
    if ckpt.get("tokenizer"):
        tok = CharTokenizer.from_dict(ckpt["tokenizer"])
    else:
        tok = _encoded_corpus()[0]
    return model.to(device).eval(), tok, ckpt


def export_weights(ckpt_path: str | Path, out_path: str | Path = PRETRAINED_WEIGHTS,
                   log_path: str | Path | None = None) -> Path:
    """Write a small half-precision, weights-only copy of a checkpoint (for committing).

    Keeps the model config, tokenizer, step and losses; drops the optimizer and RNG.
    Tied tensors are stored once. If ``log_path`` is given, the metrics log is copied
    beside the weights (``.jsonl``) and the configuration written as ``.json``.
    """
    ckpt = load_checkpoint(ckpt_path)
    if ckpt["format"] != CHECKPOINT_FORMAT:
        raise ValueError(f"{ckpt_path} is already a weights file")
    half: dict[int, torch.Tensor] = {}  # data_ptr -> fp16 copy, so tied weights stay tied
    state = {}
    for k, v in ckpt["model"].items():
        if v.is_floating_point():
            key = v.data_ptr()
            if key not in half:
                half[key] = v.to(torch.float16)
            state[k] = half[key]
        else:
            state[k] = v
    weights = {
        "format": WEIGHTS_FORMAT,
        "version": 1,
        "model_config": ckpt["model_config"],
        "model": state,
        "tokenizer": ckpt["tokenizer"],
        "step": ckpt["step"],
        "train_config": ckpt["train_config"],
        "val_loss": ckpt.get("val_loss"),
        "best_val_loss": ckpt.get("best_val_loss"),
    }
    out_path = Path(out_path)
    _atomic_save(weights, out_path)
    config = {"model_config": ckpt["model_config"], "train_config": ckpt["train_config"],
              "step": ckpt["step"], "val_loss": ckpt.get("val_loss")}
    out_path.with_suffix(".json").write_text(json.dumps(config, indent=2) + "\n")
    if log_path is not None:
        shutil.copyfile(log_path, out_path.with_suffix(".jsonl"))
    return out_path


def _pretrained_path(which: str | Path) -> Path:
    if isinstance(which, str) and which in PRETRAINED:
        return PRETRAINED[which]
    return Path(which)


def load_pretrained(which: str | Path = "cpu", device: str | torch.device = "cpu"
                    ) -> tuple[TransformerLM, CharTokenizer]:
    """A committed character-level Shakespeare model: ``(model, tokenizer)``.

    Args:
        which: ``"cpu"`` (the ``cpu`` preset, trained on a 2-core CPU), ``"gpu"`` (the
            ``gpu`` preset, trained on an H100), or the path of a checkpoint or weights file.
        device: where to put the model.

    The model is float32 (the files store float16), in eval mode.
    """
    model, tok, _ = load_model(_pretrained_path(which), device)
    return model, tok


def read_log(which: str | Path = "cpu") -> list[dict]:
    """The records of a JSONL metrics log: ``"cpu"``/``"gpu"`` (a committed model's) or a path.

    The first record (``"event": "start"``) describes the run (device, versions, configs,
    command, seed, peak FLOP/s); then one ``"eval"`` record per evaluation (``step``,
    ``train_loss``, ``val_loss``, ``lr``, ``tokens_per_s``, ``mfu``, ``elapsed_s``, ...);
    ``"resume"`` records where a run was continued; and a final ``"end"`` record
    (``reason``, ``wall_time_s``, ``best_val_loss``).
    """
    path = _pretrained_path(which)
    if isinstance(which, str) and which in PRETRAINED:
        path = path.with_suffix(".jsonl")
    if not path.is_file():
        raise FileNotFoundError(f"metrics log not found: {path}")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------------------- the loop


class TrainingDivergedError(RuntimeError):
    """The loss (or gradient norm) became NaN or infinite; the run was stopped."""


def _distributed() -> tuple[int, int, int]:
    """(rank, local_rank, world_size) from torchrun's environment; (0, 0, 1) otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 0, 1
    return int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0")), world


def _resolve_device(name: str, local_rank: int) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {name!r} requested but CUDA is not available")
        if device.index is None:
            device = torch.device("cuda", local_rank)
    elif device.type != "cpu":
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {name!r}")
    return device


class _Log:
    """Appends JSON records to ``metrics.jsonl`` (rank 0 only)."""

    def __init__(self, path: Path | None):
        self.path = path

    def write(self, record: dict) -> None:
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")


def train(cfg: TrainConfig, out_dir: str | Path, *, resume: bool = False,
          overwrite: bool = False, argv: list[str] | None = None,
          setup_hook: Callable[[TransformerLM], None] | None = None) -> dict:
    """Train a :class:`TransformerLM` on the bundled corpus; write checkpoints and a log.

    Args:
        cfg: the run's settings (see :func:`get_preset`).
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
        TrainingDivergedError: the loss became NaN/inf (the last good checkpoint is kept).
        KeyboardInterrupt: after saving ``last.pt``.
    """
    out_dir = Path(out_dir)
    rank, local_rank, world = _distributed()
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if cfg.device != "cpu" and torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    try:
        return _train(cfg, out_dir, resume, overwrite, argv, setup_hook, rank, local_rank, world)
    finally:
        if world > 1 and dist.is_initialized():
            dist.destroy_process_group()


def _train(cfg, out_dir, resume, overwrite, argv, setup_hook, rank, local_rank, world) -> dict:
    t_start = time.perf_counter()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    device = _resolve_device(cfg.device, local_rank)
    is_cuda = device.type == "cuda"
    if is_cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    last_path, best_path = out_dir / "last.pt", out_dir / "best.pt"
    if not resume and last_path.exists() and not overwrite:
        raise ValueError(
            f"{out_dir} already holds a checkpoint; resume it (--resume) or choose another --out"
        )
    if resume and not last_path.is_file():
        raise FileNotFoundError(f"cannot resume: checkpoint not found: {last_path}")

    tok, train_ids, val_ids = _encoded_corpus()
    if is_cuda:
        train_ids, val_ids = train_ids.to(device), val_ids.to(device)
    torch.manual_seed(cfg.seed)  # same initial weights on every rank
    model = TransformerLM(cfg.model_config(tok.vocab_size))
    precision = resolve_precision(cfg.precision, device, d_model=model.config.d_model)

    def amp():
        return autocast(precision, device)

    if is_cuda and not model.config.fused_attention:
        print("note: fused_attention=False; the fused kernel is faster on CUDA", file=sys.stderr)
    model.to(device)
    if setup_hook is not None:
        setup_hook(model)
    optimizer = configure_optimizer(model, cfg, fused=is_cuda)

    step, best_val, elapsed_before, val_loss = 0, float("inf"), 0.0, None
    if resume:
        ckpt = load_checkpoint(last_path, model, optimizer, map_location=device)
        step = ckpt["step"]
        best_val = ckpt.get("best_val_loss", float("inf"))
        val_loss = ckpt.get("val_loss")
        elapsed_before = ckpt.get("elapsed_s", 0.0)
        if rank == 0:  # RNG states must be CPU ByteTensors, whatever map_location did
            torch.set_rng_state(ckpt["rng"]["torch"].cpu())
            if is_cuda and "cuda" in ckpt["rng"]:
                torch.cuda.set_rng_state_all([s.cpu() for s in ckpt["rng"]["cuda"]])
        else:
            torch.manual_seed(_seed_for(cfg.seed, rank, step))
    elif world > 1:
        torch.manual_seed(_seed_for(cfg.seed, rank))  # different dropout masks per rank

    train_model = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        train_model = DDP(model, device_ids=[device.index] if is_cuda else None)
    if cfg.compile:
        train_model = torch.compile(train_model)

    peak, peak_source = peak_flops(device, cfg.peak_flops) if rank == 0 else (None, "")
    flops_per_token = model.flops_per_token()
    tokens_per_step = cfg.batch_size * model.config.block_size * world

    log = _Log(out_dir / "metrics.jsonl" if rank == 0 else None)
    if rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        if not resume:
            (out_dir / "metrics.jsonl").unlink(missing_ok=True)
        (out_dir / "config.json").write_text(json.dumps(
            {"model_config": model.config.to_dict(), "train_config": cfg.to_dict()}, indent=2))
        log.write({
            "event": "resume" if resume else "start",
            "step": step,
            "device": _device_name(device),
            "device_type": device.type,
            "world_size": world,
            "threads": torch.get_num_threads(),
            "dtype": describe(precision, device),
            "precision": precision,
            "compile": cfg.compile,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "preset": cfg.preset,
            "seed": cfg.seed,
            "command": " ".join(argv if argv is not None else sys.argv),
            "model_config": model.config.to_dict(),
            "train_config": cfg.to_dict(),
            "n_parameters": model.num_parameters(),
            "parameters_by_component": model.num_parameters(by_component=True),
            "flops_per_token": flops_per_token,
            "tokens_per_step": tokens_per_step,
            "peak_flops": peak,
            "peak_flops_source": peak_source,
            "train_tokens": len(train_ids),
            "val_tokens": len(val_ids),
        })

    def save(path: Path) -> None:
        save_checkpoint(path, model, optimizer, step=step, train_config=cfg, tokenizer=tok,
                        best_val_loss=best_val, val_loss=val_loss,
                        elapsed_s=elapsed_before + time.perf_counter() - t_start)

    remeasure_peak = device.type == "cpu" and cfg.peak_flops is None

    def run_eval(tokens_per_s: float | None) -> None:
        nonlocal best_val, val_loss, peak
        if remeasure_peak and tokens_per_s is not None:
            peak = max(peak, measure_matmul_flops(repeats=3))
        train_loss = _estimate_loss(model, train_ids, cfg, _seed_for(cfg.seed, 1), device, amp)
        val_loss = _estimate_loss(model, val_ids, cfg, _seed_for(cfg.seed, 2), device, amp)
        mfu = None
        if tokens_per_s is not None and peak:
            mfu = tokens_per_s * flops_per_token / (peak * world)
        log.write({
            "event": "eval", "step": step, "train_loss": train_loss, "val_loss": val_loss,
            "lr": lr_at(max(step - 1, 0), cfg), "tokens_per_s": tokens_per_s, "mfu": mfu,
            "peak_flops": peak,
            "tokens_seen": step * tokens_per_step,
            "elapsed_s": elapsed_before + time.perf_counter() - t_start,
        })
        save(last_path)
        if val_loss < best_val:
            best_val = val_loss
            tmp = best_path.with_name("best.pt.tmp")
            shutil.copyfile(last_path, tmp)
            os.replace(tmp, best_path)

    losses: list[float] = []
    bar = tqdm(total=cfg.steps, initial=step, disable=not cfg.progress or rank != 0,
               desc=f"train {cfg.preset}", dynamic_ncols=True)
    window_tokens, window_time = 0, 0.0
    reason = "error"
    try:
        if rank == 0 and not resume:
            run_eval(None)  # the loss before any training: about ln(vocab_size)
        train_model.train()
        while step < cfg.steps:
            t0 = time.perf_counter()
            lr = lr_at(step, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            g = torch.Generator().manual_seed(_seed_for(cfg.seed, rank, step))
            x, y = get_batch(train_ids, cfg.batch_size, model.config.block_size, g, device)
            with amp():
                _, loss = train_model(x, y)
            loss.backward()
            if cfg.grad_clip > 0:
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            else:
                grad_norm = torch.zeros(())
            loss_value = loss.item()
            if not (math.isfinite(loss_value) and math.isfinite(float(grad_norm))):
                what = "loss" if not math.isfinite(loss_value) else "gradient norm"
                reason = "diverged"
                raise TrainingDivergedError(
                    f"the {what} became {loss_value if what == 'loss' else float(grad_norm)} at "
                    f"step {step} (lr {lr:.3g}); stopped before applying the update. "
                    f"The last good checkpoint is {last_path} "
                    + (f"(step {_last_step(last_path)})." if last_path.exists() else "(none yet).")
                    + " Lower the learning rate or raise warmup_steps."
                )
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            losses.append(loss_value)
            window_time += time.perf_counter() - t0
            window_tokens += tokens_per_step
            rate = window_tokens / window_time
            bar.update(1)
            bar.set_postfix(loss=f"{loss_value:.3f}", tok_s=f"{rate:,.0f}", refresh=False)
            if step % cfg.eval_interval == 0 or step == cfg.steps:
                if rank == 0:
                    run_eval(rate)
                window_tokens, window_time = 0, 0.0
        reason = "completed"
    except KeyboardInterrupt:
        reason = "interrupted"
        if rank == 0:
            save(last_path)
            print(f"\ninterrupted at step {step}; saved {last_path}", file=sys.stderr)
        raise
    finally:
        bar.close()
        log.write({"event": "end", "step": step, "reason": reason, "val_loss": val_loss,
                   "best_val_loss": best_val if math.isfinite(best_val) else None,
                   "wall_time_s": elapsed_before + time.perf_counter() - t_start})
    return {"step": step, "losses": losses, "val_loss": val_loss, "best_val_loss": best_val,
            "reason": reason, "wall_time_s": elapsed_before + time.perf_counter() - t_start,
            "out_dir": str(out_dir)}


def _last_step(path: Path) -> int | None:
    with contextlib.suppress(Exception):
        return load_checkpoint(path)["step"]
    return None


# ---------------------------------------------------------------------------- command line


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


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
    p.add_argument("--steps", type=_positive_int,
                   help="total optimizer steps (with --resume: a new total; the cosine "
                   "schedule is recomputed for it)")
    p.add_argument("--batch-size", type=_positive_int)
    p.add_argument("--lr", type=_positive_float)
    p.add_argument("--eval-interval", type=_positive_int)
    p.add_argument("--eval-batches", type=_positive_int)
    p.add_argument("--seed", type=int)
    p.add_argument("--positional", choices=POSITIONAL_SCHEMES)
    p.add_argument("--device", help="auto (default), cpu, cuda or cuda:N")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--threads", type=_positive_int,
                   help="torch.set_num_threads (default: one per physical core)")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="auto (default: bf16 where native and it pays), fp32 or bf16")
    p.add_argument("--peak-tflops", type=_positive_float, help="device peak for MFU (TFLOP/s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _main_train(argv: list[str]) -> int:
    parser = _train_parser()
    args = parser.parse_args(argv)
    overrides = dict(
        steps=args.steps, batch_size=args.batch_size, lr=args.lr,
        eval_interval=args.eval_interval, eval_batches=args.eval_batches, seed=args.seed,
        positional=args.positional, device=args.device, precision=args.precision,
        threads=args.threads or (None if args.resume  # else one per core, per process
                                 else max(1, physical_cores() // _distributed()[2])),
        peak_flops=args.peak_tflops * 1e12 if args.peak_tflops else None,
    )
    if args.compile:
        overrides["compile"] = True
    if args.no_progress:
        overrides["progress"] = False
    last = Path(args.out) / "last.pt"
    try:
        if args.resume:
            try:
                ckpt = load_checkpoint(last)
            except (FileNotFoundError, ValueError) as err:
                parser.error(f"cannot resume: {err}")
            stored = TrainConfig.from_dict(ckpt["train_config"])
            if args.preset is not None:
                wanted = get_preset(args.preset, **overrides).model
                if wanted != stored.model:
                    parser.error(
                        f"{last} was trained with a different model config than preset "
                        f"{args.preset!r} ({_config_diff(stored.model, wanted)})"
                    )
            run = {**stored.to_dict(), **{k: v for k, v in overrides.items()
                                          if v is not None and k not in MODEL_KEYS}}
            if any(overrides.get(k) is not None for k in MODEL_KEYS):
                parser.error("model settings (e.g. --positional) cannot change on --resume")
            cfg = TrainConfig.from_dict(run)
        else:
            if args.preset is None:
                parser.error("--preset is required (unless --resume)")
            cfg = get_preset(args.preset, **overrides)
        result = train(cfg, args.out, resume=args.resume, overwrite=args.overwrite,
                       argv=["python", "-m", "mini_transformer.train", *argv])
    except TrainingDivergedError as err:
        raise SystemExit(f"error: {err}") from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    if _distributed()[0] == 0:
        print(f"done: step {result['step']}, val loss {result['val_loss']:.4f}, "
              f"best {result['best_val_loss']:.4f}, {result['wall_time_s']:.0f} s; "
              f"checkpoints in {args.out}")
    return 0


def _main_sample(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m mini_transformer.train sample",
                                description="Generate text from a checkpoint.")
    p.add_argument("--ckpt", default="cpu",
                   help="checkpoint or weights file, or 'cpu' / 'gpu' for a bundled model")
    p.add_argument("--prompt", default="\n", help="text to continue")
    p.add_argument("--tokens", type=_positive_int, default=500, help="characters to generate")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=_positive_int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    try:
        model, tok, _ = load_model(_pretrained_path(args.ckpt), args.device)
        idx = tok.encode(args.prompt)[None, :].to(args.device)
        out = model.generate(idx, args.tokens, temperature=args.temperature, top_k=args.top_k,
                             generator=torch.Generator().manual_seed(args.seed))
    except (FileNotFoundError, ValueError) as err:
        p.error(str(err))
    print(tok.decode(out[0]))
    return 0


def _main_export(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m mini_transformer.train export",
                                description="Write a half-precision weights-only file.")
    p.add_argument("--ckpt", required=True, help="a full checkpoint, e.g. runs/cpu/best.pt")
    p.add_argument("--out", default=str(PRETRAINED_WEIGHTS))
    p.add_argument("--log", help="metrics log to copy beside it (default: the run's)")
    args = p.parse_args(argv)
    log = args.log or Path(args.ckpt).parent / "metrics.jsonl"
    try:
        path = export_weights(args.ckpt, args.out, log if Path(log).is_file() else None)
    except (FileNotFoundError, ValueError) as err:
        p.error(str(err))
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``train`` (default), ``sample`` or ``export``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {"train": _main_train, "sample": _main_sample, "export": _main_export}
    if argv and argv[0] in commands:
        return commands[argv[0]](argv[1:])
    return _main_train(argv)


if __name__ == "__main__":
    sys.exit(main())
