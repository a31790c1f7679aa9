r"""Checkpoints, exported weights, the committed models and their logs (chapter 6).

- **Atomic** (:func:`atomic_write`): a reader, or a run resumed after a crash, sees the old
  file or the new one, never half of one.
- **Safe to load**: plain types only, read with ``torch.load(weights_only=True)``.
- **Corruption detected**: a SHA-256 over everything stored is checked on load (the committed
  models predate it: their whole file is checked against ``PRETRAINED_SHA256``).
- **Sizes checked before allocating**: a stored config must agree with the stored tensors,
  and its tables fit in ``MAX_BUFFER_BYTES``, before a model is built from it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from .checks import check_int, checking
from .data import ASSETS_DIR, CharTokenizer
from .model import MAX_LEN, TransformerConfig, TransformerLM

__all__ = [
    "PRETRAINED", "atomic_write", "save_checkpoint", "load_checkpoint", "load_model",
    "prepare_export", "load_pretrained",
]  # fmt: skip

CHECKPOINT_FORMAT = "mini_transformer.checkpoint"
WEIGHTS_FORMAT = "mini_transformer.weights"
VERSION = 3  # 3: optimizer groups in parameter order; 2: embeddings last; 1: no checksum

#: The committed models. The ``cpu`` preset trained on a 2-core CPU and the ``gpu`` preset
#: on one H100, each with a ``.jsonl`` metrics log and a ``.json`` configuration beside it.
PRETRAINED = {
    "cpu": ASSETS_DIR / "shakespeare_char.pt",
    "gpu": ASSETS_DIR / "shakespeare_char_gpu.pt",
}

#: SHA-256 of the committed files, written before checkpoints carried a checksum (re-exporting
#: them would add their size to the repository's history again).
PRETRAINED_SHA256 = {
    "cpu": "690ecf53bcaade06da2a3cca266ed5782fbd740fc509484fde953beffbaf3563",
    "gpu": "020299bf96ae8dd595555eecdbab296db4f72dca78ebbba112d872638912e071",
}

#: Largest size of the tables (ALiBi, sinusoidal, RoPE) a stored config may imply: 2 GiB.
MAX_BUFFER_BYTES = 2 * 2**30

#: Deepest nesting of lists and dicts a checkpoint may hold (ours: 5, the optimizer state).
MAX_DEPTH = 32

_PACKAGE = Path(__file__).resolve().parent

#: Committed results (the chapters load them): a file here is replaced only with --overwrite.
COMMITTED_DIRS = (_PACKAGE / "results", ASSETS_DIR, _PACKAGE.parent / "benchmarks" / "results")


def check_output_file(
    path: str | Path, *, overwrite: bool = False, name: str = "--out", inputs=()
) -> Path:
    """``path`` as a regular file that can be written (the atomic rename would replace a FIFO
    or a device), never one of ``inputs``; an existing file only with ``overwrite``. ``name``
    names it in messages."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{name} {path} is a folder, not a file")
    if path.exists() and not path.is_file():
        raise ValueError(f"{name} {path} exists and is not a regular file (a FIFO or a device?)")
    if any(path.resolve() == Path(i).resolve() for i in inputs if i is not None):
        raise ValueError(f"{name} {path} is also an input of this command; choose another path")
    if path.exists() and not overwrite:
        folder = next((d for d in COMMITTED_DIRS if path.resolve().parent == d.resolve()), None)
        what = f"is a committed result (in {folder})" if folder else "already exists"
        raise ValueError(f"{name} {path} {what}; choose another path, or pass --overwrite")
    if not path.parent.is_dir():
        raise ValueError(f"{name} {path}: the folder {path.parent} does not exist")
    writable = os.access(path.parent, os.W_OK | os.X_OK)
    if not writable or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"{name} {path} is not writable")
    return path


LOCK = "run.lock"  # a run's folder is locked while it runs (flock: the kernel frees it)
fcntl = None if os.name == "nt" else importlib.import_module("fcntl")  # Windows: no lock


class RunFolderInUse(ValueError):
    """Another live run holds the folder's lock."""


