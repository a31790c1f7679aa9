"""Data (chapter 6): the bundled Shakespeare corpus, a character tokenizer and random batches.

The corpus ships with the package (``assets/shakespeare.tar.gz``: 42 works from Project
Gutenberg as packaged by the Open Knowledge Foundation, CC BY 2.5; see ``assets/README.md``),
so nothing is downloaded. It is split **by work**: the held-out plays of :data:`VAL_WORKS` are
never trained on, so the validation loss measures how well the model predicts Shakespeare it
has not read, not how well it remembers neighbouring lines of the same scene.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
import tarfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

from . import checks
from .checks import check_choice, check_device, check_instance, check_int, check_size, check_tensor
from .tasks import IGNORE_INDEX, SYNTHETIC_TASKS, copy_offset_task  # noqa: F401 (contract)

__all__ = ["VAL_WORKS", "WORK_SEPARATOR", "load_works", "load_corpus", "CharTokenizer",
    "get_batch", "load_result"]  # fmt: skip

ASSETS_DIR = Path(__file__).resolve().parent / "assets"
CORPUS_ARCHIVE = ASSETS_DIR / "shakespeare.tar.gz"

#: The held-out works, the validation split, hold 490,684 of the corpus' 5,057,198
#: characters (9.7%). A tragedy, a Scottish tragedy, a romance and a comedy: not one genre.
VAL_WORKS: tuple[str, ...] = ("Hamlet", "Macbeth", "The Tempest", "Twelfth Night")

#: Works are joined with a blank line between them when a split is concatenated.
WORK_SEPARATOR = "\n\n"

#: The committed results the chapters quote: the ``results/<name>.json`` the package ships, made
#: by ``tools/`` (the folder is the list, so a new result needs no second registration).
RESULTS = tuple(sorted(f.name.removesuffix(".json") for f in (importlib.resources.files(
    "mini_transformer") / "results").iterdir() if f.name.endswith(".json")))  # fmt: skip


def load_result(name: str) -> dict:
    """The committed result ``name``, one of ``RESULTS``, read through ``importlib.resources``
    (never a path into the repository) so that the chapters run on Colab from a wheel.

    >>> load_result("extrapolation")["command"].startswith("python tools/extrapolation_lab.py")
    True
    """
    check_choice("name", name, RESULTS)
    resource = importlib.resources.files("mini_transformer") / "results" / f"{name}.json"
    return json.loads(resource.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def _read_archive() -> dict[str, str]:
    """``{title: text}`` of the 42 works in file-name order, read once per process."""
    with tarfile.open(CORPUS_ARCHIVE, "r:gz") as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        files = {Path(m.name).name: tar.extractfile(m).read().decode("ascii") for m in members}
    titles = dict(re.findall(r"^\[(\w+)\]\ntitle = (.+)$", files["metadata.txt"], re.M))
    stems = sorted(name[: -len(".txt")] for name in files if name.endswith("_gut.txt"))
    return {titles.get(stem, stem): files[f"{stem}.txt"] for stem in stems}


def load_works() -> dict[str, str]:
    """All 42 works as ``{title: text}`` (titles of ``metadata.txt``, e.g. ``"Hamlet"``)."""
    return dict(_read_archive())


@functools.lru_cache(maxsize=3)
def load_corpus(split: str = "train") -> str:
    """The corpus as one string: ``"train"`` (38 works), ``"val"`` (:data:`VAL_WORKS`) or ``"all"``;
    works joined by :data:`WORK_SEPARATOR` in :func:`load_works` order."""
    check_choice("split", split, ("train", "val", "all"))
    works = _read_archive()
    chosen = [t for t in works if split == "all" or (t in VAL_WORKS) == (split == "val")]
    return WORK_SEPARATOR.join(works[t] for t in chosen)


class CharTokenizer:
    """A character-level tokenizer: id ``i`` is ``chars[i]``, the sorted distinct characters.

    >>> tok = CharTokenizer("abc")
    >>> tok.encode("cab").tolist()
    [2, 0, 1]
    >>> tok.decode([2, 0, 1])
    'cab'
    """

    def __init__(self, chars: str | Iterable[str]):
        chars = list(check_instance("chars", chars, (str, Iterable), "a str or characters"))
        for c in chars:
            check_instance("chars", c, str, "single characters (str)")
        self.chars: list[str] = sorted(set(chars))
        if not self.chars or any(len(c) != 1 for c in self.chars):
            raise ValueError(f"chars must be one or more single characters, got {chars!r:.80}")
        codes = np.array([ord(c) for c in self.chars])
        self._lut = np.full(codes.max() + 1, -1, dtype=np.int64)  # code point -> id, -1: unknown
        self._lut[codes] = np.arange(len(codes))

    @classmethod
    def from_corpus(cls) -> CharTokenizer:
        """The tokenizer of the whole corpus (84 characters): held-out plays hold no unknown one."""
        return cls(set(load_corpus("all")))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharTokenizer) and self.chars == other.chars

    def encode(self, text: str) -> torch.Tensor:
        """The token ids of ``text``, ``(len(text),)`` ``torch.long``."""
        check_instance("text", text, str, "a str")
        utf32 = text.encode("utf-32-le", "surrogatepass")  # a lone surrogate: "not in the vocab"
        codes = np.frombuffer(utf32, dtype=np.uint32).astype(np.int64)
        n = len(self._lut)
        ids = np.where(codes < n, self._lut[np.minimum(codes, n - 1)], -1)
        if (ids < 0).any():
            pos = int(np.argmax(ids < 0))
            raise ValueError(  # worded as chapter 6 prints it
                f"character {text[pos]!r} (U+{ord(text[pos]):04X}) at position {pos} is not in "
                f"the tokenizer's vocabulary of {self.vocab_size} characters"
            )
        return torch.from_numpy(ids)

    def decode(self, ids: torch.Tensor | Sequence[int] | np.ndarray) -> str:
        """The text of a 1-D sequence of token ids (a tensor, array or list of ints)."""
        if isinstance(ids, torch.Tensor):
            ids = check_tensor("ids", ids, integer=True, ndim=1, dims="(T,)").tolist()
        out = []
        for pos, i in enumerate(ids):
            ok = isinstance(i, (int, np.integer)) and not isinstance(i, bool)
            if not (ok and 0 <= i < self.vocab_size):
                check_int(f"ids[{pos}]", i, low=0, high=self.vocab_size - 1)
            out.append(self.chars[i])
        return "".join(out)

    def to_dict(self) -> dict:
        """What a checkpoint stores: ``{"type": "char", "chars": "".join(chars)}``."""
        return {"type": "char", "chars": "".join(self.chars)}

    @classmethod
    def from_dict(cls, d: dict) -> CharTokenizer:
        """Inverse of :meth:`to_dict`."""
        check_instance("d", d, dict, "a CharTokenizer description (a dict)")
        chars = d.get("chars")
        if d.get("type") != "char" or not isinstance(chars, str):
            raise ValueError(f"not a CharTokenizer description: {d!r:.80}")
        if list(chars) != sorted(set(chars)):  # rebuilding would re-sort: ids would shift
            raise ValueError(
                "a stored CharTokenizer's chars must be distinct and sorted (id i is chars[i]); "
                f"got {chars!r:.80}, which would load with different ids"
            )
        return cls(chars)


def get_batch(
    data: torch.Tensor, batch_size: int, block_size: int, generator: torch.Generator | None = None,
    device: str | torch.device | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(x, y)``, ``(B, T)`` ``torch.long``: ``batch_size`` random windows of ``block_size`` ids
    and their next tokens, ``x[b] = data[s : s+T]``, ``y[b] = data[s+1 : s+T+1]``, ``s`` uniform
    (drawn with ``generator``); on ``device`` (default: ``data``'s), pinned from CPU to GPU."""
    if checks.checking():  # not in the training loop (checks.trusted): it made the arguments
        check_tensor("data", data, integer=True, ndim=1, dims="(N,) of token ids")
        check_int("batch_size", batch_size, low=1)
        check_int("block_size", block_size, low=1)
        check_size("the batch (2, batch_size, block_size)", (2, batch_size, block_size), torch.long)
        if len(data) <= block_size:
            raise ValueError(
                f"data has {len(data)} tokens; it needs more than block_size={block_size} "
                "to hold one window and its next-token targets"
            )
        if generator is not None:
            check_instance("generator", generator, torch.Generator, "a torch.Generator or None")
        check_device("device", device)
    target = data.device if device is None else torch.device(device)
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    idx = starts[:, None] + torch.arange(block_size)  # (B, T), on the CPU
    if data.device.type == "cuda":  # pinned + non_blocking: the copy does not stall the host
        idx = idx.pin_memory().to(data.device, non_blocking=True)
    x, y = data[idx].long(), data[idx + 1].long()  # y_t = x_{t+1}
    if target != x.device:
        pin = target.type == "cuda" and x.device.type == "cpu"
        x, y = ((t.pin_memory() if pin else t).to(target, non_blocking=pin) for t in (x, y))
    return x, y
