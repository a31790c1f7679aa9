"""Tests of mini_transformer.data: the bundled corpus, its split, the tokenizer, batches."""

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_transformer import data


@pytest.fixture(scope="module")
def tok():
    return data.CharTokenizer.from_corpus()


def test_corpus_has_42_works_and_84_distinct_characters():
    works = data.load_works()
    assert len(works) == 42
    assert "Hamlet" in works and "Sonnets" in works
    assert sum(len(t) for t in works.values()) == 5_057_198  # sizes in metadata.txt
    assert len(set(data.load_corpus("all"))) == 84


def test_attribution_ships_beside_the_archive():
    for name in ("COPYING.txt", "metadata.txt", "README.md"):
        assert (data.ASSETS_DIR / name).is_file()
    assert "Creative Commons Attribution" in (data.ASSETS_DIR / "COPYING.txt").read_text()
    assert data.CORPUS_ARCHIVE.stat().st_size <= 2.5e6


def test_split_is_by_work_and_val_is_exactly_the_held_out_plays():
    works = data.load_works()
    val = data.load_corpus("val")
    train = data.load_corpus("train")
    assert val == data.WORK_SEPARATOR.join(works[t] for t in works if t in data.VAL_WORKS)
    assert train == data.WORK_SEPARATOR.join(works[t] for t in works if t not in data.VAL_WORKS)
    assert works["Hamlet"] in val and works["Hamlet"] not in train
    sep = len(data.WORK_SEPARATOR)
    assert len(train) + len(val) + sep == len(data.load_corpus("all"))


def test_held_out_plays_are_about_ten_percent_of_the_characters():
    works = data.load_works()
    held = sum(len(works[t]) for t in data.VAL_WORKS)
    assert held == 490_684
    assert 0.09 < held / sum(len(t) for t in works.values()) < 0.11


def test_load_corpus_rejects_an_unknown_split():
    with pytest.raises(ValueError, match="split must be one of"):
        data.load_corpus("test")


def test_tokenizer_of_the_corpus_has_84_ids_in_sorted_order(tok):
    assert tok.vocab_size == 84 == len(tok.chars)
    assert tok.chars == sorted(tok.chars)
    assert tok.decode([0]) == "\n"


def test_validation_plays_contain_no_unknown_characters(tok):
    ids = tok.encode(data.load_corpus("val"))
    assert ids.dtype == torch.long and ids.dim() == 1
    assert int(ids.max()) < 84


@settings(max_examples=30, deadline=None)
@given(st.text(alphabet="abcXYZ \n!'", max_size=40))
def test_decode_inverts_encode(text):
    tok = data.CharTokenizer("abcXYZ \n!'")
    assert tok.decode(tok.encode(text)) == text


def test_encode_and_decode_agree_with_a_plain_dict_lookup(tok):
    text = "To be, or not to be: that is the question."
    vocab = sorted(set(data.load_corpus("all")))
    expected = [vocab.index(c) for c in text]
    assert tok.encode(text).tolist() == expected
    assert tok.decode(torch.tensor(expected)) == text


def test_unknown_character_error_names_the_character_and_its_position(tok):
    msg = r"character 'é' \(U\+00E9\) at position 4 is not in the tokenizer's vocabulary"
    with pytest.raises(ValueError, match=msg):
        tok.encode("Cafx\u00e9")


def test_decode_rejects_an_id_outside_the_vocabulary(tok):
    with pytest.raises(ValueError, match=r"ids\[1\] must be an integer in \[0, 83\], got 84"):
        tok.decode([3, 84])


def test_encode_rejects_a_non_string(tok):
    with pytest.raises(TypeError, match="text must be a str"):
        tok.encode(b"bytes")


def test_tokenizer_survives_a_json_round_trip(tok):
    assert json.loads(json.dumps(tok.to_dict())) == tok.to_dict()
    assert data.CharTokenizer.from_dict(tok.to_dict()) == tok
    with pytest.raises(ValueError, match="not a CharTokenizer description"):
        data.CharTokenizer.from_dict({"type": "bpe"})


def test_targets_are_the_inputs_shifted_by_one():
    ids = torch.arange(1000)
    x, y = data.get_batch(ids, 4, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 16) and x.dtype == torch.long
    for row_x, row_y in zip(x, y, strict=True):
        start = int(row_x[0])
        assert torch.equal(row_x, ids[start : start + 16])  # a contiguous window
        assert torch.equal(row_y, ids[start + 1 : start + 17])


def test_a_seeded_generator_gives_the_same_batch():
    ids = torch.arange(500)
    a = data.get_batch(ids, 3, 8, torch.Generator().manual_seed(7))
    b = data.get_batch(ids, 3, 8, torch.Generator().manual_seed(7))
    c = data.get_batch(ids, 3, 8, torch.Generator().manual_seed(8))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_every_start_offset_can_be_drawn():
    ids = torch.arange(6)  # block_size 4: starts 0 or 1 only
    x, _ = data.get_batch(ids, 200, 4, torch.Generator().manual_seed(0))
    assert set(x[:, 0].tolist()) == {0, 1}


def test_get_batch_rejects_data_too_short_for_one_window():
    with pytest.raises(ValueError, match="needs more than block_size=8"):
        data.get_batch(torch.arange(8), 2, 8)


def test_get_batch_rejects_a_non_positive_batch_size():
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        data.get_batch(torch.arange(100), 0, 8)


def test_get_batch_rejects_two_dimensional_data():
    with pytest.raises(ValueError, match=r"data must have 1 dimensions \(N,\) of token ids"):
        data.get_batch(torch.zeros(10, 10, dtype=torch.long), 2, 4)


def test_get_batch_rejects_float_data():
    with pytest.raises(TypeError, match="data must be an integer tensor"):
        data.get_batch(torch.zeros(100), 2, 4)