def check_output_dir(path: str | Path, *, resume: bool = False, overwrite: bool) -> Path:
    """``path`` as a run folder that can be written: new, empty, or a run of ours (it holds
    ``last.pt``, or a run's ``config.json``) continued with ``resume`` (``last.pt`` needed) or
    replaced with ``overwrite``. A folder holding anything else is never written into."""
    path = existing = Path(path)
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"out_dir {path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"out_dir {path}: {existing} is not writable")
    last, there = path / "last.pt", sorted(p.name for p in path.glob("*") if p.name != LOCK)
    if resume and not last.is_file():
        raise FileNotFoundError(f"cannot resume: checkpoint not found: {last}")
    ours, shown = last.is_file(), ", ".join(there[:6]) + (", ..." if len(there) > 6 else "")
    with contextlib.suppress(OSError, ValueError, TypeError):  # or a run's config.json
        ours = ours or {"model_config", "train_config"} <= set(
            json.loads((path / "config.json").read_text())
        )
    if there and not (ours and (resume or overwrite)):
        what = "already holds a run" if ours else "holds files of no run (a run needs an empty one)"
        fix = "continue it with --resume or replace its files with --overwrite, or " if ours else ""
        raise ValueError(f"{path} {what}: {shown}; {fix}choose another folder")
    return path


