"""plotting: seeded set-up, tables and the heatmap grid; bad arguments are named."""

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


@pytest.mark.parametrize(
    ("seed", "error"), [(-1, ValueError), (1.5, TypeError), ("1", TypeError), (True, TypeError)]
)
def test_setup_rejects_bad_seed(seed, error):
    with pytest.raises(error, match="seed must be a non-negative integer"):
        plotting.setup(seed)


@pytest.mark.parametrize(
    ("threads", "error"), [(0, ValueError), (-2, ValueError), (2.0, TypeError)]
)
def test_setup_rejects_bad_threads(threads, error):
    with pytest.raises(error, match="threads must be a positive integer"):
        plotting.setup(0, threads=threads)


def test_html_table_writes_one_row_per_row_and_refuses_ragged_rows():
    html = plotting.html_table(["scheme", "acc"], [["rope", 1.0], ["none", 0.68]])
    assert html.count("<tr>") == 3 and html.count("<td>") == 4 and "<td>0.68</td>" in html
    with pytest.raises(ValueError, match=r"rows\[1\]"):
        plotting.html_table(["a", "b"], [[1, 2], [3]])
    with pytest.raises(TypeError, match="header"):
        plotting.html_table("ab", [])


# --------------------------------------------------------------------------- show_heatmaps
# Read back from the drawn figure (Agg backend: no window): each panel's image array, colour
# limits, labels and texts, compared with the input and with the values computed here.
matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
plt = pytest.importorskip("matplotlib.pyplot")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_heatmaps_draw_each_matrix_in_its_panel_on_one_colour_scale():
    m = np.random.default_rng(0).normal(size=(2, 3, 4, 5))
    fig, axes = plotting.show_heatmaps(m, xlabel="key $j$", ylabel="query $i$")
    assert axes.shape == (2, 3)
    for r in range(2):
        for c in range(3):
            (im,) = axes[r, c].images
            assert np.array_equal(im.get_array(), m[r, c])
            assert im.get_clim() == (m.min(), m.max())  # all panels: the grid's min and max
            assert im.get_cmap().name == "Blues"
            assert axes[r, c].get_xlabel() == ("key $j$" if r == 1 else "")
            assert axes[r, c].get_ylabel() == ("query $i$" if c == 0 else "")
    assert len(fig.axes) == 2 * 3 + 1  # the six panels and one colour bar


def test_heatmaps_use_the_given_limits_titles_and_size():
    w = torch.softmax(torch.randn(4, 3, 3), dim=-1)  # one row of four panels
    titles = [f"head {h}" for h in range(4)]
    fig, axes = plotting.show_heatmaps(
        w, xlabel="k", ylabel="q", titles=titles, vmin=0, vmax=1, figsize=(8, 2)
    )
    assert axes.shape == (1, 4) and len(fig.axes) == 4 + 1  # and one colour bar
    assert [ax.get_title() for ax in axes.flat] == titles
    assert all(ax.images[0].get_clim() == (0.0, 1.0) for ax in axes.flat)
    assert tuple(fig.get_size_inches()) == (8.0, 2.0)
    for h in range(4):
        assert np.allclose(axes[0, h].images[0].get_array(), w[h].numpy(), atol=1e-7)


def test_heatmaps_accept_a_list_of_tensors_that_require_grad_and_one_matrix():
    a = torch.randn(3, 3, requires_grad=True)
    _, axes = plotting.show_heatmaps([a, 2 * a], xlabel="x", ylabel="y")
    assert np.allclose(axes[0, 1].images[0].get_array(), 2 * a.detach().numpy())
    _, axes = plotting.show_heatmaps([[1.0, 2.0], [3.0, 4.0]], xlabel="x", ylabel="y")
    assert axes.shape == (1, 1) and axes[0, 0].images[0].get_clim() == (1.0, 4.0)


def test_heatmaps_tick_labels_long_ones_slanted():
    words = ["I", "natural-language", "processing"]
    chars = ["T", "o", " "]
    _, axes = plotting.show_heatmaps(
        np.eye(3), xlabel="x", ylabel="y", xticklabels=words, yticklabels=chars, fontsize=7
    )
    ax = axes[0, 0]
    assert [t.get_text() for t in ax.get_xticklabels()] == words
    assert [t.get_text() for t in ax.get_yticklabels()] == chars
    assert list(ax.get_xticks()) == [0, 1, 2] and list(ax.get_yticks()) == [0, 1, 2]
    assert ax.get_xticklabels()[0].get_rotation() == 30
    assert ax.get_yticklabels()[0].get_fontsize() == 7
    _, axes = plotting.show_heatmaps(np.eye(3), xlabel="x", ylabel="y", xticklabels=chars)
    assert axes[0, 0].get_xticklabels()[0].get_rotation() == 0  # one character: upright


def _texts(ax):
    return {(t.get_position(), t.get_text()): t.get_color() for t in ax.texts}


