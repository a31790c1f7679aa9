"""Data: the bundled Shakespeare corpus, a character tokenizer, and random batches.

(The synthetic tasks of chapter 3 are in :mod:`mini_transformer.tasks`, importable from here.)

The corpus ships with the package (``assets/shakespeare.tar.gz``, 42 works from Project
Gutenberg as packaged by the Open Knowledge Foundation, CC BY 2.5; see ``assets/README.md``),
so nothing is downloaded. It is split **by work**: the held-out plays in :data:`VAL_WORKS`
are never seen in training, so the validation loss measures how well the model predicts
Shakespeare it has not read, not how well it remembers neighbouring lines of the same scene.

Typical use (chapter 6)::

    from mini_transformer import data
    tok = data.CharTokenizer.from_corpus()          # 84 characters
    train_ids = tok.encode(data.load_corpus("train"))  # LongTensor of ~4.6M ids
    x, y = data.get_batch(train_ids, batch_size=8, block_size=64,
                          generator=torch.Generator().manual_seed(0))
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import tarfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

from .checks import (
    check_choice,
    check_device,
    check_instance,
    check_int,
    check_size,
    check_tensor,
)

# The synthetic tasks of chapter 3 live in tasks.py; the book's API contract lists them here.
from .tasks import IGNORE_INDEX as IGNORE_INDEX
from .tasks import SYNTHETIC_TASKS as SYNTHETIC_TASKS
from .tasks import copy_offset_task as copy_offset_task
from .tasks import order_task as order_task
from .tasks import reverse_task as reverse_task
from .tasks import sort_task as sort_task

__all__ = [
    "ASSETS_DIR",
    "CORPUS_ARCHIVE",
    "VAL_WORKS",
    "WORK_SEPARATOR",
    "load_works",
    "load_metadata",
    "load_corpus",
    "CharTokenizer",
    "get_batch",
    "RESULTS",
    "load_result",
]

ASSETS_DIR = Path(__file__).resolve().parent / "assets"
CORPUS_ARCHIVE = ASSETS_DIR / "shakespeare.tar.gz"

#: The committed results the chapters load (``mini_transformer/results/<name>.json``), made
#: by the tools in the repository's ``tools/`` and ``benchmarks/``. They ship inside the
#: package so that a chapter runs alone wherever the package is installed (Colab included).
RESULTS: tuple[str, ...] = (
    "extrapolation",
    "04_score_functions",
    "05_stability",
    "05_stability_600",
    "attention_benchmark",
    "attention_benchmark_h100",
)


def load_result(name: str) -> dict:
    """The committed result ``name`` (one of :data:`RESULTS`), read from the installed package.

    Read through ``importlib.resources``, never a path into the repository, so the
    chapters that quote these results run on Colab from an installed wheel.

    >>> load_result("extrapolation")["command"].startswith("python tools/extrapolation_lab.py")
    True
    """
    if not isinstance(name, str) or name not in RESULTS:
        raise ValueError(f"name must be one of {', '.join(RESULTS)}; got {name!r}")
    resource = importlib.resources.files("mini_transformer") / "results" / f"{name}.json"
    return json.loads(resource.read_text(encoding="utf-8"))


#: The held-out works (validation split). Four plays, 490,684 of the corpus' 5,057,198
#: characters (9.7%), fixed here so that every run of the book uses the same split.
#: A tragedy, a Scottish tragedy, a romance and a comedy: the held-out set is not one genre.
VAL_WORKS: tuple[str, ...] = ("Hamlet", "Macbeth", "The Tempest", "Twelfth Night")

#: Works are joined with a blank line between them when a split is concatenated.
WORK_SEPARATOR = "\n\n"

SPLITS = ("train", "val", "all")


@functools.lru_cache(maxsize=1)
def _read_archive() -> tuple[dict[str, str], str]:
    """Read the archive once: ({file stem: text}, metadata.txt contents)."""
    if not CORPUS_ARCHIVE.is_file():
        raise FileNotFoundError(
            f"the bundled corpus {CORPUS_ARCHIVE} is missing; reinstall mini_transformer"
        )
    texts: dict[str, str] = {}
    metadata = ""
    with tarfile.open(CORPUS_ARCHIVE, "r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            name = Path(member.name).name
            f = tar.extractfile(member)
            assert f is not None
            content = f.read().decode("ascii")
            if name == "metadata.txt":
                metadata = content
            elif name.endswith("_gut.txt"):
                texts[name[: -len(".txt")]] = content
    return dict(sorted(texts.items())), metadata


def load_metadata() -> dict[str, dict[str, str]]:
    """The archive's ``metadata.txt``.

    Returns ``{file stem: {"title", "creator", "source_url", "bytes"}}``.
    """
    _, text = _read_archive()
    meta: dict[str, dict[str, str]] = {}
    section = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            meta[section] = {}
        elif "=" in line and section is not None:
            key, value = line.split("=", 1)
            meta[section][key.strip()] = value.strip()
    return meta


def load_works() -> dict[str, str]:
    """All 42 works as ``{title: text}``, ordered by file name (so the order is fixed).

    Titles are those of ``metadata.txt`` (e.g. ``"Hamlet"``, ``"King Henry IV, Part 1"``).
    Returns a new dict on each call; the archive itself is read only once per process.
    """
    texts, _ = _read_archive()
    meta = load_metadata()
    return {meta.get(stem, {}).get("title", stem): text for stem, text in texts.items()}


@functools.lru_cache(maxsize=3)
def load_corpus(split: str = "train") -> str:
    """The corpus as one string: ``"train"``, ``"val"`` (:data:`VAL_WORKS`) or ``"all"``.

    Works are concatenated in :func:`load_works` order, separated by :data:`WORK_SEPARATOR`.
    The split is by work, never inside a work: ``"val"`` holds 4 whole plays (9.7% of the
    characters) and ``"train"`` the other 38 works.
    """
    check_choice("split", split, SPLITS)
    works = load_works()
    missing = [t for t in VAL_WORKS if t not in works]
    if missing:  # only possible if the archive was replaced
        raise ValueError(f"held-out works {missing} are not in the corpus")
    if split == "all":
        chosen = list(works)
    elif split == "val":
        chosen = [t for t in works if t in VAL_WORKS]
    else:
        chosen = [t for t in works if t not in VAL_WORKS]
    return WORK_SEPARATOR.join(works[t] for t in chosen)


class CharTokenizer:
    """A character-level tokenizer: each distinct character is one token id.

    The vocabulary is the sorted set of characters, so id ``i`` is ``chars[i]``. Build it
    with :meth:`from_corpus` (the whole corpus' 84 characters, so the held-out plays contain
    no unknown characters) or :meth:`from_text`.

    Example::

        >>> tok = CharTokenizer("abc")
        >>> tok.encode("cab").tolist()
        [2, 0, 1]
        >>> tok.decode([2, 0, 1])
        'cab'
    """

    def __init__(self, chars: str | Iterable[str]):
        if not isinstance(chars, (str, Iterable)):
            raise TypeError(
                f"chars must be a str or an iterable of characters, got {type(chars).__name__}"
            )
        chars = list(chars)
        for c in chars:
            if not isinstance(c, str):
                raise TypeError(f"chars must be single characters (str), got {c!r}")
            if len(c) != 1:
                raise ValueError(f"chars must be single characters, got {c!r}")
        unique = sorted(set(chars))
        if not unique:
            raise ValueError("chars must contain at least one character, got none")
        self.chars: list[str] = unique
        self.stoi: dict[str, int] = {c: i for i, c in enumerate(unique)}
        # Lookup table from Unicode code point to id (-1 = unknown) for fast encoding.
        codes = np.array([ord(c) for c in unique], dtype=np.int64)
        self._lut = np.full(int(codes.max()) + 1, -1, dtype=np.int64)
        self._lut[codes] = np.arange(len(unique))
        self._lut_ascii = np.full(128, -1, dtype=np.int64)
        ascii_codes = codes[codes < 128]
        self._lut_ascii[ascii_codes] = self._lut[ascii_codes]

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The tokenizer whose vocabulary is the set of characters in ``text``."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if text.isascii():  # fast path for the corpus: unique bytes
            return cls(bytes(np.unique(np.frombuffer(text.encode("ascii"), np.uint8))).decode())
        return cls(set(text))

    @classmethod
    def from_corpus(cls) -> CharTokenizer:
        """The tokenizer of the whole bundled corpus (train and held-out works): 84 characters."""
        return cls.from_text(load_corpus("all"))

    @property
    def vocab_size(self) -> int:
        """Number of distinct tokens."""
        return len(self.chars)

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharTokenizer) and self.chars == other.chars

    def __hash__(self) -> int:
        return hash("".join(self.chars))

    def encode(self, text: str) -> torch.Tensor:
        """Token ids of ``text``: a 1-D ``torch.long`` tensor of length ``len(text)``.

        Raises ``ValueError`` naming the first character that is not in the vocabulary and
        its position in ``text``.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not text:
            return torch.zeros(0, dtype=torch.long)
        if text.isascii():  # fast path: one byte per character
            codes = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
            ids = self._lut_ascii[codes]
        else:
            codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
            inside = codes < len(self._lut)
            ids = np.full(codes.shape, -1, dtype=np.int64)
            ids[inside] = self._lut[codes[inside]]
        if ids.min() < 0:
            pos = int(np.argmax(ids < 0))
            ch = text[pos]
            raise ValueError(
                f"character {ch!r} (U+{ord(ch):04X}) at position {pos} is not in the "
                f"tokenizer's vocabulary of {self.vocab_size} characters"
            )
        return torch.from_numpy(ids)

    def decode(self, ids: torch.Tensor | Sequence[int] | np.ndarray) -> str:
        """The text of a 1-D sequence of token ids (a tensor, array or list of ints)."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(f"ids must be 1-D, got a tensor of shape {tuple(ids.shape)}")
            if ids.is_floating_point() or ids.dtype == torch.bool:
                raise TypeError(f"ids must be integers, got dtype {ids.dtype}")
            values = ids.tolist()
        else:
            values = list(ids)
        out = []
        for pos, i in enumerate(values):
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise TypeError(f"ids must be integers, got {i!r} at position {pos}")
            if not 0 <= i < self.vocab_size:
                raise ValueError(
                    f"ids must be token ids in 0..{self.vocab_size - 1}: "
                    f"token id {int(i)} at position {pos} is outside 0..{self.vocab_size - 1}"
                )
            out.append(self.chars[i])
        return "".join(out)

    def to_dict(self) -> dict:
        """A JSON-able description: ``{"type": "char", "chars": "..."}``."""
        return {"type": "char", "chars": "".join(self.chars)}

    @classmethod
    def from_dict(cls, d: dict) -> CharTokenizer:
        """Inverse of :meth:`to_dict`."""
        if not isinstance(d, dict):
            raise TypeError(f"a CharTokenizer description must be a dict, got {type(d).__name__}")
        ok = d.get("type") == "char" and isinstance(d.get("chars"), str)
        if not ok:
            raise ValueError(f"not a CharTokenizer description: {d!r:.80}")
        chars = d["chars"]
        if list(chars) != sorted(set(chars)):  # rebuilding would re-sort: ids would shift
            raise ValueError(
                "a stored CharTokenizer's chars must be distinct and sorted (id i is chars[i]); "
                f"got {chars!r:.80}, which would load with different ids"
            )
        return cls(chars)

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as JSON."""
        Path(path).write_text(json.dumps(self.to_dict()), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> CharTokenizer:
        """Read a tokenizer written by :meth:`save`."""
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def get_batch(
    data: torch.Tensor,
    batch_size: int,
    block_size: int,
    generator: torch.Generator | None = None,
    device: str | torch.device | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A random batch of ``batch_size`` windows of ``block_size`` tokens, and their targets.

    Each row starts at a uniformly random offset ``s`` (drawn with ``generator``, so a
    seeded generator gives the same batch every time); ``x[b] = data[s:s+T]`` and the
    targets are the next tokens, ``y[b] = data[s+1:s+T+1]``.

    Args:
        data: 1-D integer tensor of token ids, longer than ``block_size``.
        batch_size: ``B >= 1``.
        block_size: ``T >= 1``.
        generator: a CPU ``torch.Generator`` for reproducible batches (``None``: the global RNG).
        device: where to put the batch (default: ``data``'s device).

    Returns:
        ``(x, y)``, two ``torch.long`` tensors of shape ``(B, T)``.
    """
    check_tensor("data", data)
    if data.dim() != 1:
        raise ValueError(f"data must be a 1-D tensor of token ids, got {tuple(data.shape)}")
    if data.is_floating_point() or data.is_complex() or data.dtype == torch.bool:
        raise TypeError(f"data must hold integer token ids, got dtype {data.dtype}")
    batch_size = check_int("batch_size", batch_size, low=1)
    block_size = check_int("block_size", block_size, low=1)
    check_size("the batch (2, batch_size, block_size)", (2, batch_size, block_size), torch.long)
    if len(data) <= block_size:
        raise ValueError(
            f"data has {len(data)} tokens; it needs more than block_size={block_size} "
            "to hold one window and its next-token targets"
        )
    if generator is not None:
        check_instance("generator", generator, torch.Generator, "a torch.Generator or None")
    check_device("device", device)
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    idx = starts[:, None] + torch.arange(block_size)[None, :]  # (B, T), on the CPU
    if data.device.type == "cuda":  # pinned + non_blocking: the copy does not stall the host
        idx = idx.pin_memory().to(data.device, non_blocking=True)
    x = data[idx].long()
    y = data[idx + 1].long()
    target = torch.device(device) if device is not None else data.device
    if target != x.device:
        pin = target.type == "cuda" and x.device.type == "cpu"
        x = (x.pin_memory() if pin else x).to(target, non_blocking=pin)
        y = (y.pin_memory() if pin else y).to(target, non_blocking=pin)
    return x, y
