"""The public API contract of BOOK.md: every name readers and exercises import still imports.

Some names live in a module of their own (MemN2N and ALiBi, the masks, the synthetic tasks,
residual paths) and are re-exported by the module the book's contract names. The re-export
must be the *same object*, so a chapter importing from either place runs the same code.
"""

from __future__ import annotations

import importlib

import pytest

# module in the contract -> (defining module, names)
CONTRACT = {
    "positional": {
        "positional": [
            "index_encoding",
            "normalized_index_encoding",
            "binary_encoding",
            "sinusoidal_encoding",
            "rotation_matrix",
            "SinusoidalPositionalEncoding",
            "LearnedPositionalEmbedding",
            "RotaryEmbedding",
        ],
        "memn2n": ["memn2n_encoding", "memn2n_sentence", "MemN2NPositionalEncoding"],
        "alibi": ["alibi_slopes", "alibi_bias", "ALiBi"],
    },
    "attention": {
        "attention": ["scaled_dot_product_attention", "MultiHeadAttention"],
        "masks": ["causal_mask", "padding_mask", "combine_masks"],
    },
    "layers": {
        "layers": ["LayerNorm", "FeedForward", "TransformerBlock"],
        "paths": ["residual_paths", "count_paths_by_length"],
    },
    "model": {"model": ["TransformerConfig", "TransformerLM"]},
    "data": {
        "data": ["load_corpus", "CharTokenizer", "get_batch"],
        "tasks": ["IGNORE_INDEX", "SYNTHETIC_TASKS", "copy_offset_task"],
    },
    "train": {"checkpoints": ["save_checkpoint", "load_checkpoint"]},
}

CASES = [
    (public, home, name)
    for public, homes in CONTRACT.items()
    for home, names in homes.items()
    for name in names
]


@pytest.mark.parametrize("public, home, name", CASES)
def test_contract_name_imports_from_the_module_the_book_names(public, home, name):
    where = importlib.import_module(f"mini_transformer.{public}")
    defined = importlib.import_module(f"mini_transformer.{home}")
    assert getattr(where, name) is getattr(defined, name)
    assert name in defined.__all__  # documented once, in the module that defines it


SPLIT = [c for c in CASES if c[0] != c[1] and c[0] != "train"]


@pytest.mark.parametrize("public, home, name", SPLIT)
def test_a_split_out_name_is_documented_once(public, home, name):
    # autodoc documents every name in a module's __all__: listing a re-export in both modules
    # would describe the object twice in the API appendix, under two names. (train.py is the
    # exception on purpose: it is the one page chapter 6 sends readers to.)
    assert name not in importlib.import_module(f"mini_transformer.{public}").__all__


def test_a_new_module_defines_what_it_exports():
    for module in ("memn2n", "alibi", "masks", "additive", "tasks", "paths", "schemes"):
        mod = importlib.import_module(f"mini_transformer.{module}")
        for name in mod.__all__:
            obj = getattr(mod, name)
            if callable(obj) and hasattr(obj, "__module__") and not isinstance(obj, dict):
                assert obj.__module__ == mod.__name__, (module, name)


def test_the_package_exposes_its_contract_modules_and_the_cli_runs_without_a_warning():
    import subprocess
    import sys

    import mini_transformer as mt

    for name in ("attention", "data", "exercises", "layers", "model", "positional", "train"):
        assert getattr(mt, name).__name__ == f"mini_transformer.{name}"
    # Importing `train` in the package's __init__ would make runpy warn before every run.
    run = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-m", "mini_transformer.train"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and "usage:" in run.stderr and "Warning" not in run.stderr
