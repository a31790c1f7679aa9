"""plotting.setup makes notebooks reproducible: same seed, same draws; bad arguments are named."""

import numpy as np
import pytest
import torch

from mini_transformer import plotting


def test_setup_returns_generator_seeded_like_default_rng():
    rng = plotting.setup(3)
    assert np.array_equal(rng.normal(size=5), np.random.default_rng(3).normal(size=5))


def test_setup_seeds_torch_identically_each_time():
    plotting.setup(7)
    a = torch.randn(4)
    plotting.setup(7)
    b = torch.randn(4)
    assert torch.equal(a, b)


def test_setup_sets_thread_count():
    before = torch.get_num_threads()
    try:
        plotting.setup(0, threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("seed", [-1, 1.5, "0", True])
def test_setup_rejects_bad_seed(seed):
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        plotting.setup(seed)


@pytest.mark.parametrize("threads", [0, -2, 2.0])
def test_setup_rejects_bad_threads(threads):
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        plotting.setup(0, threads=threads)


def test_html_table_writes_one_row_per_row_and_refuses_ragged_rows():
    html = plotting.html_table(["scheme", "acc"], [["rope", 1.0], ["none", 0.68]])
    assert html.count("<tr>") == 3 and html.count("<td>") == 4 and "<td>0.68</td>" in html
    with pytest.raises(ValueError, match=r"rows\[1\]"):
        plotting.html_table(["a", "b"], [[1, 2], [3]])
    with pytest.raises(TypeError, match="header"):
        plotting.html_table("ab", [])
