r"""Checkpoints, exported weights, the committed models and their metrics logs.

Persistence, apart from the training loop (:mod:`mini_transformer.train` re-exports every
public name here, so ``from mini_transformer.train import load_checkpoint`` keeps working).
The rules a checkpoint file follows, and why:

- **Atomic**: written to ``<name>.tmp`` and renamed with ``os.replace``, so a reader (or a
  resumed run after a crash) sees the old file or the new one, never half of one. A failed
  write removes its temporary file.
- **Safe to load**: only tensors, numbers, strings, lists and dicts, read with
  ``torch.load(weights_only=True)``: a checkpoint cannot carry code.
- **Corruption detected**: a SHA-256 over everything stored (every tensor's dtype, shape
  and bytes, every other value) is written beside it and checked on load; a flipped bit
  gives a ``ValueError``, never silently different weights. Files written before the
  checksum existed (``version`` 1) still load: the committed models are checked against
  the SHA-256 of their file (:data:`PRETRAINED_SHA256`), an old run's files are not.
- **Sizes checked before allocating**: a model is built from a stored config only after
  the config agrees with the shapes of the stored tensors and its buffers fit in
  :data:`MAX_BUFFER_BYTES`, so a file declaring a huge config is refused with a message
  instead of a ``MemoryError``.

In Python (chapter 6)::

    from mini_transformer.train import load_pretrained, read_log
    model, tok = load_pretrained("gpu")  # a committed model ("cpu" or "gpu"), eval mode
    log = read_log("gpu")                # its metrics log: a list of dicts
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import torch

from .checks import check_int
from .cli import _committed, json_safe, open_temporary
from .data import ASSETS_DIR, CharTokenizer
from .model import SCHEMES, TransformerConfig, TransformerLM

__all__ = [
    "CHECKPOINT_FORMAT",
    "WEIGHTS_FORMAT",
    "PRETRAINED",
    "PRETRAINED_WEIGHTS",
    "PRETRAINED_SHA256",
    "MAX_BUFFER_BYTES",
    "checksum",
    "atomic_write",
    "save_checkpoint",
    "load_checkpoint",
    "load_model",
    "export_weights",
    "check_exportable",
    "load_pretrained",
    "read_log",
    "MetricsLog",
]

CHECKPOINT_FORMAT = "mini_transformer.checkpoint"
WEIGHTS_FORMAT = "mini_transformer.weights"
VERSION = 2  # 2: with a checksum; 1: without (still readable)

#: The committed models (written by ``python -m mini_transformer.train export``): the
#: ``cpu`` preset trained on a 2-core CPU and the ``gpu`` preset trained on one H100.
#: Each ``.pt`` has a ``.jsonl`` metrics log and a ``.json`` configuration beside it.
PRETRAINED = {
    "cpu": ASSETS_DIR / "shakespeare_char.pt",
    "gpu": ASSETS_DIR / "shakespeare_char_gpu.pt",
}
PRETRAINED_WEIGHTS = PRETRAINED["cpu"]

#: SHA-256 of the committed weights files. They were written before checkpoints carried a
#: checksum (``version`` 1), so their whole file is checked against these digests instead
#: (re-exporting them would add their size to the repository's history again).
PRETRAINED_SHA256 = {
    "cpu": "bcc3de75e0761840a58a1784683300a292a20aed88436a993f1b8d50e3d02e2c",
    "gpu": "020299bf96ae8dd595555eecdbab296db4f72dca78ebbba112d872638912e071",
}

#: Largest total size of the non-parameter tensors (ALiBi table, sinusoidal table, RoPE
#: cache) a stored config may imply before :func:`load_model` builds it: 2 GiB.
MAX_BUFFER_BYTES = 2 * 2**30

#: Deepest nesting of lists and dicts a checkpoint may hold (ours: 5, the optimizer state).
MAX_DEPTH = 32


# ---------------------------------------------------------------------------- checksum


def _feed(h, value) -> None:
    """Hash ``value`` canonically: dict keys sorted, tensors by dtype, shape and bytes."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous().reshape(-1)
        h.update(f"T{t.dtype}{tuple(value.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().data)
    elif isinstance(value, dict):
        h.update(b"{")
        for k in sorted(value, key=repr):
            h.update(repr(k).encode())
            _feed(h, value[k])
        h.update(b"}")
    elif isinstance(value, (list, tuple)):
        h.update(b"[" if isinstance(value, list) else b"(")
        for v in value:
            _feed(h, v)
        h.update(b"]")
    else:  # numbers, strings, booleans, None: repr is exact (float repr round-trips)
        h.update(f"{type(value).__name__}:{value!r};".encode())


def checksum(payload: dict) -> str:
    """SHA-256 of everything in ``payload`` except its ``"checksum"`` entry (hex digest)."""
    h = hashlib.sha256()
    _feed(h, {k: v for k, v in payload.items() if k != "checksum"})
    return h.hexdigest()


def _plain(value):
    """Python numbers for NumPy/torch scalars, so the stored file holds only plain types."""
    if isinstance(value, (np.generic, torch.Tensor)) and np.ndim(value) == 0:
        return value.item()
    return value


def atomic_write(obj: dict, path: str | Path) -> Path:
    """``torch.save(obj)`` to ``path`` atomically: ``path.tmp``, then ``os.replace``.

    The temporary file is created afresh (a symlink named ``path.tmp`` is removed, never
    written through). On any failure (disk full, interrupted write) the temporary file is
    removed and the previous ``path`` is left untouched; a failed write is an ``OSError``
    (torch reports a full disk as a ``RuntimeError``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp, f = open_temporary(path, "wb")
        with f:
            try:
                torch.save(obj, f)
            except RuntimeError as err:  # PytorchStreamWriter failed writing file ...
                raise OSError(f"could not write {path}: {' '.join(str(err).split())}") from None
        os.replace(tmp, path)  # a reader sees the old file or the new one, never half of one
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _with_checksum(payload: dict) -> dict:
    payload = {**payload, "version": VERSION}
    payload["checksum"] = checksum(payload)
    return payload


# ---------------------------------------------------------------------------- checkpoints


def save_checkpoint(
    path: str | Path,
    model: TransformerLM,
    optimizer=None,
    *,
    step: int = 0,
    train_config=None,
    tokenizer: CharTokenizer | None = None,
    **extra,
) -> Path:
    """Write a full checkpoint atomically, with a checksum of everything it stores.

    Contents (plain types only, so it loads with ``torch.load(weights_only=True)``):
    ``format``, ``version``, ``model_config`` (a dict), ``model`` (state dict),
    ``optimizer`` (state dict or None), ``step``, ``train_config``, ``tokenizer``, ``rng``
    (CPU and CUDA generator states, for an exact resume), any ``extra`` items (e.g.
    ``best_val_loss``; NumPy or 0-d torch numbers are stored as Python numbers) and
    ``checksum``.
    """
    step = check_int("step", step, low=0)
    if hasattr(train_config, "to_dict"):
        train_config = train_config.to_dict()
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    ckpt = {
        "format": CHECKPOINT_FORMAT,
        "model_config": model.config.to_dict(),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "step": int(step),
        "train_config": train_config,
        "tokenizer": tokenizer.to_dict() if tokenizer is not None else None,
        "rng": rng,
        **{k: _plain(v) for k, v in extra.items()},
    }
    return atomic_write(_with_checksum(ckpt), path)


def config_diff(a: dict, b: dict) -> str:
    """``"key: a vs b, ..."`` for the keys where two config dicts differ."""
    keys = sorted(set(a) | set(b))
    return ", ".join(f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in keys if a.get(k) != b.get(k))


def _check_committed_file(path: Path) -> None:
    """A committed model's file must have its recorded SHA-256 (:data:`PRETRAINED_SHA256`)."""
    for which, committed in PRETRAINED.items():
        if path.resolve() == committed.resolve():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest != PRETRAINED_SHA256[which]:
                raise ValueError(
                    f"checkpoint {path} is corrupt: the committed {which!r} model's file "
                    f"has SHA-256 {digest[:12]}..., not {PRETRAINED_SHA256[which][:12]}..."
                )


def _check_contents(path: Path, ckpt: dict) -> None:
    """Before anything walks or copies what was loaded: nesting depth and tensor sizes.

    Every tensor must fit in the bytes stored for it (a stride-0 view of 4 bytes posing as
    two billion elements would otherwise be expanded by the checksum), and lists/dicts may
    nest at most :data:`MAX_DEPTH` deep (deeper would end in a ``RecursionError``). Iterative,
    so that the check itself cannot recurse too deep.
    """
    stack = [(ckpt, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, torch.Tensor):
            size = value.element_size()
            needed = value.numel() * size
            stored = value.untyped_storage().nbytes() - value.storage_offset() * size
            if needed > stored:
                raise ValueError(
                    f"checkpoint {path} is corrupt: {where or 'a tensor'} claims "
                    f"{value.numel()} elements ({needed} bytes) but stores {stored} bytes"
                )
        elif isinstance(value, (dict, list, tuple)):
            if depth >= MAX_DEPTH:
                raise ValueError(
                    f"checkpoint {path} is corrupt: {where} is nested deeper than "
                    f"{MAX_DEPTH} levels"
                )
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend((v, f"{where}[{k!r}]" if where else str(k), depth + 1) for k, v in items)


def _read(path: Path, map_location) -> dict:
    """``torch.load(weights_only=True)`` with every failure turned into a clear ValueError."""
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    _check_committed_file(path)
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # truncated zip, random bytes, a pickle with code in it ...
        raise ValueError(
            f"could not read checkpoint {path}: the file is corrupt or not a torch checkpoint "
            f"({type(err).__name__}: {str(err)[:200]})"
        ) from None
    if not isinstance(ckpt, dict) or ckpt.get("format") not in (CHECKPOINT_FORMAT, WEIGHTS_FORMAT):
        raise ValueError(f"{path} is not a mini_transformer checkpoint (no 'format' marker)")
    _check_contents(path, ckpt)
    version = ckpt.get("version", 1)
    if version == 1:  # before checksums: only the committed models, known by their digest
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest not in PRETRAINED_SHA256.values():
            raise ValueError(
                f"checkpoint {path} was written before checkpoints carried a checksum "
                "(version 1) and is not one of the committed models, so a changed bit "
                "could not be detected; refusing to load it unverified"
            )
    else:  # every file since the checksum existed must carry a matching one
        stored = ckpt.pop("checksum", None)
        if stored is None or stored != checksum(ckpt):
            raise ValueError(
                f"checkpoint {path} is corrupt: its contents do not match the checksum stored "
                "with them (a changed bit, or a file edited after it was written)"
            )
    return ckpt


def load_checkpoint(
    path: str | Path,
    model: TransformerLM | None = None,
    optimizer=None,
    map_location: str | torch.device = "cpu",
) -> dict:
    """Read a checkpoint (or an exported weights file) and verify its checksum.

    If ``model`` is given, its config must equal the stored one and the weights are loaded
    into it; likewise ``optimizer``. Returns the checkpoint dict (without ``checksum``).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is corrupt (unreadable, or its checksum does not match) or
            not a mini_transformer checkpoint, or its model config differs from
            ``model``'s (the message lists the differing fields).
    """
    path = Path(path)
    ckpt = _read(path, map_location)
    if model is not None:
        stored = ckpt["model_config"]
        if stored != model.config.to_dict():
            raise ValueError(
                f"checkpoint {path} was saved from a different model config "
                f"(checkpoint vs model: {config_diff(stored, model.config.to_dict())})"
            )
        model.load_state_dict(ckpt["model"])
    if optimizer is not None:
        if ckpt.get("optimizer") is None:
            raise ValueError(f"checkpoint {path} holds no optimizer state (a weights-only file?)")
        optimizer.load_state_dict(ckpt["optimizer"])
    return ckpt


def _buffer_bytes(c: TransformerConfig) -> int:
    """Bytes of the tables a ``TransformerLM`` of config ``c`` builds besides its parameters."""
    return 4 * SCHEMES[c.positional].table_floats(c)  # float32 entries


def _check_declared_config(path: Path, ckpt: dict) -> TransformerConfig:
    """The stored config, after checking it agrees with the stored tensors and fits in memory."""
    try:
        config = TransformerConfig.from_dict(ckpt["model_config"])
    except (TypeError, ValueError, KeyError) as err:
        raise ValueError(f"checkpoint {path} holds an invalid model config: {err}") from None
    state = ckpt.get("model")
    expected = {
        "tok_emb.weight": (config.vocab_size, config.d_model),
        "blocks.0.ffn.linear1.weight": (config.d_ff, config.d_model),
        f"blocks.{config.n_layers - 1}.ln1.weight": (config.d_model,),
    }
    if SCHEMES[config.positional].learned_table:
        expected["pos_emb.weight"] = (config.block_size, config.d_model)
    for key, shape in expected.items():
        t = state.get(key) if isinstance(state, dict) else None
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else "missing"
            raise ValueError(
                f"checkpoint {path} declares a model config its weights do not match: "
                f"{key} should have shape {shape}, the file has {got}"
            )
    if f"blocks.{config.n_layers}.ln1.weight" in state:
        raise ValueError(f"checkpoint {path} holds more blocks than n_layers={config.n_layers}")
    need = _buffer_bytes(config)
    if need > MAX_BUFFER_BYTES:
        raise ValueError(
            f"checkpoint {path} declares block_size={config.block_size} with "
            f"positional={config.positional!r}, which needs {need / 2**30:.1f} GiB of tables "
            f"(limit {MAX_BUFFER_BYTES / 2**30:.0f} GiB); refusing to build it"
        )
    return config


def load_model(
    path: str | Path, device: str | torch.device = "cpu"
) -> tuple[TransformerLM, CharTokenizer, dict]:
    """Build the model stored in a checkpoint or weights file: ``(model, tokenizer, ckpt)``.

    The file is read once; the stored config is checked against the stored tensors (and
    for size) before the model is allocated. The model is float32 (half-precision weights
    are cast), on ``device``, in eval mode.
    """
    path = Path(path)
    ckpt = _read(path, "cpu")
    model = TransformerLM(_check_declared_config(path, ckpt))
    model.load_state_dict(ckpt["model"])
    tok = (
        CharTokenizer.from_dict(ckpt["tokenizer"])
        if ckpt.get("tokenizer")
        else CharTokenizer.from_corpus()
    )
    if tok.vocab_size != model.config.vocab_size:
        raise ValueError(
            f"checkpoint {path} has a tokenizer of {tok.vocab_size} characters for a model "
            f"of vocab_size={model.config.vocab_size}: they do not belong together"
        )
    return model.to(device).eval(), tok, ckpt


def check_exportable(ckpt_path: str | Path, out_path: str | Path, overwrite: bool = False):
    """What :func:`export_weights` refuses, checked before it writes anything.

    ``out_path`` must end in ``.pt`` (a ``.json`` and ``.jsonl`` go beside it), none of the
    three may replace a committed model's file unless ``overwrite``, and ``ckpt_path``
    must be a full checkpoint (not already a weights file). Returns the checkpoint.
    """
    out_path = Path(out_path)
    if out_path.suffix != ".pt":
        raise ValueError(
            f"out_path must end in '.pt' (a .json and .jsonl go beside it), got {str(out_path)!r}"
        )
    for p in (out_path, out_path.with_suffix(".json"), out_path.with_suffix(".jsonl")):
        committed = _committed(p)
        if committed is not None and not overwrite:
            raise ValueError(
                f"out_path {p} is a committed model's file (in {committed}); choose another "
                "path, or pass overwrite=True (--overwrite) to replace it"
            )
    ckpt = load_checkpoint(ckpt_path)
    if ckpt["format"] != CHECKPOINT_FORMAT:
        raise ValueError(f"{ckpt_path} is already a weights file")
    return ckpt


def _write_text_temporary(path: Path, text: str) -> Path:
    tmp, f = open_temporary(path)
    with f:
        f.write(text)
    return tmp


def export_weights(
    ckpt_path: str | Path,
    out_path: str | Path = PRETRAINED_WEIGHTS,
    log_path: str | Path | None = None,
    *,
    overwrite: bool = False,
) -> Path:
    """Write a small half-precision, weights-only copy of a checkpoint (for committing).

    Keeps the model config, tokenizer, step and losses; drops the optimizer and RNG.
    Tied tensors are stored once. Beside ``out_path`` it writes the configuration
    (``.json``) and, if ``log_path`` is given, a copy of the metrics log (``.jsonl``);
    ``out_path`` itself must end in ``.pt`` so that neither overwrites the weights.
    The committed model's files (the default ``out_path``) are replaced only with
    ``overwrite=True``. All files are written to temporaries first and renamed only once
    every one is complete: a failure leaves none of them behind.
    """
    out_path = Path(out_path)
    ckpt = check_exportable(ckpt_path, out_path, overwrite)
    if log_path is not None and not Path(log_path).is_file():
        raise FileNotFoundError(f"log_path {log_path}: no such file")
    half: dict[int, torch.Tensor] = {}  # data_ptr -> fp16 copy, so tied weights stay tied
    state = {}
    for k, v in ckpt["model"].items():
        if v.is_floating_point():
            state[k] = half.setdefault(v.data_ptr(), v.to(torch.float16))
        else:
            state[k] = v
    keep = ("model_config", "tokenizer", "step", "train_config")
    weights = {
        "format": WEIGHTS_FORMAT,
        "model": state,
        **{k: ckpt[k] for k in keep},
        "val_loss": ckpt.get("val_loss"),
        "best_val_loss": ckpt.get("best_val_loss"),
    }
    config = {
        "model_config": ckpt["model_config"],
        "train_config": ckpt["train_config"],
        "step": ckpt["step"],
        "val_loss": ckpt.get("val_loss"),
    }
    texts = {out_path.with_suffix(".json"): json.dumps(json_safe(config), indent=2) + "\n"}
    if log_path is not None:
        texts[out_path.with_suffix(".jsonl")] = Path(log_path).read_text()
    temporaries: dict[Path, Path] = {}
    try:
        for path, text in texts.items():
            temporaries[path] = _write_text_temporary(path, text)
        atomic_write(_with_checksum(weights), out_path)
        for path, tmp in temporaries.items():
            os.replace(tmp, path)
    finally:
        for tmp in temporaries.values():
            tmp.unlink(missing_ok=True)
    return out_path


def pretrained_path(which: str | Path) -> Path:
    """The file of a committed model (``"cpu"``, ``"gpu"``), or ``which`` as a path."""
    if isinstance(which, str) and which in PRETRAINED:
        return PRETRAINED[which]
    return Path(which)


def load_pretrained(
    which: str | Path = "cpu", device: str | torch.device = "cpu"
) -> tuple[TransformerLM, CharTokenizer]:
    """A committed character-level Shakespeare model: ``(model, tokenizer)``.

    Args:
        which: ``"cpu"`` (the ``cpu`` preset, trained on a 2-core CPU), ``"gpu"`` (the
            ``gpu`` preset, trained on an H100), or the path of a checkpoint or weights file.
        device: where to put the model.

    The model is float32 (the files store float16), in eval mode.
    """
    model, tok, _ = load_model(pretrained_path(which), device)
    return model, tok


class MetricsLog:
    """Appends JSON records to a ``metrics.jsonl`` file (``path=None``: writes nothing,
    as on the ranks other than 0 of a data-parallel run). :func:`read_log` reads it."""

    def __init__(self, path: Path | None):
        self.path = path

    def write(self, record: dict) -> None:
        """Append ``record`` as one line (NaN and infinities as ``null``, strict JSON).

        The line is written in one call; if that fails (disk full), the file is cut back
        to its previous length, so a reader never meets half a line.
        """
        if self.path is None:
            return
        line = (json.dumps(json_safe(record), allow_nan=False) + "\n").encode()
        with self.path.open("ab", buffering=0) as f:
            start = f.seek(0, os.SEEK_END)
            try:
                view = memoryview(line)
                while view:
                    view = view[f.write(view) :]
            except BaseException:
                os.ftruncate(f.fileno(), start)
                raise


def read_log(which: str | Path = "cpu") -> list[dict]:
    """The records of a JSONL metrics log: ``"cpu"``/``"gpu"`` (a committed model's) or a path.

    The first record (``"event": "start"``) describes the run (device, versions, configs,
    command, seed, peak FLOP/s); then one ``"eval"`` record per evaluation (``step``,
    ``train_loss``, ``val_loss``, ``lr``, ``tokens_per_s``, ``mfu``, ``elapsed_s``, ...);
    ``"resume"`` records where a run was continued; and a final ``"end"`` record
    (``reason``, ``wall_time_s``, ``best_val_loss``).
    """
    path = pretrained_path(which)
    if isinstance(which, str) and which in PRETRAINED:
        path = path.with_suffix(".jsonl")
    if not path.is_file():
        raise FileNotFoundError(f"metrics log not found: {path}")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def is_finite_state(model: torch.nn.Module) -> bool:
    """Whether every parameter and buffer of ``model`` is finite (one host sync)."""
    flags = [torch.isfinite(t).all() for t in model.state_dict().values() if t.is_floating_point()]
    return bool(torch.stack(flags).all()) if flags else True