@contextlib.contextmanager
def output_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path/run.lock`` (the file holds this process's PID)
    while the block runs, or raise ``RunFolderInUse``. The kernel releases it however the
    process ends, so the file a killed run leaves behind is stale and taken over."""
    path.mkdir(parents=True, exist_ok=True)
    with (path / LOCK).open("a+") as f:
        try:
            fcntl and fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no fcntl: Windows, no lock
            if os.stat(path / LOCK).st_ino != os.fstat(f.fileno()).st_ino:
                raise BlockingIOError  # its run removed that file just now, while it held it
        except (BlockingIOError, FileNotFoundError):
            f.seek(0)
            raise RunFolderInUse(
                f"{path} is in use by another run (PID {f.read().strip()})"
            ) from None
        f.truncate(0)
        print(os.getpid(), file=f, flush=True)
        try:
            yield
        finally:
            (path / LOCK).unlink(missing_ok=True)


def json_safe(value):
    """``value`` with every NaN or infinite float as ``None``: strict JSON any reader parses."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def atomic_write(path: str | Path, data: bytes | str | Callable) -> Path:
    """Write ``data`` (bytes, UTF-8 text, or a function writing to the open binary file)
    atomically: to a fresh ``path.tmp`` (a symlink there is removed, never written through), then
    ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def checksum(payload: dict) -> str:
    """SHA-256 (hex) of everything in ``payload`` except its ``"checksum"`` entry, fed
    canonically: dict keys sorted, tensors by dtype, shape and bytes."""
    h = hashlib.sha256()

    def feed(value) -> None:
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous().reshape(-1)
            h.update(f"T{t.dtype}{tuple(value.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().data)
        elif isinstance(value, dict):
            h.update(b"{")
            for k in sorted(value, key=repr):
                h.update(repr(k).encode())
                feed(value[k])
            h.update(b"}")
        elif isinstance(value, (list, tuple)):
            h.update(b"[" if isinstance(value, list) else b"(")
            for v in value:
                feed(v)
            h.update(b"]")
        else:  # numbers, strings, booleans, None: repr is exact (float repr round-trips)
            h.update(f"{type(value).__name__}:{value!r};".encode())

    feed({k: v for k, v in payload.items() if k != "checksum"})
    return h.hexdigest()


def _save_verified(payload: dict, path: str | Path) -> Path:
    """``torch.save`` with a version and a checksum, atomically; a full disk is an ``OSError``."""
    payload = {**payload, "version": VERSION}
    payload["checksum"] = checksum(payload)
    try:
        return atomic_write(path, lambda f: torch.save(payload, f))
    except RuntimeError as err:  # PytorchStreamWriter failed writing file ...
        raise OSError(f"could not write {path}: {' '.join(str(err).split())}") from None


def save_checkpoint(
    path: str | Path, model: TransformerLM, optimizer=None, *, step: int = 0, train_config=None,
    tokenizer: CharTokenizer | None = None, **extra,
) -> Path:  # fmt: skip
    """Write a full checkpoint atomically, with a checksum of everything it stores: plain types
    only (``weights_only=True`` reads it), with the RNG states (for an exact resume)."""
    if checking():  # not in the training loop (checks.trusted): it made the arguments
        step = check_int("step", step, low=0)
        if taken := sorted(set(extra) & {"format", "model_config", "rng", "version", "checksum"}):
            raise ValueError(f"save_checkpoint's extra keys {taken} would replace its own entries")
    for k, v in extra.items():  # NumPy/torch scalars as Python numbers: plain types only
        if isinstance(v, (np.generic, torch.Tensor)) and np.ndim(v) == 0:
            extra[k] = v.item()
    if hasattr(train_config, "to_dict"):
        train_config = train_config.to_dict()
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    ckpt = {
        "format": CHECKPOINT_FORMAT, "model_config": model.config.to_dict(),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "step": int(step), "train_config": train_config,
        "tokenizer": tokenizer.to_dict() if tokenizer is not None else None, "rng": rng, **extra,
    }  # fmt: skip
    return _save_verified(ckpt, path)


def config_diff(a: dict, b: dict) -> str:
    """``"key: a vs b, ..."`` for the keys where two config dicts differ."""
    keys = sorted(set(a) | set(b))
    return ", ".join(f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in keys if a.get(k) != b.get(k))


def _check_contents(path: Path, ckpt: dict) -> None:
    """Tensor sizes and nesting depth, checked (iteratively) before anything walks the contents:
    a stride-0 view posing as two billion elements, or nesting past :data:`MAX_DEPTH`.
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
                message = f"{where} is nested deeper than {MAX_DEPTH} levels"
                raise ValueError(f"checkpoint {path} is corrupt: {message}")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend((v, f"{where}[{k!r}]" if where else str(k), depth + 1) for k, v in items)


def _read(path: Path, map_location) -> dict:
    """``torch.load(weights_only=True)``, every failure a clear ``ValueError``."""
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    which = next((w for w, p in PRETRAINED.items() if path.resolve() == p.resolve()), None)
    digest = which and hashlib.sha256(path.read_bytes()).hexdigest()
    if which and digest != PRETRAINED_SHA256[which]:  # before torch.load: the whole file
        raise ValueError(
            f"checkpoint {path} is corrupt: the committed {which!r} model's file "
            f"has SHA-256 {digest[:12]}..., not {PRETRAINED_SHA256[which][:12]}..."
        )
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
    if ckpt.get("version", 1) == 1:  # before checksums: only the committed models, by digest
        digest = digest or hashlib.sha256(path.read_bytes()).hexdigest()
        if digest not in PRETRAINED_SHA256.values():
            raise ValueError(
                f"checkpoint {path} was written before checkpoints carried a checksum and is "
                "not a committed model: a changed bit could not be detected, so it is refused"
            )
    elif ckpt.pop("checksum", None) != checksum(ckpt):  # every file since must carry its own
        raise ValueError(f"checkpoint {path} is corrupt: its contents do not match the checksum")
    step, best = ckpt.get("step", 0), ckpt.get("best_val_loss")
    if type(step) is not int or step < 0:
        raise ValueError(f"checkpoint {path} holds step={step!r}, not an integer >= 0")
    if best is not None and (type(best) not in (int, float) or not best >= 0):  # NaN, -inf
        raise ValueError(f"checkpoint {path} holds best_val_loss={best!r}, not a loss (>= 0, inf)")
    train, model = ckpt.get("train_config"), ckpt.get("model_config")
    # the committed models' train_config["model"] has no vocab_size: their model_config has it
    if isinstance(train, dict) and isinstance(train.get("model"), dict) and model:
        train["model"].setdefault("vocab_size", model["vocab_size"])
    return ckpt


def load_checkpoint(
    path: str | Path, model: TransformerLM | None = None, optimizer=None,
    map_location: str | torch.device = "cpu",
) -> dict:  # fmt: skip
    """A checkpoint or weights file, verified, as a dict; with ``model`` (and ``optimizer``) the
    stored state is loaded into it, once the stored config equals the model's."""
    path = Path(path)
    ckpt = _read(path, map_location)
    if model is not None:
        if (stored := ckpt["model_config"]) != model.config.to_dict():
            raise ValueError(
                f"checkpoint {path} was saved from a different model config "
                f"(checkpoint vs model: {config_diff(stored, model.config.to_dict())})"
            )
        model.load_state_dict(ckpt["model"])
    if optimizer is not None:
        if ckpt.get("optimizer") is None:
            raise ValueError(f"checkpoint {path} holds no optimizer state (a weights-only file?)")
        if ckpt.get("version", 1) < 3:  # AdamW's state in another order; the weights load
            raise ValueError(f"checkpoint {path} is of an older version: it cannot be resumed")
        optimizer.load_state_dict(ckpt["optimizer"])
    return ckpt


def _table_bytes(c: TransformerConfig) -> int:
    """Bytes of the position tables (buffers, not parameters) a model of config ``c`` keeps."""
    if c.positional == "sinusoidal":
        return 4 * max(MAX_LEN, c.block_size) * c.d_model  # float32 (T, d_model)
    if c.positional == "rope":  # cos, sin: float32 (T, d_head / 2); omega: float64 (d_head / 2)
        return 4 * c.block_size * c.d_head + 4 * c.d_head
    return 4 * c.n_heads * c.block_size**2 if c.positional == "alibi" else 0  # float32 (h, T, T)


def _check_declared_config(path: Path, ckpt: dict) -> TransformerConfig:
    """The stored config, once it agrees with the stored tensors and fits in memory."""
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
    if config.positional == "learned":
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
    need = _table_bytes(config)
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
    """The model in a checkpoint or weights file (``"cpu"``, ``"gpu"``: the committed ones) as
    ``(model, tokenizer, ckpt)``, eval mode; its config is checked against its tensors first."""
    path = Path(PRETRAINED.get(path, path))
    ckpt = _read(path, "cpu")
    model = TransformerLM(_check_declared_config(path, ckpt))
    model.load_state_dict(ckpt["model"])
    stored = ckpt.get("tokenizer")
    tok = CharTokenizer.from_dict(stored) if stored else CharTokenizer.from_corpus()
    if tok.vocab_size != model.config.vocab_size:
        raise ValueError(
            f"checkpoint {path} has a tokenizer of {tok.vocab_size} characters for a model "
            f"of vocab_size={model.config.vocab_size}: they do not belong together"
        )
    return model.to(device).eval(), tok, ckpt


def prepare_export(
    ckpt_path: str | Path, out_path: str | Path = PRETRAINED["cpu"],
    log_path: str | Path | None = None, *, overwrite: bool = False,
) -> Callable[[], Path]:  # fmt: skip
    """A half-precision, weights-only copy of a checkpoint (for committing), its configuration
    (``.json``) and ``log_path`` (``.jsonl``) beside it, tied tensors tied: checked and built in
    memory now, written by the function returned: ``prepare_export(ckpt_path, out_path)()``."""
    out_path = Path(out_path)
    if out_path.suffix != ".pt":
        raise ValueError(
            f"out_path must end in '.pt' (a .json and .jsonl go beside it), got {str(out_path)!r}"
        )
    for suffix in (".pt", ".json", ".jsonl"):
        out = out_path.with_suffix(suffix)
        check_output_file(out, overwrite=overwrite, name="out_path", inputs=(ckpt_path, log_path))
    ckpt = load_checkpoint(ckpt_path)
    if ckpt["format"] != CHECKPOINT_FORMAT:
        raise ValueError(f"{ckpt_path} is already a weights file")
    if log_path is not None and not Path(log_path).is_file():
        raise FileNotFoundError(f"log_path {log_path}: no such file")
    half: dict[int, torch.Tensor] = {}  # data_ptr -> fp16 copy, so tied weights stay tied
    state = {
        k: half.setdefault(v.data_ptr(), v.to(torch.float16)) if v.is_floating_point() else v
        for k, v in ckpt["model"].items()
    }
    keep = ("model_config", "tokenizer", "step", "train_config", "val_loss", "best_val_loss")
    weights = {"format": WEIGHTS_FORMAT, "model": state, **{k: ckpt.get(k) for k in keep}}
    config = {k: ckpt.get(k) for k in ("model_config", "train_config", "step", "val_loss")}
    texts = {out_path.with_suffix(".json"): json.dumps(json_safe(config), indent=2) + "\n"}
    if log_path is not None:  # a metrics log: UTF-8 JSON lines, not a binary or another file
        try:
            text = texts[out_path.with_suffix(".jsonl")] = Path(log_path).read_text("utf-8")
            [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as err:  # UnicodeDecodeError, JSONDecodeError
            raise ValueError(f"log_path {log_path} is not a metrics log: {err}") from None

    def write() -> Path:  # atomic_write renames at once, so the texts are staged as .new files
        staged: dict[Path, Path] = {}
        try:
            for path, text in texts.items():
                staged[path] = atomic_write(path.with_name(path.name + ".new"), text)
            _save_verified(weights, out_path)
            for path, new in staged.items():
                os.replace(new, path)
        finally:
            for new in staged.values():
                new.unlink(missing_ok=True)
        return out_path

    return write


def load_pretrained(
    which: str | Path = "cpu", device: str | torch.device = "cpu"
) -> tuple[TransformerLM, CharTokenizer]:
    """A committed model, ``"cpu"`` or ``"gpu"``, or a file: ``(model, tokenizer)``, eval mode."""
    return load_model(which, device)[:2]


def write_record(path: Path | None, record: dict) -> None:
    """Append ``record`` to a JSONL log as one line of strict JSON (NaN as ``null``); nothing
    for ``path=None`` (ranks other than 0). A failed write (disk full) is cut back."""
    if path is None:
        return
    line = (json.dumps(json_safe(record), allow_nan=False) + "\n").encode()
    with path.open("ab", buffering=0) as f:
        start = f.seek(0, os.SEEK_END)
        try:
            view = memoryview(line)
            while view:
                view = view[f.write(view) :]
        except BaseException:
            os.ftruncate(f.fileno(), start)
            raise