def test_heatmaps_annotate_with_a_format_string_white_on_dark_cells():
    w = np.array([[1.0, 0.0], [0.25, 0.75]])
    _, axes = plotting.show_heatmaps(w, xlabel="x", ylabel="y", annotate="{:.2f}", vmin=0, vmax=1)
    assert _texts(axes[0, 0]) == {
        ((0, 0), "1.00"): "white",
        ((1, 0), "0.00"): "black",  # position (x, y) = (key j, query i)
        ((0, 1), "0.25"): "black",
        ((1, 1), "0.75"): "white",
    }


def test_heatmaps_annotate_with_given_strings_in_the_shape_of_matrices():
    w = torch.tensor([[[1.0, 0.0], [0.4, 0.6]], [[0.9, 0.0], [0.5, 0.5]]])  # (2, 2, 2)
    mask = torch.tensor([[True, False], [True, True]])
    notes = np.where(mask.numpy(), np.char.mod("%.1f", w.numpy()), "X")
    _, axes = plotting.show_heatmaps(w, xlabel="x", ylabel="y", annotate=notes, vmin=0, vmax=1)
    assert sorted(text for _, text in _texts(axes[0, 1])) == ["0.5", "0.5", "0.9", "X"]
    assert ((1, 0), "X") in _texts(axes[0, 0])


def test_heatmaps_draw_blank_cells_off_the_scale_in_their_own_colour():
    g = torch.tensor([[[1.3, 0.0], [0.5, 0.2]], [[0.3, 0.1], [0.2, 0.35]]])  # (2, 2, 2)
    _, axes = plotting.show_heatmaps(g, xlabel="x", ylabel="y", vmin=0, blank=g == 0)
    zero = axes[0, 0].images[0]
    assert np.array_equal(np.ma.getmaskarray(zero.get_array()), [[False, True], [False, False]])
    assert not np.ma.getmaskarray(axes[0, 1].images[0].get_array()).any()
    assert zero.get_clim() == (0.0, np.float32(1.3))
    grey = matplotlib.colors.to_rgba("lightgrey")
    assert zero.to_rgba(zero.get_array())[0, 1].tolist() == list(grey)  # the blank cell
    assert zero.to_rgba(zero.get_array())[1, 1].tolist() != list(grey)  # 0.2: on the scale
    assert zero.get_cmap().name == "Blues"
    # without vmin, the scale starts at the smallest entry that is not blank (0.1, not 0)
    _, axes = plotting.show_heatmaps(g, xlabel="x", ylabel="y", blank=g == 0)
    assert axes[0, 1].images[0].get_clim()[0] == np.float32(0.1)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"matrices": np.ones(3)}, ValueError, "matrices must have at least 2 dimensions"),
        ({"matrices": np.ones((1, 1, 1, 2, 2))}, ValueError, "matrices must have 2, 3 or 4"),
        ({"matrices": [np.ones((2, 2)), np.ones((3, 3))]}, ValueError, "matrices must be"),
        ({"matrices": np.array([[1.0, np.nan]])}, ValueError, "matrices must hold finite"),
        ({"matrices": [["a", "b"]]}, TypeError, "matrices must hold real numbers"),
        ({"xlabel": 3}, TypeError, "xlabel must be a string"),
        ({"titles": ["only one"]}, ValueError, "titles must hold 2 panel titles"),
        ({"titles": "ab"}, TypeError, "titles must be None or a sequence"),
        ({"xticklabels": ["a", "b"]}, ValueError, "xticklabels must hold 3 labels"),
        ({"yticklabels": ["a", "b", "c"]}, ValueError, "yticklabels must hold 2 labels"),
        ({"vmin": "0"}, TypeError, "vmin must be a finite number"),
        ({"vmax": float("nan")}, ValueError, "vmax must be a finite number"),
        ({"vmin": 1, "vmax": 0}, ValueError, "vmin must be smaller than vmax"),
        ({"vmin": 5}, ValueError, "vmin must be smaller than vmax"),
        ({"annotate": np.full((2, 3), "x")}, ValueError, "annotate must be a format string"),
        ({"blank": np.zeros((2, 2, 3))}, TypeError, "blank must be None or a boolean array"),
        ({"blank": np.zeros((2, 3), dtype=bool)}, ValueError, "blank must be booleans of the"),
        ({"fontsize": 0}, ValueError, "fontsize must be a finite number > 0"),
        ({"figsize": 4}, TypeError, "figsize must be None or"),
        ({"figsize": (4, -1)}, ValueError, "figsize height must be a finite number > 0"),
    ],
)
def test_heatmaps_refuse_bad_arguments_naming_them(kwargs, error, message):
    args = {"matrices": np.zeros((2, 2, 3)), "xlabel": "key", "ylabel": "query", **kwargs}
    with pytest.raises(error, match=message):
        plotting.show_heatmaps(**args)
    assert not plt.get_fignums()  # refused before any figure was made
