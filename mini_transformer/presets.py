r"""The training run's settings: presets, :class:`TrainConfig`, schedule and optimizer groups.

What a run *is*, apart from how it is run (:mod:`mini_transformer.train`, which
re-exports every public name here). The presets:

- ``tiny``: seconds on one CPU core, for tests and for watching the loop in chapter 6;
- ``cpu``: the committed model trained on a 2-core CPU;
- ``gpu``: nanoGPT's shakespeare-char configuration (~10.7M parameters), for one GPU.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields

import torch

from .checks import check_bool, check_choice, check_float, check_int
from .core import Schedule
from .model import TransformerConfig, TransformerLM
from .precision import PRECISIONS

__all__ = [
    "PRESETS",
    "MODEL_KEYS",
    "COMPILE_MODES",
    "TrainConfig",
    "get_preset",
    "lr_at",
    "configure_optimizer",
]

#: ``torch.compile`` modes (``"reduce-overhead"`` and ``"max-autotune"`` use CUDA graphs).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

#: Model hyper-parameters of each preset (``vocab_size`` comes from the tokenizer) and the
#: training settings that differ from :class:`TrainConfig`'s defaults.
PRESETS: dict[str, dict] = {
    # Seconds on one CPU core: for tests and for watching the loop in chapter 6.
    "tiny": dict(
        model=dict(block_size=32, d_model=32, n_heads=2, n_layers=2, dropout=0.0),
        batch_size=8,
        steps=60,
        lr=1e-2,
        min_lr=1e-3,
        warmup_steps=5,
        eval_interval=20,
        eval_batches=2,
    ),
    # About a minute on a quiet 2-core CPU (2 threads, bf16 where native): the committed
    # model when no GPU is at hand. 1360 steps x 2048 tokens = 2.8M tokens, 0.6 epoch.
    # Two layers: at an equal compute budget (7.9 TFLOP) a shallower model seeing more
    # text reached a lower held-out loss (benchmarks/results/cpu_recipe_sweep.json:
    # 2 layers x 1360 steps 1.72, 3 x 910 1.77, 4 x 690 1.82), and on 2 threads a step's
    # time was proportional to its FLOPs (benchmarks/results/cpu_step_ab_2threads.json).
    "cpu": dict(
        model=dict(block_size=128, d_model=128, n_heads=4, n_layers=2, dropout=0.0),
        batch_size=16,
        steps=1360,
        lr=3e-3,
        min_lr=3e-4,
        warmup_steps=50,
        eval_interval=170,
        eval_batches=8,
    ),
    # nanoGPT's shakespeare-char configuration (~10.7M parameters); minutes on one GPU.
    "gpu": dict(
        model=dict(block_size=256, d_model=384, n_heads=6, n_layers=6, dropout=0.2),
        batch_size=64,
        steps=5000,
        lr=1e-3,
        min_lr=1e-4,
        warmup_steps=100,
        eval_interval=250,
        eval_batches=100,
        beta2=0.99,
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
        compile_mode: the ``torch.compile`` mode, one of ``COMPILE_MODES``.
        progress: show a tqdm progress bar.
        peak_flops: the device's peak FLOP/s for MFU; ``None``: the GPU table, or a quick
            matmul benchmark on the CPU.
        threads: ``torch.set_num_threads`` (``None``: leave it; the command line passes
            one thread per physical core).
        precision: ``"auto"`` (bf16 autocast where the device multiplies bf16 natively and
            the model is wide enough for it to pay, see ``mini_transformer.precision``),
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
    compile_mode: str = "default"
    progress: bool = True
    peak_flops: float | None = None
    threads: int | None = None
    precision: str = "auto"

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:  # the cpu branch's message (its tests match it)
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if not isinstance(self.model, dict):
            raise TypeError(f"model must be a dict of model settings, got {self.model!r:.80}")
        unknown = sorted(set(self.model) - set(MODEL_KEYS))
        if unknown:
            raise ValueError(f"unknown model settings {unknown}; known: {list(MODEL_KEYS)}")
        try:  # the values too, here where they enter (vocab_size comes later, any will do;
            # block_size, the one field without a default, may also come later)
            TransformerConfig(vocab_size=2, **({"block_size": 8} | self.model))
        except (TypeError, ValueError) as err:
            raise type(err)(f"model: {err}") from None
        for name in ("batch_size", "steps", "eval_interval", "eval_batches"):
            check_int(name, getattr(self, name), low=1)
        for name in ("warmup_steps", "seed"):
            check_int(name, getattr(self, name), low=0)
        for name in ("lr", "min_lr", "weight_decay", "grad_clip"):
            check_float(name, getattr(self, name), low=0)
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr must be <= lr, got min_lr={self.min_lr}, lr={self.lr}")
        for name in ("beta1", "beta2"):
            check_float(name, getattr(self, name), low=0, high=1, high_open=True)
        if self.peak_flops is not None:
            check_float("peak_flops", self.peak_flops, low=0, low_open=True)
        check_choice("compile_mode", self.compile_mode, COMPILE_MODES)
        for name in ("compile", "progress"):
            check_bool(name, getattr(self, name))
        device = self.device if isinstance(self.device, str) else ""
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
            raise ValueError(
                f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {self.device!r}"
            )
        if self.threads is not None:
            check_int("threads", self.threads, low=1, why=" or None")

    def model_config(self, vocab_size: int) -> TransformerConfig:
        """The :class:`~mini_transformer.model.TransformerConfig` of this run."""
        return TransformerConfig(vocab_size=vocab_size, **self.model)

    def schedule(self) -> Schedule:
        """The run's learning-rate :class:`~mini_transformer.core.Schedule`."""
        return Schedule(
            lr=self.lr, warmup_steps=self.warmup_steps, steps=self.steps, min_lr=self.min_lr
        )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """Inverse of ``to_dict``; an unknown key is a ``ValueError`` (never dropped)."""
        if not isinstance(d, dict):
            raise TypeError(f"a TrainConfig description must be a dict, got {type(d).__name__}")
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(d) - set(known), key=str)
        if unknown:
            raise ValueError(f"unknown train_config keys {unknown}; known: {known}")
        return cls(**d)


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
    r"""Learning rate of update ``step`` (0-based) of a run: :meth:`TrainConfig.schedule`.

    .. math::

        \eta(s) = \begin{cases} \eta_\max \frac{s + 1}{w} & s < w \\
        \eta_\min + \tfrac12 (\eta_\max - \eta_\min)(1 + \cos \pi p),\;
        p = \frac{s - w}{S - w} & s \ge w \end{cases}

    with ``w = warmup_steps`` and ``S = steps`` (``p`` capped at 1).
    """
    return cfg.schedule()(step)


def configure_optimizer(model: TransformerLM, cfg: TrainConfig, fused: bool = False):
    """AdamW with weight decay only on the weight matrices of linear layers.

    Biases, LayerNorm gains and the embeddings (token and position; the tied LM head is
    the token embedding) are not decayed.
    """
    no_decay = {
        id(p)
        for m in model.modules()
        if isinstance(m, torch.nn.Embedding)
        for p in m.parameters(recurse=False)
    }
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
