"""Chapter 1's checks that left the reader's path (book/01_why_position.ipynb).

Each test recomputes a claim of the chapter from the package (``positional``,
``attention``, ``model``) or from the committed results (``data.load_result``), so it
fails when the package or the data changes, not only when the notebook does. Exact pins of
committed data live here, not in the chapter.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from mini_transformer import attention, layers, positional
from mini_transformer.exercises.ch1_position import scalar_readout_accuracy

# --- 1.1 order is invisible without position --------------------------------------------


def _sentences():
    gen = np.random.default_rng(0)
    vocab = ["handful", "of", "chocolate"]
    E = gen.standard_normal((3, 8))

    def embed(sentence):
        return E[[vocab.index(w) for w in sentence.split()]]

    return embed("handful of chocolate"), embed("chocolate of handful")


def _attend(X, W, mask=None):
    Q, K, V = (torch.from_numpy(X @ w) for w in W)
    return attention.scaled_dot_product_attention(Q, K, V, mask=mask).numpy()


def test_the_two_sentences_are_one_permutation_and_have_one_sum():
    X_a, X_b = _sentences()
    assert not np.array_equal(X_a, X_b)  # two different matrices (moved from 1.1's cell)
    assert np.array_equal(X_b, X_a[[2, 1, 0]])
    assert np.allclose(X_a.sum(0), X_b.sum(0), rtol=0, atol=1e-12)
    bag_a, bag_b = X_a.sum(axis=0), X_b.sum(axis=0)  # section 1.1's cell (moved, session 5)
    assert np.allclose(bag_a, bag_b, rtol=0, atol=1e-12)  # the same sum: the order is lost
    # an added position code does not help the sum: sum(x + p) = sum(x) + sum(p)
    p = np.random.default_rng(2).standard_normal((3, 8))
    assert np.allclose((X_a + p).sum(0), (X_b + p).sum(0), rtol=0, atol=1e-12)


def test_package_attention_is_equivariant_without_mask_for_every_order():
    X_a, _ = _sentences()
    gen = np.random.default_rng(1)
    W = [gen.standard_normal((8, 8)) / np.sqrt(8) for _ in range(3)]
    out = _attend(X_a, W)
    for order in map(list, itertools.permutations(range(3))):
        out_perm = _attend(X_a[order], W)
        assert np.allclose(out_perm, out[order], rtol=0, atol=1e-12), order
        assert np.allclose(out_perm.mean(0), out.mean(0), rtol=0, atol=1e-12), order


def test_causal_mask_breaks_equivariance():
    X_a, _ = _sentences()
    gen = np.random.default_rng(1)
    W = [gen.standard_normal((8, 8)) / np.sqrt(8) for _ in range(3)]
    mask = attention.causal_mask(3)
    out = _attend(X_a, W, mask)
    worst = max(
        np.abs(_attend(X_a[o], W, mask) - out[o]).max()
        for o in map(list, itertools.permutations(range(3)))
    )
    assert worst > 0.1


@pytest.mark.parametrize("T", [1, 2, 8, 33])
def test_uniform_causal_attention_to_a_start_marker_is_one_over_t_plus_one(T):
    values = torch.zeros(T, 1, dtype=torch.float64)
    values[0, 0] = 1.0
    zeros = torch.zeros(T, 4, dtype=torch.float64)
    out = attention.scaled_dot_product_attention(
        zeros, zeros, values, mask=attention.causal_mask(T)
    )[:, 0]
    t = torch.arange(T, dtype=torch.float64)
    assert torch.allclose(out, 1 / (t + 1), rtol=0, atol=1e-15)
    # its steps shrink as 1/((t+1)(t+2)): unequal steps (moved from 1.1's BOS cell)
    gap_next = 1 / ((t[:-1] + 1) * (t[:-1] + 2))
    assert torch.allclose(-torch.diff(out), gap_next, rtol=0, atol=1e-15)


# --- 1.2 and 1.3 scalar codes -----------------------------------------------------------


def test_index_code_half_unseen_and_pos_over_n_steps_depend_on_n():
    idx = positional.index_encoding(100)[:, 0]
    seen = positional.index_encoding(50)[:, 0]
    assert np.mean(~np.isin(idx, seen)) == 0.5
    for N in (5, 10, 100):
        enc = positional.normalized_index_encoding(N)[:, 0]
        assert np.allclose(np.diff(enc), 1 / N, rtol=0, atol=1e-15)
    enc5 = positional.normalized_index_encoding(5)[:, 0]
    enc10 = positional.normalized_index_encoding(10)[:, 0]
    # moved from section 1.3's cell (session 5): one value, two positions
    assert enc5[2] == enc10[4] == 0.4 and enc10[2] == 0.2
    # section 1.2 (session 5): the index outgrows a 64-channel embedding's norm, about
    # std * sqrt(64), from position 9 (std 1) or 1 (std 0.02), inside the trained 0 ... 49
    for std, first in ((1.0, 9), (0.02, 1)):
        assert int(idx[idx > std * 8].min()) == first < seen.max()


def test_drawn_std1_norms_sit_a_little_below_8_so_the_index_passes_them_at_8_or_9():
    # section 1.2 (s41 expert): std * sqrt(64) = 8 is passed from position 9, but the norms of
    # drawn std-1 64-channel embeddings are a little smaller (median 7.957, 52% below 8), so the
    # index passes half of them at 8 and nearly all at 9: "from position 8 or 9"
    norms = np.linalg.norm(np.random.default_rng(45).standard_normal((100_000, 64)), axis=1)
    assert 7.9 < np.median(norms) < 8 and 0.5 < np.mean(norms < 8) < 0.55
    assert np.mean(norms < 9) > 0.9
    # the chapter's own 1,000 draws: median 7.95, passed from position 8
    chapter_norms = np.linalg.norm(np.random.default_rng(3).standard_normal((1000, 64)), axis=1)
    assert round(float(np.median(chapter_norms)), 2) == 7.95


def test_past_the_drawn_median_norm_the_index_dominates_the_median_std1_token():
    # section 1.2 (moved from its cell, s97 expert): from position 8, where the index passes the
    # drawn std-1 embeddings' median norm (7.95), the sum e + pos u_0 points mostly along channel 0:
    # within 45 degrees of it for the median token, at every position up to 99
    idx = positional.index_encoding(100)[:, 0]
    e64 = np.random.default_rng(3).standard_normal((1000, 64))
    first_drawn = int(idx[idx > np.median(np.linalg.norm(e64, axis=1))].min())
    cos_0 = [
        np.median((e64[:, 0] + pos) / np.linalg.norm(e64 + pos * np.eye(64)[0], axis=1))
        for pos in range(first_drawn, 100)
    ]
    assert first_drawn == 8 and min(cos_0) > 1 / np.sqrt(2)


# --- 1.9-1.10 a scalar next to the embedding (section numbers as of session 22) ------------------


def _nearest_code_accuracy(codes, n_tokens, gen):
    N, d = codes.shape
    x = gen.standard_normal((n_tokens, N, d)) + codes
    score = x @ codes.T - 0.5 * (codes**2).sum(axis=1)
    return float(np.mean(score.argmax(axis=-1) == np.arange(N)))


def test_scalar_share_falls_like_one_over_d_and_a_vectors_varying_part_is_small():
    gen = np.random.default_rng(40)
    N = 10
    p = positional.normalized_index_encoding(N)[:, 0]
    shares, vec_shares, varying = [], [], []
    for d in (4, 16, 64, 256):
        e = gen.standard_normal((500, 1, d))
        scalar = np.zeros((N, d))
        scalar[:, 0] = p
        vector = positional.sinusoidal_encoding(N, d)
        shares.append(500 * (scalar**2).sum() / ((e + scalar) ** 2).sum())
        vec_shares.append(500 * (vector**2).sum() / ((e + vector) ** 2).sum())
        varying.append(500 * ((vector - vector.mean(0)) ** 2).sum() / ((e + vector) ** 2).sum())
    assert np.all(np.diff(shares) < 0)
    predicted = [np.mean(p**2) / (d + np.mean(p**2)) for d in (4, 16, 64, 256)]
    assert np.allclose(shares, predicted, rtol=0.05)
    assert np.allclose(vec_shares, 1 / 3, atol=0.02)
    # a third in all, but only about 5% varies with position from d = 64 on (N = 10)
    assert np.all(np.array(varying[2:]) < 0.07) and varying[0] > 0.1


@pytest.mark.parametrize("d", [4, 256])
def test_scalar_readout_is_the_same_at_every_d_and_matches_theory(d):
    # the chapter's "about 14% of the time at every size (0.136 predicted)"; theory in
    # exercises.ch1_position
    N = 10
    codes = np.zeros((N, d))
    codes[:, 0] = positional.normalized_index_encoding(N)[:, 0]
    acc = _nearest_code_accuracy(codes, 1000, np.random.default_rng(41))
    assert abs(acc - scalar_readout_accuracy(N)) < 0.02
    assert 1 / N < acc < 0.2


def test_with_std_002_content_the_scalar_is_read_back_almost_always():
    # section 1.10's scale table: half the gap, 0.05, is 2.5 standard deviations of 0.02 noise
    N, gen = 10, np.random.default_rng(43)
    codes = np.zeros((N, 64))
    codes[:, 0] = positional.normalized_index_encoding(N)[:, 0]
    x = 0.02 * gen.standard_normal((1000, N, 64)) + codes
    score = x @ codes.T - 0.5 * (codes**2).sum(axis=1)
    acc = float(np.mean(score.argmax(axis=-1) == np.arange(N)))
    phi = 0.5 * (1 + torch.erf(torch.tensor(2.5 / np.sqrt(2), dtype=torch.float64))).item()
    predicted = ((N - 2) * (2 * phi - 1) + 2 * phi) / N
    assert round(predicted, 3) == 0.989
    assert abs(acc - predicted) < 0.01


@pytest.mark.parametrize(
    ("N", "std", "predicted_quoted", "measured_quoted"),
    [(100, 0.02, 0.205, 0.206), (10, 0.16, 0.321, 0.310)],
)
def test_scalar_readout_at_the_two_models_scales(N, std, predicted_quoted, measured_quoted):
    """Section 1.10's verdict: 0.205 predicted at N = 100 (std 0.02, the book's models' scale) and
    0.321 at N = 10 (std 0.16, the sinusoidal model's 0.02 times sqrt(64), its d_model = 64 entry):
    the closed form, and a measurement with 20 times the chapter's 5,000 guesses (standard error
    about 0.0015)."""
    p = positional.normalized_index_encoding(N)[:, 0]
    z = 1 / (2 * N) / std  # half the gap between codes, in standard deviations
    phi = 0.5 * (1 + math.erf(z / math.sqrt(2)))
    predicted = ((N - 2) * (2 * phi - 1) + 2 * phi) / N
    assert round(predicted, 3) == predicted_quoted
    x = p[:, None] + std * np.random.default_rng(44).standard_normal((100_000 // N, N, 1))
    acc = float(np.mean(np.abs(x - p).argmin(axis=-1) == np.arange(N)))
    assert abs(acc - predicted) < 0.01 and abs(acc - measured_quoted) < 0.02


def test_under_the_sinusoidal_models_sqrt_d_scaling_the_scalar_fades_with_d_model():
    """Section 1.10's third verdict bullet and Summary: with the package's sinusoidal model the
    token embeddings have std 0.02 sqrt(d_model) (cold read s6, D1), so the oracle's closed form
    falls 0.810, 0.521, 0.321, 0.212, 0.156 over d_model = 4 ... 1024; a measurement with 40,000
    guesses per size (standard error about 0.0025) agrees, and falls at every step."""
    N, p = 10, positional.normalized_index_encoding(10)[:, 0]
    gen, predicted, measured = np.random.default_rng(51), [], []
    for d in (4, 16, 64, 256, 1024):
        std = 0.02 * math.sqrt(d)
        phi = 0.5 * (1 + math.erf(1 / (2 * N) / std / math.sqrt(2)))
        predicted.append(((N - 2) * (2 * phi - 1) + 2 * phi) / N)
        x = p[:, None] + std * gen.standard_normal((40_000 // N, N, 1))  # channel 0 decides
        measured.append(float(np.mean(np.abs(x - p).argmin(axis=-1) == np.arange(N))))
    assert [round(v, 3) for v in predicted] == [0.810, 0.521, 0.321, 0.212, 0.156]
    assert np.all(np.abs(np.array(measured) - predicted) < 0.01)
    assert np.all(np.diff(measured) < 0)


def test_projecting_out_the_mean_restores_the_causal_average_shrinkage():
    # the cut no-start-token cue (more below): W_V = I - u u^T centres the values
    T, d, B = 32, 64, 1000
    gen = np.random.default_rng(7)
    mu = np.ones(d)
    e = gen.standard_normal((B, T, d)) + mu
    u = mu / np.linalg.norm(mu)
    proj = np.eye(d) - np.outer(u, u)
    mean_raw = np.cumsum(e, axis=1) / np.arange(1, T + 1)[:, None]
    mean_proj = np.cumsum(e @ proj, axis=1) / np.arange(1, T + 1)[:, None]
    ratio_raw = np.linalg.norm(mean_raw, axis=-1).mean(0)
    ratio_proj = np.linalg.norm(mean_proj, axis=-1).mean(0)
    assert ratio_raw[-1] / ratio_raw[0] > 0.65  # the raw average levels off near mu
    assert np.isclose(ratio_proj[-1] / ratio_proj[0], 1 / np.sqrt(T), rtol=0.03)


def test_sinusoid_is_read_back_better_as_d_grows():
    N, gen = 10, np.random.default_rng(42)
    accs = [
        _nearest_code_accuracy(positional.sinusoidal_encoding(N, d), 300, gen)
        for d in (4, 64, 1024)
    ]
    assert accs[0] < accs[1] < accs[2] and accs[2] > 0.9


def test_model_scales_token_embeddings_by_sqrt_d_for_the_sinusoid_only():
    from mini_transformer.model import TransformerConfig, TransformerLM

    idx = torch.tensor([[3, 1, 4, 1, 5]])
    for scheme, factor in (("sinusoidal", 8.0), ("learned", 1.0), ("none", 1.0)):
        torch.manual_seed(0)
        cfg = TransformerConfig(
            vocab_size=16, block_size=8, d_model=64, n_heads=4, n_layers=1, positional=scheme
        )
        lm = TransformerLM(cfg).eval()
        got = {}
        hook = lm.blocks[0].register_forward_pre_hook(lambda m, a, g=got: g.update(x=a[0]))
        with torch.no_grad():
            lm(idx)
            hook.remove()
            tok = lm.tok_emb(idx)
            if scheme == "sinusoidal":
                pos = torch.from_numpy(positional.sinusoidal_encoding(5, 64)).float()
            elif scheme == "learned":
                pos = lm.pos_emb.weight[:5]
            else:
                pos = torch.zeros(5, 64)
        assert torch.allclose(got["x"] - pos, factor * tok, rtol=0, atol=1e-5), scheme


# --- 1.4 requirement 6 ---------------------------------------------------------------------


def test_orthogonal_generator_makes_dot_products_depend_on_offset_only():
    gen = np.random.default_rng(11)
    M1, _ = np.linalg.qr(gen.standard_normal((6, 6)))
    p0 = gen.standard_normal(6)
    codes = [np.linalg.matrix_power(M1, pos) @ p0 for pos in range(40)]
    for k in (1, 3, 7):
        dots = [codes[pos + k] @ codes[pos] for pos in range(40 - k)]
        assert np.ptp(dots) < 1e-10, k


# --- 1.5 binary ------------------------------------------------------------------------------


def test_binary_bits_flip_every_two_to_the_k_and_wrap_around():
    bits = positional.binary_encoding(64, 6)
    for k in range(6):
        flips = np.flatnonzero(np.diff(bits[:, k])) + 1
        assert np.array_equal(flips, np.arange(2**k, 64, 2**k)), k
    wrapped = positional.binary_encoding(100, 6)
    assert np.array_equal(wrapped[64], wrapped[0])


def test_binary_steps_are_sqrt_of_one_plus_trailing_ones():
    bits = positional.binary_encoding(64, 6)
    steps = np.linalg.norm(np.diff(bits, axis=0), axis=1)
    trailing = np.array([len(bin(p)) - len(bin(p).rstrip("1")) for p in range(63)])
    assert np.allclose(steps, np.sqrt(1 + trailing), rtol=0, atol=1e-15)
    assert np.isclose(np.linalg.norm(bits, axis=1)[63], np.sqrt(6))


def test_sinusoid_steps_are_equal_and_binary_steps_reach_sqrt6():
    # the claim of the former Exercise 2 (neighbour distances)
    sin_steps = np.linalg.norm(np.diff(positional.sinusoidal_encoding(50, 16), axis=0), axis=1)
    bin_steps = np.linalg.norm(np.diff(positional.binary_encoding(50, 16), axis=0), axis=1)
    assert np.ptp(sin_steps) < 1e-12
    assert np.isclose(bin_steps.max(), np.sqrt(6))


# --- 1.6 circles -----------------------------------------------------------------------------


def test_first_sinusoid_pair_is_the_unit_circle_turning_by_one_radian():
    pe = positional.sinusoidal_encoding(32, 2)
    pos = np.arange(32)
    assert np.allclose(pe, np.stack([np.sin(pos), np.cos(pos)], axis=1), rtol=0, atol=1e-13)
    props = positional.encoding_properties(pe)
    assert props["norm_spread"] < 1e-12
    assert np.isclose(props["neighbour_distance_min"], 2 * np.sin(0.5), atol=1e-12)
    assert np.allclose(
        [props["neighbour_angle_min"], props["neighbour_angle_max"]], 1.0, rtol=0, atol=1e-12
    )


def _nearest_offset(pe):
    dist = np.linalg.norm(pe[:, None] - pe[None, :], axis=-1)
    dist[np.tril_indices(len(pe))] = np.inf
    a, b = np.unravel_index(np.argmin(dist), dist.shape)
    return dist[a, b], int(b - a)


@pytest.mark.parametrize(
    ("d", "offset", "distance"), [(2, 44, 0.018), (8, 63, 0.645), (16, 1, 1.015)]
)
def test_nearest_offsets_quoted_in_section_1_6_and_every_pair_at_that_offset_ties(
    d, offset, distance
):
    # section 1.6 reports offsets, not pairs: on circles the distance depends on the offset
    # alone, so argmin's pair is an arbitrary pick among ties (s7 expert D5)
    pe = positional.sinusoidal_encoding(100, d)
    closest, found = _nearest_offset(pe)
    assert found == offset and round(closest, 3) == distance
    full = np.linalg.norm(pe[:, None] - pe[None, :], axis=-1)
    ties = np.diagonal(full, offset=offset)
    assert len(ties) == 100 - offset and np.ptp(ties) < 1e-12


def test_four_circles_at_offset_63_distance_is_the_root_sum_square_of_the_chords():
    # moved from section 1.6's cell (session 5): |p_(pos+63) - p_pos|^2 = sum of the four
    # circles' squared chords 2 sin(turn / 2), and 63 is 10.03 and 1.003 turns of the fast two
    pe = positional.sinusoidal_encoding(100, 8)
    speeds = 10000.0 ** (-np.arange(0, 8, 2) / 8)
    turns = np.abs((63 * speeds + np.pi) % (2 * np.pi) - np.pi)
    chords = 2 * np.sin(turns / 2)
    assert np.isclose(np.hypot.reduce(chords), np.linalg.norm(pe[63] - pe[0]), rtol=1e-12)
    assert np.allclose(63 * speeds[:2] / (2 * np.pi), [10.027, 1.003], atol=5e-4)


def test_rotating_p0_by_one_radian_is_the_packages_first_circle():
    # moved from section 1.6's cell (session 5): p_(pos+1) = R p_pos from (0, 1) is
    # positional.sinusoidal_encoding(32, 2)
    R = np.array([[np.cos(1.0), np.sin(1.0)], [-np.sin(1.0), np.cos(1.0)]])
    points = [np.array([0.0, 1.0])]
    for _ in range(31):
        points.append(R @ points[-1])
    assert np.allclose(points, positional.sinusoidal_encoding(32, 2), rtol=0, atol=1e-13)


def test_requirement_6_holds_for_the_raw_dot_product_not_under_a_random_projection():
    # section 1.4 scopes requirement 6 to the raw dot product (W_Q W_K^T = I): for the
    # sinusoid p_(pos+k)^T A p_pos depends on k alone at A = I, but not for a random A
    pe = positional.sinusoidal_encoding(100, 16)
    A = np.random.default_rng(0).standard_normal((16, 16))

    def spread(A):
        return max(np.ptp(np.einsum("ij,jk,ik->i", pe[k:], A, pe[:-k])) for k in range(1, 100))

    assert spread(np.eye(16)) < 1e-12
    assert spread(A) > 1.0


# --- 1.12 scoring ---------------------------------------------------------------------------------

TOL = 1e-9
SHORT, LONG, D = 10, 100, 16


def _learned_table():
    torch.manual_seed(0)
    # init_std as in the package's TransformerLM, which the chapter scores
    table = positional.LearnedPositionalEmbedding(max_len=100, d_model=D, init_std=0.02)

    def learned(n):
        x = torch.zeros(1, n, D)
        return (table(x)[0] - x[0]).detach().double().numpy()

    return learned


def _shift_residual(pe, k=1):
    M, *_ = np.linalg.lstsq(pe[:-k], pe[k:], rcond=None)
    return np.abs(pe[:-k] @ M - pe[k:]).max()


def _offset_dot_spread(pe):
    # how much p_(pos+k) . p_pos varies over pos, at the worst offset k = 1 .. n - 1: 0 when it
    # depends on the offset alone (requirement 6 as the chapter states and tests it)
    return max(np.ptp((pe[k:] * pe[:-k]).sum(axis=1)) for k in range(1, len(pe)))


def _nearest_pair(pe):
    # the closest two different rows, by brute force over all pairs
    return min(np.linalg.norm(pe[i] - pe[j]) for i in range(len(pe)) for j in range(i))


def _score(encode):
    pe_s, pe_l = encode(SHORT), encode(LONG)
    a, b = positional.encoding_properties(pe_s), positional.encoding_properties(pe_l)
    try:
        longer = encode(2 * LONG)
        extends = np.array_equal(longer[:LONG], pe_l)
    except ValueError:
        extends = False
    try:  # the largest entry at N = 1000; None (n/a) where the code has no row that far
        far_max = np.abs(encode(1000)).max()
    except ValueError:
        far_max = None
    return {
        "unique": a["unique"]
        and b["unique"]
        and _nearest_pair(pe_l) >= 0.5 * b["neighbour_distance_min"],
        "bounded": None if far_max is None else far_max <= 1.5 * a["max_abs"],
        "equal norm": max(a["norm_spread"], b["norm_spread"]) < TOL,
        "equal step": max(a["neighbour_distance_spread"], b["neighbour_distance_spread"]) < TOL,
        "length-independent": np.array_equal(pe_l[:SHORT], pe_s) and extends,
        "relative": _offset_dot_spread(pe_l) < TOL,
        "d_model dims": a["dim"] == D,
    }, (a, b)


ENCODINGS = {
    "index": positional.index_encoding,
    "pos/N": positional.normalized_index_encoding,
    "binary": lambda n: positional.binary_encoding(n, 6),
    "sinusoidal": lambda n: positional.sinusoidal_encoding(n, D),
}
EXPECTED_FAILURES = {
    "index": {"bounded", "equal norm", "relative", "d_model dims"},
    "pos/N": {"equal norm", "length-independent", "relative", "d_model dims"},
    "binary": {"unique", "equal norm", "equal step", "relative", "d_model dims"},
    "sinusoidal": set(),
    # at random initialisation; four of the seven requirements, as the chapter says
    "learned": {"equal norm", "equal step", "length-independent", "relative"},
}
# scored n/a (None): the learned table has no row at N = 1000, so "bounded" is not measured
EXPECTED_NOT_MEASURED = {"learned": {"bounded"}}


@pytest.fixture(scope="module")
def scored():
    encodings = dict(ENCODINGS, learned=_learned_table())
    return {name: _score(encode) for name, encode in encodings.items()}


def test_the_scalar_codes_of_sections_1_2_1_3_and_exercise_4_keep_the_failures_of_pos_over_n():
    # the scalar codes of 1.4 to 1.6 (plain, centred at energy D/2; and Exercise 4's copy in every
    # channel) keep the failures of pos/N: unequal norms, length dependence, no linear shift
    # (as D-dimensional codes, so the construction column passes)
    def in_channel_0(n):
        pe = np.zeros((n, D))
        pe[:, 0] = positional.normalized_index_encoding(n)[:, 0]
        return pe

    def centred(n):
        pe = in_channel_0(n)
        pe[:, 0] = (pe[:, 0] - pe[:, 0].mean()) * np.sqrt((D / 2) / np.var(pe[:, 0]))
        return pe

    def every_channel(n):
        return np.repeat(positional.normalized_index_encoding(n), D, axis=1)

    for encode in (in_channel_0, centred, every_channel):
        s, _ = _score(encode)
        assert {r for r, ok in s.items() if ok is not None and not ok} == {
            "equal norm",
            "length-independent",
            "relative",
        }, encode.__name__


def test_each_encoding_fails_exactly_the_requirements_the_chapter_names(scored):
    for name, (s, _) in scored.items():
        failed = {r for r, ok in s.items() if ok is not None and not ok}
        assert failed == EXPECTED_FAILURES[name], name
        assert {r for r, ok in s.items() if ok is None} == EXPECTED_NOT_MEASURED.get(name, set())


def test_relative_column_checks_every_offset_not_only_the_first_three():
    # a code whose dot products depend on the offset alone at k = 1, 2, 3 but not beyond: its
    # Gram matrix is 2 I plus small random entries at |i - j| >= 4 (positive definite by
    # Gershgorin), and its rows are the Cholesky factor's rows
    gen = np.random.default_rng(3)
    n = LONG
    far = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :]) >= 4
    noise = np.triu(gen.uniform(-0.01, 0.01, (n, n)), 1)
    gram = 2 * np.eye(n) + (noise + noise.T) * far
    pe = np.linalg.cholesky(gram)  # (n, n), pe @ pe.T = gram
    first_three = max(np.ptp((pe[k:] * pe[:-k]).sum(axis=1)) for k in (1, 2, 3))
    assert first_three < 1e-12  # the old test (k = 1, 2, 3) would pass it
    assert _offset_dot_spread(pe) > 0.01  # the chapter's test (every k) fails it
    assert _offset_dot_spread(positional.sinusoidal_encoding(LONG, D)) < 1e-12


def test_every_requirement_is_failed_by_some_encoding_and_only_the_sinusoid_passes(scored):
    # requirement 7 (d_model dims) is a construction choice: shown, but no pass or fail uses it
    tested = [r for r in next(iter(scored.values()))[0] if r != "d_model dims"]
    assert len(tested) == 6
    for r in tested:
        assert any(s[r] is not None and not s[r] for s, _ in scored.values()), r
    assert [n for n, (s, _) in scored.items() if all(s[r] for r in tested)] == ["sinusoidal"]


def test_tolerance_separates_rounding_from_real_spreads(scored):
    spreads = [
        pr[key]
        for _, props in scored.values()
        for pr in props
        for key in ("norm_spread", "neighbour_distance_spread")
    ]
    spreads += [
        abs(a[k] - b[k])
        for _, (a, b) in scored.values()
        for k in ("neighbour_distance_min", "neighbour_distance_max")
    ]
    assert all(s < TOL or s >= 1e-3 for s in spreads), sorted(spreads)


def test_bounded_column_rejects_logarithmic_growth_and_relative_column_needs_offset_only_dots():
    # D8 of the 2026-11-28 review: the bounded test must fail a code whose entries grow like
    # log(pos), and the relative test must fail a code with an exact linear (non-orthogonal)
    # shift map, whose dot products depend on pos
    def log_code(n):
        return np.log1p(np.arange(n, dtype=float))[:, None].repeat(D, axis=1)

    def stretched(n):
        return np.array([1.05**pos * positional.sinusoidal_encoding(1, D)[0] for pos in range(n)])

    assert not _score(log_code)[0]["bounded"]
    assert not _score(stretched)[0]["relative"]
    assert _offset_dot_spread(positional.sinusoidal_encoding(LONG, D)) < 1e-12


def test_binary_largest_step_grows_with_n(scored):
    short, long = scored["binary"][1]
    assert short["neighbour_distance_max"] == 2.0  # 7 -> 8 flips four bits
    assert np.isclose(long["neighbour_distance_max"], np.sqrt(6), rtol=0, atol=1e-15)


def test_shift_map_exact_for_sinusoid_absent_for_learned_table_past_d_model():
    learned = _learned_table()
    assert _shift_residual(positional.sinusoidal_encoding(LONG, D)) < 1e-12
    assert _shift_residual(learned(LONG)) > 0.05
    # at N = 10 (9 equations in 16 dimensions) even random rows have an exact shift map,
    # which is why the chapter scores this column at N = 100 only
    assert _shift_residual(learned(SHORT)) < TOL


# --- second cold read: claims added to the chapter ----------------------------------------


def _centred(N, d):
    """pos/N in channel 0, centred and scaled to the sinusoid's position-varying energy."""
    p = positional.normalized_index_encoding(N)[:, 0]
    sin = positional.sinusoidal_encoding(N, d)
    varying = np.mean(((sin - sin.mean(0)) ** 2).sum(axis=1))
    codes = np.zeros((N, d))
    codes[:, 0] = (p - p.mean()) * np.sqrt(varying / np.var(p))
    return codes


def _random_table(table, N, d):
    """A Gaussian table (an untrained learned table) scaled to the sinusoid's varying energy."""
    sin = positional.sinusoidal_encoding(N, d)
    varying = np.mean(((sin - sin.mean(0)) ** 2).sum(axis=1))
    return table * np.sqrt(varying / np.mean(((table - table.mean(0)) ** 2).sum(axis=1)))


def _section_1_11_readout():
    """Section 1.11's oracle table and Appendix A.5's class-mean table, recomputed with the
    chapter's generators and order of draws: section 1.11 draws noise then table (seed 5);
    A.5 draws new noise then the class-mean reader's training data (seed 15)."""
    gen, gen_cm, out, all_codes = np.random.default_rng(5), np.random.default_rng(15), {}, {}
    sizes = [(N, d) for N in (10, 100) for d in (4, 16, 64, 256, 1024)]
    for N, d in sizes:
        p = positional.normalized_index_encoding(N)[:, 0]
        e = gen.standard_normal((5000 // N, N, d))
        scalar = np.zeros((N, d))
        scalar[:, 0] = p
        all_codes[N, d] = codes = {
            "scalar": scalar,
            "centred": _centred(N, d),
            "random": _random_table(gen.standard_normal((N, d)), N, d),
            "sinusoid": positional.sinusoidal_encoding(N, d),
        }
        for name, pe in codes.items():
            # |x - r|^2 up to |x|^2, which is the same for every candidate r
            dist = (pe**2).sum(axis=1) - 2 * np.einsum("tnd,md->tnm", e + pe, pe)
            off = np.abs(dist.argmin(axis=-1) - np.arange(N))  # how far off each guess is
            out[name, "oracle", N, d] = float(np.mean(off == 0))
            out[name, "mean error", N, d] = float(off.mean())
    for N, d in sizes:
        e = gen_cm.standard_normal((5000 // N, N, d))
        learn = gen_cm.standard_normal((1024 // N, N, d))
        for name, pe in all_codes[N, d].items():
            means = (learn + pe).mean(axis=0)  # nearest class mean, estimated
            dist = (means**2).sum(axis=1) - 2 * np.einsum("tnd,md->tnm", e + pe, means)
            out[name, "learned", N, d] = float(np.mean(dist.argmin(axis=-1) == np.arange(N)))
    return out


def test_section_1_11_readout_numbers_quoted_in_the_prose():
    # "0.564 (sinusoid) and 0.786 (random table) against 0.383 at N = 10, d_model = 64;
    # 0.990 and 1.000 against 0.212 at N = 100, 1024"; A.5: "it reads the sinusoid 0.673".
    # At N = 100, d_model = 4 the chapter's single draw has the sinusoid 0.009 ahead (the
    # 30-seed mean is pinned below)
    r = _section_1_11_readout()
    quoted = {
        ("sinusoid", "oracle", 10, 4): 0.264,
        ("random", "oracle", 10, 4): 0.315,
        ("centred", "oracle", 10, 4): 0.220,
        ("sinusoid", "oracle", 10, 64): 0.564,
        ("random", "oracle", 10, 64): 0.786,
        ("centred", "oracle", 10, 64): 0.383,
        ("sinusoid", "oracle", 100, 1024): 0.990,
        ("random", "oracle", 100, 1024): 1.000,
        ("centred", "oracle", 100, 1024): 0.212,
        ("sinusoid", "learned", 100, 1024): 0.673,
    }
    for key, value in quoted.items():
        assert round(r[key], 3) == value, key
    # section 1.11's mean error: "0.60 against the random table's 0.77 at N = 10"; A.4: "2.03
    # against 5.94 at N = 100"
    mean_error = {(10, "sinusoid"): 0.60, (10, "random"): 0.77, (100, "sinusoid"): 2.03,
                  (100, "random"): 5.94}  # fmt: skip
    for (N, name), value in mean_error.items():
        assert round(r[name, "mean error", N, 64], 2) == value, (N, name)
    tie = r["sinusoid", "oracle", 100, 4] - r["centred", "oracle", 100, 4]
    assert round(tie, 3) == 0.009


def test_at_n_100_d_4_the_sinusoid_beats_the_line_over_30_seeds():
    """Section 1.11's "by 0.012 on average over 30 seeds at N = 100, d_model = 4": the chapter's
    folded cell (seeds 100 ... 129, 5,000 guesses, 1,000 learning tokens). Cold read s6 (D2)
    found the earlier "tie" to be the low tail of a systematic win."""
    N, d = 100, 4
    codes = {"centred": _centred(N, d), "sinusoid": positional.sinusoidal_encoding(N, d)}
    margins = {"oracle": [], "learned": []}
    for seed in range(100, 130):
        g = np.random.default_rng(seed)
        e, learn = g.standard_normal((50, N, d)), g.standard_normal((10, N, d))
        hits = {}
        for name, pe in codes.items():
            for reader, ref in (("oracle", pe), ("learned", (learn + pe).mean(axis=0))):
                score = (e + pe) @ ref.T - 0.5 * (ref**2).sum(axis=1)
                hits[reader, name] = np.mean(score.argmax(axis=-1) == np.arange(N))
        for reader in margins:
            margins[reader].append(hits[reader, "sinusoid"] - hits[reader, "centred"])
    oracle = np.array(margins["oracle"])
    assert round(float(oracle.mean()), 3) == 0.012
    assert np.sum(oracle > 0) == 30
    learned = np.array(margins["learned"])
    assert learned.mean() > 3 * learned.std(ddof=1) / np.sqrt(30)


@pytest.mark.parametrize("seed", [61, 62, 63])
def test_by_mean_error_the_line_leads_at_4_and_16_the_sinusoid_at_64_the_table_from_256(seed):
    """Section 1.11 and A.4 (s48 expert): counted by how far off a guess is, the oracle's lead
    moves with d_model. On a fresh table and noise draw per seed, at N = 10 and 100: the matched
    line has the smallest mean |guess - position| at d_model 4 and 16, the sinusoid at 64, the
    random table at 256 and 1024; at 64 most of the sinusoid's misses land on a neighbour, few of
    the random table's; and the posterior median, the best guess for this error, ranks the
    sinusoid ahead of the random table at 64 too."""
    gen = np.random.default_rng(seed)
    for N in (10, 100):
        for d in (4, 16, 64, 256, 1024):
            e = gen.standard_normal((5000 // N, N, d))
            codes = {
                "line": _centred(N, d),
                "random": _random_table(gen.standard_normal((N, d)), N, d),
                "sinusoid": positional.sinusoidal_encoding(N, d),
            }
            error, near, median_error = {}, {}, {}
            for name, pe in codes.items():
                score = (e + pe) @ pe.T - 0.5 * (pe**2).sum(axis=1)  # log-likelihood + const
                off = np.abs(score.argmax(axis=-1) - np.arange(N))
                error[name], near[name] = off.mean(), np.sum(off == 1) / max(np.sum(off > 0), 1)
                post = np.exp(score - score.max(axis=-1, keepdims=True))
                cdf = np.cumsum(post / post.sum(axis=-1, keepdims=True), axis=-1)
                median = (cdf < 0.5).sum(axis=-1)  # the posterior median position
                median_error[name] = np.abs(median - np.arange(N)).mean()
            lead = "line" if d <= 16 else "sinusoid" if d == 64 else "random"
            assert min(error, key=error.get) == lead, (N, d, error)
            if d == 64:
                assert near["sinusoid"] > 0.5 > near["random"], (N, near)
                # A.4: "the sinusoid's nearest codes are its neighbours", for every code
                pe = codes["sinusoid"]
                dist = np.linalg.norm(pe[:, None] - pe[None, :], axis=-1)
                np.fill_diagonal(dist, np.inf)
                assert np.all(np.abs(dist.argmin(axis=1) - np.arange(N)) == 1)
                assert median_error["sinusoid"] < median_error["random"], (N, median_error)


def test_a_relu_key_needs_a_gain_growing_like_n_where_the_quadratic_key_needs_n_squared():
    """Appendix A.9 (s48 expert): with the key (j/N, relu((j - m)/N) for m < N) and the query
    beta (1, -2 at m = i - 1), the score -beta |j - (i - 1)| / N + const depends on beta/N only:
    gain 8N puts 0.9993 on key i - 1 at every N. The quadratic key (j/N, (j/N)^2) at the same
    gain 8N loses key i - 1 as N grows; it needs 8 N^2."""

    def smallest(keys, query_of_i, gain):
        worst = 1.0
        for i in range(1, len(keys)):
            s = gain * keys[: i + 1] @ query_of_i(i)  # keys j <= i
            w = np.exp(s - s.max())
            worst = min(worst, w[i - 1] / w.sum())
        return worst

    relu, quad = {}, {}
    for n in (40, 100, 1000):
        j = np.arange(n)[:, None]
        relu_keys = np.hstack([j / n, np.maximum(j - np.arange(n)[None, :], 0) / n])

        def relu_query(i, n=n):
            q = np.zeros(n + 1)
            q[0], q[i] = 1.0, -2.0
            return q

        quad_keys = np.hstack([j / n, (j / n) ** 2])
        relu[n] = smallest(relu_keys, relu_query, 8 * n)
        quad[n] = smallest(quad_keys, lambda i, n=n: np.array([2 * (i - 1) / n, -1.0]), 8 * n)
    assert all(round(w, 4) == 0.9993 for w in relu.values()), relu
    assert quad[40] > quad[100] > quad[1000] and quad[1000] < 0.1, quad


@pytest.mark.parametrize(("N", "d"), [(10, 4), (10, 16), (100, 4), (100, 16), (10, 64)])
def test_a_random_table_reads_back_as_well_as_the_sinusoid_or_better(N, d):
    # section 1.11's "the random table as much as the sinusoid or more", on 20,000 guesses and
    # 5 table draws, so that neither one lucky table nor the noise carries it
    gen = np.random.default_rng(46)
    sinusoid = _nearest_code_accuracy(positional.sinusoidal_encoding(N, d), 20_000 // N, gen)
    tables = [
        _nearest_code_accuracy(_random_table(gen.standard_normal((N, d)), N, d), 4000 // N, gen)
        for _ in range(5)
    ]
    assert np.mean(tables) > sinusoid - 0.005


@pytest.mark.parametrize(
    ("N", "d", "draws", "seed"),
    [(10, 4, 10, 47), (100, 4, 10, 47), (10, 16, 30, 48), (100, 16, 30, 48)],
)
def test_every_fresh_random_table_beats_the_sinusoid(N, d, draws, seed):
    # section 1.11 reads one table draw per cell ("one draw per cell"); at d_model = 4, where the
    # margins are smallest, the worst of 10 draws, and at d_model = 16 the worst of 30, still
    # beats the sinusoid, so the table's lead is not draw luck (10,000 guesses per draw:
    # standard error <= 0.005; the margins are several times that)
    gen = np.random.default_rng(seed)
    sinusoid = _nearest_code_accuracy(positional.sinusoidal_encoding(N, d), 20_000 // N, gen)
    tables = [
        _nearest_code_accuracy(_random_table(gen.standard_normal((N, d)), N, d), 10_000 // N, gen)
        for _ in range(draws)
    ]
    assert min(tables) > sinusoid, (min(tables), sinusoid)


@pytest.mark.parametrize(("N", "d"), [(10, 4), (10, 16), (100, 4), (100, 16)])
def test_sinusoid_beats_the_centred_scalar_at_equal_varying_energy_with_many_samples(N, d):
    # the smallest margins of section 1.11 (0.044 at N = 10, d = 4; 0.011 at N = 100, d = 4),
    # re-measured on 100,000 guesses: the sampling noise of a difference is then about 0.003
    gen = np.random.default_rng(44)
    centred = _nearest_code_accuracy(_centred(N, d), 100_000 // N, gen)
    sinusoid = _nearest_code_accuracy(positional.sinusoidal_encoding(N, d), 100_000 // N, gen)
    assert sinusoid > centred + 0.008
    # the centred line is the one-channel theory with half-gap c / (2N)
    step = _centred(N, d)[1, 0] - _centred(N, d)[0, 0]
    phi = 0.5 * (1 + torch.erf(torch.tensor(step / 2 / np.sqrt(2), dtype=torch.float64))).item()
    assert abs(centred - ((N - 2) * (2 * phi - 1) + 2 * phi) / N) < 0.006


@pytest.mark.parametrize("d", [64, 256, 1024])
def test_the_lines_step_shrinks_with_n_and_the_sinusoids_nearest_codes_do_not(d):
    # "tenfold at fixed energy and 6.2-fold here (3.06 to 0.50 at 1024, matched to the
    # sinusoid), while the sinusoid's nearest codes stay 5.21 apart"
    steps, nearest = [], []
    for N in (10, 100):
        sin = positional.sinusoidal_encoding(N, d)
        dist = np.linalg.norm(sin[:, None] - sin[None, :], axis=-1)[~np.eye(N, dtype=bool)]
        varying = np.mean(((sin - sin.mean(0)) ** 2).sum(axis=1))
        assert np.isclose(np.mean((_centred(N, d) ** 2).sum(axis=1)), varying)
        steps.append(_centred(N, d)[1, 0] - _centred(N, d)[0, 0])
        nearest.append(dist.min())
        assert steps[-1] < dist.min()
    assert steps[1] < steps[0] / 4 and np.isclose(nearest[0], nearest[1])
    if d == 1024:
        assert round(nearest[0], 2) == 5.21


def test_centring_changes_no_readout_and_the_sinusoid_mostly_spends_energy_on_its_mean():
    # moving every code by one vector changes no distance; at N = 10 about a sixth of the
    # sinusoid's d/2 varies with position (Appendix A.3's control at equal total energy)
    N, d = 10, 64
    sin = positional.sinusoidal_encoding(N, d)
    a = _nearest_code_accuracy(sin, 500, np.random.default_rng(3))
    b = _nearest_code_accuracy(sin - sin.mean(0), 500, np.random.default_rng(3))
    assert a == b
    varying = np.mean(((sin - sin.mean(0)) ** 2).sum(axis=1)) / (d / 2)
    assert 0.14 < varying < 0.19


def _probe_r2(x, y, x_test, y_test):
    a = np.c_[x, np.ones(len(x))]
    coef = np.linalg.lstsq(a, y, rcond=None)[0]
    pred = np.c_[x_test, np.ones(len(x_test))] @ coef
    return 1 - ((y_test - pred) ** 2).sum() / ((y_test - y_test.mean()) ** 2).sum()


@pytest.mark.parametrize(("d", "n"), [(8, 1024), (128, 1024), (256, 512)])
def test_untold_probe_loses_one_minus_r2_times_d_over_n_minus_d(d, n):
    # section 1.10's law for a least-squares probe of all channels, at sizes the chapter does not
    # use; averaged over 8 draws, whose R^2 varies by about 0.01 each
    N, gen = 10, np.random.default_rng(45)
    p = positional.normalized_index_encoding(N)[:, 0]
    best = np.var(p) / (np.var(p) + 1)

    def sample(m):
        y = p[gen.integers(0, N, m)]
        x = gen.standard_normal((m, d))
        x[:, 0] += y
        return x, y

    r2 = [_probe_r2(*sample(n), *sample(4096)) for _ in range(8)]
    assert abs(np.mean(r2) - (best - (1 - best) * d / (n - d))) < 0.015


def test_appendix_a1_probe_numbers_quoted_in_the_prose():
    # "R^2 0.075 at d_model = 4, 0.033 at 256, -0.053 at 1024": the chapter's generator and order
    gen, N = np.random.default_rng(2), 10
    p = positional.normalized_index_encoding(N)[:, 0]
    r2 = {}
    for d in (4, 16, 64, 256, 1024):

        def sample(m, d=d):
            y = p[gen.integers(0, N, m)]
            x = gen.standard_normal((m, d))
            x[:, 0] += y
            return x, y

        (x, y), (xt, yt) = sample(8192), sample(4096)
        if d in (4, 256, 1024):
            r2[d] = round(float(_probe_r2(x, y, xt, yt)), 3)
    assert r2 == {4: 0.075, 256: 0.033, 1024: -0.053}


def test_at_sixteen_dims_all_neighbour_pairs_tie_and_others_are_farther():
    pe = positional.sinusoidal_encoding(100, 16)
    dist = np.linalg.norm(pe[:, None] - pe[None, :], axis=-1)
    gap = np.abs(np.arange(100)[:, None] - np.arange(100)[None, :])
    assert np.ptp(dist[gap == 1]) < 1e-9
    assert dist[gap > 1].min() > dist[gap == 1].max() + 0.05


def test_equal_total_energy_real_sinusoid_against_centred_line_quoted_in_appendix_a3():
    # "At N = 10, d_model = 64 the line wins, 0.706 against 0.572 ... At N = 100 the sinusoid
    # wins, 0.491 against 0.084": the real sinusoid (total d/2) against the centred line scaled
    # to total d/2, the chapter's generator
    gen, out = np.random.default_rng(9), {}
    for N in (10, 100):
        p = positional.normalized_index_encoding(N)[:, 0]
        for d in (64, 1024):
            line = np.zeros((N, d))
            line[:, 0] = p - p.mean()
            line *= np.sqrt((d / 2) / np.mean((line**2).sum(axis=1)))
            e = gen.standard_normal((5000 // N, N, d))
            for name, c in (("line", line), ("sinusoid", positional.sinusoidal_encoding(N, d))):
                dist = (c**2).sum(axis=1) - 2 * np.einsum("tnd,md->tnm", e + c, c)
                out[name, N, d] = round(float(np.mean(dist.argmin(-1) == np.arange(N))), 3)
    assert out["line", 10, 64] == 0.706 and out["sinusoid", 10, 64] == 0.572
    assert out["sinusoid", 100, 64] == 0.491 and out["line", 100, 64] == 0.084
    # the sinusoid's total energy is d/2 at every length, so the two codes share one currency
    sin = positional.sinusoidal_encoding(10, 64)
    assert np.isclose(np.mean((sin**2).sum(axis=1)), 32, rtol=1e-12)


def _linear_readout_r2(pe, p):
    """Best linear read-out of pos/N from x = e + p_pos, e ~ N(0, I), with unlimited data:
    R^2 = c^T (I + Cov(p))^-1 c / var(pos/N), c = Cov(p, pos/N) (positions uniform)."""
    pc = pe - pe.mean(0)
    c = pc.T @ (p - p.mean()) / len(p)
    return float(c @ np.linalg.solve(np.eye(pe.shape[1]) + pc.T @ pc / len(p), c) / np.var(p))


@pytest.mark.parametrize(
    ("N", "d"), [(10, 4), (10, 16), (10, 64), (100, 16), (100, 64), (100, 256)]
)
def test_the_line_reads_how_far_along_best_at_equal_varying_energy(N, d):
    # Appendix A.4's second task, without sampling noise: the closed-form best linear read-out,
    # the line against the sinusoid and 10 random tables (no lucky draw carries it)
    p = positional.normalized_index_encoding(N)[:, 0]
    line = _linear_readout_r2(_centred(N, d), p)
    snr = np.var(_centred(N, d)[:, 0])  # one channel: R^2 = var / (var + 1)
    assert line == pytest.approx(snr / (snr + 1), abs=1e-12)
    gen = np.random.default_rng(47)
    tables = [
        _linear_readout_r2(_random_table(gen.standard_normal((N, d)), N, d), p) for _ in range(10)
    ]
    sinusoid = _linear_readout_r2(positional.sinusoidal_encoding(N, d), p)
    assert line > max(sinusoid, max(tables)) + 0.05


def test_appendix_a4_linear_readout_numbers_quoted_in_the_prose():
    # "R^2 0.841 against the sinusoid's 0.705 and the random table's 0.335 at N = 10,
    # d_model = 64; 0.929 against 0.715 and 0.089 at N = 100": the chapter's generator and draws
    gen, out = np.random.default_rng(12), {}
    for N in (10, 100):
        p = positional.normalized_index_encoding(N)[:, 0]
        for d in (16, 64):
            codes = {
                "centred": _centred(N, d),
                "random": _random_table(gen.standard_normal((N, d)), N, d),
                "sinusoid": positional.sinusoidal_encoding(N, d),
            }
            for name, pe in codes.items():
                pos = gen.integers(0, N, 20_000)
                a = np.c_[gen.standard_normal((20_000, d)) + pe[pos], np.ones(20_000)]
                pos_s = gen.integers(0, N, 10_000)
                a_s = np.c_[gen.standard_normal((10_000, d)) + pe[pos_s], np.ones(10_000)]
                w = np.linalg.lstsq(a, p[pos], rcond=None)[0]
                out[name, N, d] = 1 - np.mean((a_s @ w - p[pos_s]) ** 2) / np.var(p[pos_s])
    quoted = {
        ("centred", 10, 64): 0.841,
        ("sinusoid", 10, 64): 0.705,
        ("random", 10, 64): 0.335,
        ("centred", 100, 64): 0.929,
        ("sinusoid", 100, 64): 0.715,
        ("random", 100, 64): 0.089,
    }
    for key, value in quoted.items():
        assert round(out[key], 3) == value, key


def test_learned_reader_reads_the_plain_scalar_at_chance_from_256_on():
    # Appendix A.5: "near chance (0.1) from d_model = 256 on, 0.107 and 0.103"
    r = _section_1_11_readout()
    assert round(r["scalar", "learned", 10, 256], 3) == 0.107
    assert round(r["scalar", "learned", 10, 1024], 3) == 0.103


def test_with_std_002_content_the_scalar_at_n_100_is_read_back_a_fifth_of_the_time():
    # the verdict's "only 0.205 (predicted) at N = 100": the prediction against a simulation
    # of the nearest-code reader on 100,000 guesses (sampling noise about 0.0013)
    N, std = 100, 0.02
    p = positional.normalized_index_encoding(N)[:, 0]
    x = p + std * np.random.default_rng(48).standard_normal((1000, N))  # channel 0 only
    measured = np.mean(np.abs(x[..., None] - p).argmin(axis=-1) == np.arange(N))
    phi = 0.5 * (1 + math.erf(1 / (2 * N) / std / math.sqrt(2)))  # P(noise < half the gap)
    predicted = ((N - 2) * (2 * phi - 1) + 2 * phi) / N
    assert round(predicted, 3) == 0.205
    assert abs(measured - predicted) < 0.01


# --- moved off the reader's path in session 3 -------------------------------------------------


def test_uniform_causal_average_of_zero_mean_embeddings_shrinks_like_one_over_sqrt_t():
    """The cut aside "a cue without a start token": with zero-mean embeddings the causal average's
    norm shrinks like 1/sqrt(t + 1); with a non-zero mean, or a two-token vocabulary, it does not
    (it tends to the mean); a W_V that projects out the mean restores it (for two tokens, as a walk
    of +-1 steps, sqrt(2/pi)/sqrt(t + 1)). Uses the package's masked attention, as the aside did."""
    T, d, B = 32, 64, 2000
    gen = np.random.default_rng(7)
    emb = torch.from_numpy(gen.standard_normal((B, T, d)))
    zeros = torch.zeros(B, T, 4, dtype=torch.float64)  # uniform attention
    causal = attention.causal_mask(T)

    def avg_norm(values):
        out = attention.scaled_dot_product_attention(zeros, zeros, values, mask=causal)
        return out.norm(dim=-1).mean(0) / np.sqrt(d)  # (T,)

    t = torch.arange(T, dtype=torch.float64)
    assert torch.allclose(avg_norm(emb), 1 / torch.sqrt(t + 1), rtol=0.03)
    mu = torch.ones(d, dtype=torch.float64)
    norm_mu = avg_norm(emb + mu)
    assert norm_mu[-1] > 0.9 and norm_mu[-1] / norm_mu[0] > 0.65
    vocab2 = torch.from_numpy(gen.standard_normal((2, d)))
    emb2 = vocab2[torch.from_numpy(gen.integers(0, 2, (B, T)))]
    norm_2 = avg_norm(emb2)
    assert norm_2[-1] > 2 / np.sqrt(T)
    assert abs(norm_2[-1] - vocab2.mean(0).norm() / np.sqrt(d)) < 0.1

    def project_out(m):
        u = m / m.norm()
        return torch.eye(d, dtype=torch.float64) - torch.outer(u, u)

    ratio_mu = avg_norm((emb + mu) @ project_out(mu))
    ratio_2 = avg_norm(emb2 @ project_out(vocab2.mean(0)))
    assert np.isclose(float(ratio_mu[-1] / ratio_mu[0]), 1 / np.sqrt(T), rtol=0.03)
    assert np.isclose(float(ratio_2[-1] / ratio_2[0]), np.sqrt(2 / np.pi) / np.sqrt(T), rtol=0.05)


def test_exercise_5_mean_of_20_draws_is_on_the_predicted_loss():
    """Exercise 5's law for the mean (the solution averages 40 draws per n; one draw's spread at
    n = 5,977 is a third of the 0.01 loss it tests). The all-channel probe's R^2 over 20 draws of
    seed 2 is within 0.003 of best - (1 - best) d / (n - d) at n = 5,977, and 20 other seeds
    agree within 3 standard errors at n / 10 and n."""
    N, d, n_test = 10, 64, 4096
    p = np.arange(N) / N
    best = np.var(p) / (np.var(p) + 1)
    n_needed = int(np.ceil(d + (1 - best) * d / 0.01))
    assert n_needed == 5977

    def sample(n, g):
        y = p[g.integers(0, N, n)]
        x = g.standard_normal((n, d))
        x[:, 0] += y
        return x, y

    gen = np.random.default_rng(2)  # the solution's generator and order of draws
    for n in (n_needed // 10, n_needed):
        predicted = (1 - best) * d / (n - d)
        r2 = np.array([_probe_r2(*sample(n, gen), *sample(n_test, gen)) for _ in range(20)])
        other = np.array(
            [
                _probe_r2(*sample(n, g), *sample(n_test, g))
                for g in map(np.random.default_rng, range(100, 120))
            ]
        )
        if n == n_needed:
            assert abs(best - r2.mean() - predicted) < 0.003
        assert abs(best - other.mean() - predicted) < 3 * other.std(ddof=1) / np.sqrt(20)


def test_next_to_std_002_embeddings_the_probe_of_all_channels_reads_the_scalar():
    """Section 1.10's "probe 0.995 at 1024" next to std-0.02 embeddings: the best R^2 is
    var(p) / (var(p) + 0.0004) and fitting 1024 weights on 8,192 tokens costs under 0.001."""
    from sklearn.linear_model import LinearRegression

    N, d, n_train, n_test = 10, 1024, 8192, 4096
    p = positional.normalized_index_encoding(N)[:, 0]
    best = np.var(p) / (np.var(p) + 0.02**2)
    gen = np.random.default_rng(49)
    y = p[gen.integers(0, N, n_train + n_test)]
    x = 0.02 * gen.standard_normal((n_train + n_test, d))
    x[:, 0] += y
    r2 = LinearRegression().fit(x[:n_train], y[:n_train]).score(x[n_train:], y[n_train:])
    assert round(best, 3) == 0.995
    assert abs(r2 - (best - (1 - best) * d / (n_train - d))) < 0.002


@pytest.mark.parametrize("N", [10, 100])
def test_a_cross_validated_logistic_reader_keeps_the_order_and_does_not_beat_class_means(N):
    """Section 1.11's class-mean reader (Appendix A.5) is the nearest class mean. The
    fairer-looking control a
    reviewer asked for, a multinomial logistic regression with its penalty cross-validated, on
    the same number of tokens (1,024 // N per position, d_model = 64): it reads the sinusoid
    better than the line too, and no better than class means, which suit noise of equal
    spherical covariance (measured: 0.48 / 0.50 sinusoid, 0.30 / 0.32 line at N = 10)."""
    import warnings

    from sklearn.linear_model import LogisticRegressionCV

    d, gen, acc = 64, np.random.default_rng(50), {}
    y = np.tile(np.arange(N), 1024 // N)
    y_test = np.tile(np.arange(N), 2000 // N)
    for name, pe in (("line", _centred(N, d)), ("sinusoid", positional.sinusoidal_encoding(N, d))):
        x = (gen.standard_normal((1024 // N, N, d)) + pe).reshape(-1, d)
        x_test = (gen.standard_normal((2000 // N, N, d)) + pe).reshape(-1, d)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # lbfgs may stop at max_iter on the weakest penalty
            logit = LogisticRegressionCV(Cs=6, cv=3, max_iter=500).fit(x, y).score(x_test, y_test)
        means = x.reshape(1024 // N, N, d).mean(axis=0)
        nearest = ((x_test[:, None] - means) ** 2).sum(axis=-1).argmin(axis=-1)
        acc[name] = logit, float(np.mean(nearest == y_test))
    assert acc["sinusoid"][0] > acc["line"][0] + 0.1  # the order holds for this reader too
    assert all(logit <= means + 0.02 for logit, means in acc.values())


# --- by-construction facts the chapter prints (moved off its path, session 4) -------------


def test_the_bag_of_words_sums_agree_and_half_the_long_sentence_is_unseen():
    X_a, X_b = _sentences()
    assert np.allclose(X_a.sum(0), X_b.sum(0), rtol=0, atol=1e-12)  # addition commutes
    idx, seen = positional.index_encoding(100)[:, 0], positional.index_encoding(50)[:, 0]
    assert np.mean(~np.isin(idx, seen)) == 0.5
    # section 1.2's yardstick, against sampled embeddings rather than the formula std * sqrt(d):
    # the mean norm of 10,000 random 64-channel embeddings is within 1% of 8 (std 1) and
    # 0.16 (std 0.02), and position 80 is ten times the std-1 norm
    e = np.random.default_rng(3).standard_normal((10_000, 64))
    for std, quoted in ((1.0, 8.0), (0.02, 0.16)):
        assert abs(np.linalg.norm(std * e, axis=1).mean() / quoted - 1) < 0.01
    assert 80 >= 10 * 8.0 and idx[idx > 8.0].min() == 9 < seen.max()


def test_binary_position_zero_is_all_zeros_and_the_quoted_distances():
    bits = positional.binary_encoding(64, 6)
    assert not bits[0].any()

    def dist(a, b):
        return np.linalg.norm(bits[a] - bits[b])

    assert dist(7, 8) == 2.0 and dist(8, 10) == 1.0


def test_the_sinusoids_varying_part_is_small_at_n_10_and_grows_at_n_100():
    # the former section 1.4 figure's dashed line and its folded checks (seeds 4 and 15)
    gen = np.random.default_rng(4)
    p = positional.normalized_index_encoding(10)[:, 0]
    varying, shares = [], []
    for d in (4, 16, 64, 256, 1024):
        e = gen.standard_normal((500, 1, d))
        scalar = np.zeros((10, d))
        scalar[:, 0] = p
        vector = positional.sinusoidal_encoding(10, d)
        shares.append(d * 500 * (scalar**2).sum() / ((e + scalar) ** 2).sum())
        centred = vector - vector.mean(0)
        varying.append(500 * (centred**2).sum() / ((e + vector) ** 2).sum())
    assert np.all(np.array(varying[2:]) < 0.07)  # at N = 10 a vector shared by all positions
    assert np.allclose(shares[1:], np.mean(p**2), rtol=0.05)  # d x share = E[p^2]: 1/d law
    sin_100 = positional.sinusoidal_encoding(100, 64)
    e_100 = np.random.default_rng(15).standard_normal((500, 1, 64))
    centred = sin_100 - sin_100.mean(0)
    varying_100 = 500 * (centred**2).sum() / ((e_100 + sin_100) ** 2).sum()
    assert varying_100 > 2 * varying[2]


def test_the_scoring_passes_only_the_sinusoid_and_the_table_fails_four(scored):
    tested = [r for r in next(iter(scored.values()))[0] if r != "d_model dims"]
    passing = [n for n, (s, _) in scored.items() if all(s[r] for r in tested)]
    assert passing == ["sinusoidal"]
    table = next(s for n, (s, _) in scored.items() if n.startswith("learned"))
    assert sum(1 for r in tested if table[r] is not None and not table[r]) == 4


def test_exercise_1_wraps_and_exercise_4_code_is_zero_at_0_and_depends_on_n():
    codes = positional.binary_encoding(20, 3)
    assert np.array_equal(codes[8], codes[0]) and np.array_equal(codes[19], codes[3])
    copies = {n: np.repeat(positional.normalized_index_encoding(n), 16, axis=1) for n in (5, 10)}
    assert not copies[10][0].any()
    assert not np.allclose(copies[5][1], copies[10][1])


def test_a_random_tables_nearest_codes_are_farther_apart_than_the_sinusoids():
    # section 1.11's "the sinusoid's 5.21, the random table's 18.58" at N = 100, d_model = 1024, on
    # another table: the chapter's generator with an older order of draws (noise, table, the
    # class-mean reader's data) gives 18.73; the random table stays far ahead of the sinusoid
    gen = np.random.default_rng(5)
    for N in (10, 100):
        for d in (4, 16, 64, 256, 1024):
            gen.standard_normal((5000 // N, N, d))
            table = _random_table(gen.standard_normal((N, d)), N, d)
            gen.standard_normal((1024 // N, N, d))

    def nearest(codes):
        gaps = np.linalg.norm(codes[:, None] - codes[None, :], axis=-1)
        return gaps[~np.eye(len(codes), dtype=bool)].min()

    sinusoid = positional.sinusoidal_encoding(100, 1024)
    assert round(nearest(sinusoid), 2) == 5.21 and round(nearest(table), 2) == 18.73


# --- session 4, second pass (cold reads s9) ----------------------------------------------


def test_at_std_002_the_scalars_energy_share_at_1024_is_the_predicted_0_41():
    # moved from section 1.10's former folded cell (seed 14): at std 0.02 the scalar's measured
    # share of the energy at d_model = 1024 is the predicted 0.41 (E|e|^2 = 0.0004 d)
    p = positional.normalized_index_encoding(10)[:, 0]
    e = 0.02 * np.random.default_rng(14).standard_normal((500, 1, 1024))
    scalar = np.zeros((10, 1024))
    scalar[:, 0] = p
    share = 500 * (scalar**2).sum() / ((e + scalar) ** 2).sum()
    predicted = np.mean(p**2) / (0.0004 * 1024 + np.mean(p**2))
    assert round(predicted, 2) == 0.41 and abs(share - predicted) < 0.02


def test_a_learned_table_fails_length_independence_at_any_size_one_row_past_it():
    # section 1.12's note: the ✗ is by construction, not an artefact of max_len = 100; a table of
    # 1,000 rows passes the chapter's probe at N = 200 and is bounded at N = 1000, but has no
    # row 1,000 either
    torch.manual_seed(0)
    big = positional.LearnedPositionalEmbedding(max_len=1000, d_model=D, init_std=0.02)
    rows = big(torch.zeros(1, 1000, D))[0].detach()
    assert rows.shape == (1000, D) and torch.equal(big(torch.zeros(1, 200, D))[0], rows[:200])
    with pytest.raises(ValueError):
        big(torch.zeros(1, 1001, D))


def test_four_circles_fail_at_63_because_the_fast_circles_come_back_and_the_slow_barely_turn():
    # section 1.6: at d_model = 8 the speeds are 1, 0.1, 0.01, 0.001; at offset 63 (near 20 pi)
    # the two fast circles are within 0.2 of where they started, and the two slow ones have moved
    # less (0.62 in all) than the fast circle moves in one step (0.959)
    omega = 10000.0 ** (-np.arange(0, 8, 2) / 8)
    chord = 2 * np.abs(np.sin(63 * omega / 2))  # each circle's distance at offset 63
    assert np.all(chord[:2] < 0.2)
    assert np.hypot(*chord[2:]) < 2 * np.sin(0.5)
    pe = positional.sinusoidal_encoding(100, 8)
    assert np.isclose(np.linalg.norm(pe[63] - pe[0]), np.linalg.norm(chord), rtol=0, atol=1e-12)


def _exercise_5_draws(gen, n, draws, d=64, N=10, n_test=4096):
    p = np.arange(N) / N

    def sample(m):
        y = p[gen.integers(0, N, m)]
        x = gen.standard_normal((m, d))
        x[:, 0] += y
        return x, y

    out = []
    for _ in range(draws):
        (x, y), (x_test, y_test) = sample(n), sample(n_test)
        out.append(_probe_r2(x[:, :1], y, x_test[:, :1], y_test) - _probe_r2(x, y, x_test, y_test))
    return np.array(out)


@pytest.mark.parametrize("seed", [100, 101])
def test_exercise_5_one_draw_straddles_the_target_at_n_and_the_sd_rule_keeps_nine_in_ten(seed):
    """Exercise 5 (cold read s9, D3): at n = 5,977 the mean loss is 0.01, so a single draw lands
    above it about half the time. The solution's closing comment (a larger n, the target a few sd
    above the mean, keeps most draws below) is checked here, as the exercise no longer asks it
    (the chapter teaches no normal quantiles, cold read s10): the rule prediction + 1.28 sd <= 0.01,
    with the sd measured at n, gives an n (about 1.7 to 2 times n) where at most 1 draw in 10
    lands above (2% to 7% over 8 seeds, s9)."""
    d, p = 64, np.arange(10) / 10
    best = np.var(p) / (np.var(p) + 1)
    n_needed = int(np.ceil(d + (1 - best) * d / 0.01))
    gen = np.random.default_rng(seed)
    at_n = _exercise_5_draws(gen, n_needed, 40)
    assert 0.2 < np.mean(at_n > 0.01) < 0.8
    n_safe = int(np.ceil(d + (1 - best) * d / (0.01 - 1.28 * at_n.std(ddof=1))))
    assert 1.4 * n_needed < n_safe < 2.3 * n_needed
    assert np.mean(_exercise_5_draws(gen, n_safe, 60) > 0.01) <= 0.1


# --- session 4, last pass (cold reads s11) -----------------------------------------------


def test_matched_codes_share_one_mean_pair_distance_and_the_nearest_pairs_share_orders_them():
    # section 1.11's reason: matching fixes the mean squared distance between two codes,
    # 2 N / (N - 1) times the varying energy, so the codes differ only in how much of it the
    # nearest pair gets (line 0.0006, sinusoid 0.065, random table 0.85 at N = 100, d = 1024)
    N, d = 100, 1024
    gen = np.random.default_rng(5)  # the chapter's generator and order of draws
    for n in (10, 100):
        for dd in (4, 16, 64, 256, 1024):
            gen.standard_normal((5000 // n, n, dd))
            table = _random_table(gen.standard_normal((n, dd)), n, dd)
            gen.standard_normal((1024 // n, n, dd))
    sin = positional.sinusoidal_encoding(N, d)
    varying = np.mean(((sin - sin.mean(0)) ** 2).sum(axis=1))
    share = {}
    for name, codes in (("line", _centred(N, d)), ("sinusoid", sin), ("table", table)):
        sq = ((codes[:, None] - codes[None, :]) ** 2).sum(-1)[~np.eye(N, dtype=bool)]
        assert np.isclose(sq.mean(), 2 * N / (N - 1) * varying, rtol=1e-9)  # one mean for all
        share[name] = sq.min() / sq.mean()
    assert round(share["line"], 4) == 0.0006 and round(share["sinusoid"], 3) == 0.065
    assert round(share["table"], 2) == 0.85
    assert share["line"] < share["sinusoid"] < share["table"]


def test_the_former_exercise_5_solution_passes_its_checker_and_its_mean_loss_is_predicted():
    """The probe-r2 exercise left the book in session 5 (it is about sampling, not position);
    its checker stays in the package. Its former solution, with its seed and checks: the mean
    loss over 40 draws is on (1 - best) d / (n - d) at n = 5,977 and n / 10, and single draws
    at n straddle the 0.01 target."""
    from mini_transformer import exercises

    def probe_r2(x, y, x_test, y_test):
        a = np.c_[x, np.ones(len(x))]
        coef = np.linalg.lstsq(a, y, rcond=None)[0]
        pred = np.c_[x_test, np.ones(len(x_test))] @ coef
        return 1 - ((y_test - pred) ** 2).sum() / ((y_test - y_test.mean()) ** 2).sum()

    assert exercises.check("probe-r2", probe_r2)
    gen = np.random.default_rng(2)
    N, d, n_test = 10, 64, 4096
    p = np.arange(N) / N
    best = np.var(p) / (np.var(p) + 1)
    n_needed = int(np.ceil(d + (1 - best) * d / 0.01))

    def sample(n):
        y = p[gen.integers(0, N, n)]
        x = gen.standard_normal((n, d))
        x[:, 0] += y
        return x, y

    def loss_once(n):
        (x, y), (x_test, y_test) = sample(n), sample(n_test)
        return probe_r2(x[:, :1], y, x_test[:, :1], y_test) - probe_r2(x, y, x_test, y_test)

    loss, predicted, draws = {}, {}, {}
    for n in (n_needed // 10, n_needed):
        draws[n] = np.array([loss_once(n) for _ in range(40)])
        loss[n], predicted[n] = draws[n].mean(), (1 - best) * d / (n - d)
    above = np.mean(draws[n_needed] > 0.01)
    assert abs(loss[n_needed] - predicted[n_needed]) < 0.002
    assert abs(loss[n_needed // 10] - predicted[n_needed // 10]) < 0.015
    assert 0.2 < above < 0.8
    assert draws[n_needed].std(ddof=1) > 0.002


def test_one_circle_fails_uniqueness_once_it_asks_for_a_margin():
    # section 1.12: at N = 100 one circle's codes 44 apart come within 0.018 against a 0.959 step,
    # so the margin rule fails it; besides, it has 2 channels, not D
    scores, _ = _score(lambda n: positional.sinusoidal_encoding(n, 2))
    failed = {r for r, ok in scores.items() if ok is not None and not ok}
    assert failed == {"unique", "d_model dims"}


def test_sinusoid_keeps_a_third_of_the_energy_next_to_std1_tokens():
    # moved from section 1.9's cell (s7h1): ||pe||^2 = d/2 against E||e||^2 = d, so the
    # sinusoid's share of the total energy is a third at every d_model (500 random tokens)
    gen = np.random.default_rng(4)
    for d in (4, 16, 64, 256, 1024):
        e = gen.standard_normal((500, 1, d))
        pe = positional.sinusoidal_encoding(10, d)
        share = 500 * (pe**2).sum() / ((e + pe) ** 2).sum()
        assert abs(share - 1 / 3) < 0.01, d


# --- 1.6 attention can aim at a code (s7i1) -----------------------------------------------


def _package_weights(q, K, mask=None):
    # the package's softmax(q K^T / sqrt(d_k)) rows, as weights (not a NumPy re-implementation)
    Q, K = torch.as_tensor(q, dtype=torch.float64), torch.as_tensor(K, dtype=torch.float64)
    eye = torch.eye(K.shape[0], dtype=torch.float64)  # V = I returns the weights themselves
    return attention.scaled_dot_product_attention(Q, K, eye, mask=mask).numpy()


def test_one_fixed_rotation_turns_each_sinusoid_code_into_the_previous_one():
    # section 1.7: "for the sinusoid one fixed rotation makes [p_(i-1)] from p_i at every i"
    d, n = 16, 40
    pe = positional.sinusoidal_encoding(n, d)
    omega = 10000.0 ** (-np.arange(0, d, 2) / d)
    back = np.zeros((d, d))
    for k, w in enumerate(omega):  # (sin a, cos a) -> (sin(a - w), cos(a - w)) in pair k
        back[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] = [
            [np.cos(w), -np.sin(w)],
            [np.sin(w), np.cos(w)],
        ]
    assert np.allclose(back @ back.T, np.eye(d), atol=1e-12)  # orthogonal
    assert np.allclose(pe[1:] @ back.T, pe[:-1], atol=1e-12)


@pytest.mark.parametrize("mask", [False, True])
def test_a_sinusoid_query_puts_nearly_all_weight_on_the_previous_position(mask):
    # section 1.7: beta = 16 gives key i - 1 at least 0.999 of the weight at every i (N = 40,
    # d_model = 16); the package's scaled_dot_product_attention divides by sqrt(d_k) = 4, so
    # the query is scaled by 4 beta to give the scores beta p_(i-1) . p_j
    n, d, beta = 40, 16, 16.0
    pe = positional.sinusoidal_encoding(n, d)
    q = 4 * beta * pe[:-1]  # queries for i = 1..39: p_(i-1)
    m = attention.causal_mask(n)[1:] if mask else None  # rows i = 1..39
    w = _package_weights(q, pe, m)  # (39, 40)
    assert w[np.arange(n - 1), np.arange(n - 1)].min() > 0.999


def _turn_back(d):
    """The sinusoid's frequencies and R_back (d, d): row codes (sin a, cos a) R_back ->
    (sin(a - w), cos(a - w)), each pair turned back one position."""
    omega = 10000.0 ** (-np.arange(0, d, 2) / d)
    back = np.zeros((d, d))
    for k, w in enumerate(omega):
        back[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] = [
            [np.cos(w), np.sin(w)],
            [-np.sin(w), np.cos(w)],
        ]
    return omega, back


def _head_with_tokens(d, std, n=40, draws=50, seed=22, kept_pairs=None, norm=False):
    # section 1.8's dropdown: the codes plus Gaussian token embeddings of std `std`, the
    # package's attention with W_Q = beta * (each pair turned back one step), W_K = I, beta = 16
    # (the package divides the scores by sqrt(d_k), so the query carries sqrt(d) beta), optionally
    # both keeping only the fastest `kept_pairs` pairs, and (norm=True) the package's LayerNorm
    # (gain 1, as initialised) applied first, as its Pre-LN block does. Returns the weights on
    # key i - 1 and whether key i - 1 is each query's top key, over draws and queries 1 to n - 1
    omega, back = _turn_back(d)
    keep = np.eye(d)
    if kept_pairs is not None:
        keep[2 * kept_pairs :] = 0
    gen = np.random.default_rng(seed)
    x = positional.sinusoidal_encoding(n, d) + std * gen.standard_normal((draws, n, d))
    if norm:
        x = layers.LayerNorm(d)(torch.from_numpy(x)).detach().numpy()  # float64 in and out
    mask = attention.causal_mask(n)
    prev, top = [], []
    for xs in x:
        w = _package_weights(math.sqrt(d) * 16.0 * xs @ back @ keep, xs @ keep, mask)  # (n, n)
        prev.append(w[np.arange(1, n), np.arange(n - 1)])
        top.append(w[1:].argmax(axis=1) == np.arange(n - 1))
    return np.array(prev), np.array(top)


def test_the_rotation_heads_weight_by_length_is_the_closed_form_and_falls_slowly_past_500000():
    # section 1.7 (s41 expert): the dot product depends on the offset alone, g(k) = sum cos(k w),
    # so query i puts 1 / (sum_(k < i) e^(beta (g(k) - g(0))) + e^(beta (g(1) - g(0)))) on key
    # i - 1. The chapter checks this against the softmax at N = 40 and 1000; here every query
    # at N = 4000, then the quoted 0.99945 at N = 500,000 (a bound on every shorter N) and 0.987
    # at 2,000,000
    d, beta, n = 16, 16.0, 4000
    omega = 10000.0 ** (-np.arange(0, d, 2) / d)
    g = np.cos(np.outer(omega, np.arange(2_000_000))).sum(axis=0)
    terms = np.exp(beta * (g - g[0]))
    cum = np.cumsum(terms)
    back = np.zeros((d, d))
    for k, w in enumerate(omega):  # rows: (sin a, cos a) R -> (sin(a - w), cos(a - w))
        back[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] = [
            [np.cos(w), np.sin(w)],
            [-np.sin(w), np.cos(w)],
        ]
    pe = positional.sinusoidal_encoding(n, d)
    s = beta * (pe @ back) @ pe.T
    s[np.triu_indices(n, 1)] = -np.inf
    w = np.exp(s - s.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    direct = w[np.arange(1, n), np.arange(n - 1)]  # queries i = 1, ..., n - 1
    assert np.allclose(direct, 1 / (cum[: n - 1] + terms[1]), rtol=0, atol=1e-9)
    smallest = {m: 1 / (cum[m - 2] + terms[1]) for m in (500_000, 1_000_000, 2_000_000)}
    assert round(smallest[500_000], 5) == 0.99945 and round(smallest[2_000_000], 3) == 0.987
    assert smallest[500_000] > smallest[1_000_000] > smallest[2_000_000]  # a slow fall


def test_the_scalars_excess_over_chance_is_at_the_two_ends():
    # section 1.10 (s41 expert): per position, the oracle's hits next to std-1 noise at N = 10 are
    # 2 Phi(0.05) - 1 = 0.040 inside, below chance 0.1, and Phi(0.05) = 0.520 at the two ends;
    # channel 0 alone (d_model drops out), 10,000 tokens per position
    N = 10
    p = positional.normalized_index_encoding(N)[:, 0]
    x = p + np.random.default_rng(46).standard_normal((10_000, N))
    hits = (np.abs(x[..., None] - p).argmin(axis=-1) == np.arange(N)).mean(axis=0)
    assert np.all(np.abs(hits[1:-1] - 0.040) < 0.01) and hits[1:-1].max() < 1 / N
    assert np.all(np.abs(hits[[0, -1]] - 0.520) < 0.02)


def test_token_embeddings_pull_the_rotation_heads_top_weight_off_the_previous_key():
    # section 1.8's dropdown, with the package's attention: the printed shares (seed 22, N = 40)
    # as pins, then the skeptic's variations: three other token draws and N = 200
    pins = {(16, None): 0.875, (64, None): 0.345, (16, 4): 0.967, (64, 4): 0.956}
    for (d, kept), share in pins.items():
        prev, top = _head_with_tokens(d, 0.02 * math.sqrt(d), kept_pairs=kept)
        assert round(top.mean(), 3) == share, (d, kept)
    prev, top = _head_with_tokens(16, 0.08)
    assert round(float(np.median(prev)), 3) == 0.995 and prev.min() < 5e-4
    for d in (16, 64):  # codes alone: every query's top key is i - 1
        assert _head_with_tokens(d, 0.0, draws=1)[1].all()
    for seed, n in ((0, 40), (1, 40), (2, 40), (0, 200)):
        draws = 50 if n == 40 else 5
        full = {
            d: _head_with_tokens(d, 0.02 * math.sqrt(d), n, draws, seed)[1].mean() for d in (16, 64)
        }
        fast = {
            d: _head_with_tokens(d, 0.02 * math.sqrt(d), n, draws, seed, kept_pairs=4)[1].mean()
            for d in (16, 64)
        }
        assert full[64] < 0.4 and 0.8 < full[16] < 0.95, (seed, n, full)  # most miss at 64
        assert all(0.9 < fast[d] < 1 for d in (16, 64)), (seed, n, fast)  # the fast pairs help
    # the mechanism: the 4 fastest of 32 pairs carry 0.90 of the squared neighbour step
    step_sq = np.diff(positional.sinusoidal_encoding(2, 64), axis=0)[0] ** 2
    assert round(step_sq[:8].sum() / step_sq.sum(), 2) == 0.90


def test_the_rotation_heads_fall_at_64_comes_mostly_from_the_larger_token_std():
    # section 1.8 (s100 expert M1): the package's starting scale doubles the token std from 16 to
    # 64, so the table crosses two token stds with both widths. The printed shares (seed 22) as
    # pins, then other draws: at one std the width costs less than doubling the std at one width
    pins = {(16, 0.08): 0.875, (64, 0.08): 0.841, (16, 0.16): 0.535, (64, 0.16): 0.345}
    for (d, std), share in pins.items():
        assert round(_head_with_tokens(d, std)[1].mean(), 3) == share, (d, std)
    for seed in (0, 1, 2):
        top = {(d, std): _head_with_tokens(d, std, seed=seed)[1].mean() for d, std in pins}
        assert top[16, 0.08] - top[64, 0.08] < top[16, 0.08] - top[16, 0.16], seed
        assert top[16, 0.16] - top[64, 0.16] < top[64, 0.08] - top[64, 0.16], seed


def _where_the_misses_go(d, n=40, draws=50, seed=22):
    # section 1.8's dropdown (s42 expert): the head W_Q = beta R_back, W_K = I on the codes plus
    # tokens of std 0.02 sqrt(d). Returns the share of misses whose top key is key i (the query's
    # own position), the hits, and the hits with the query's own token-token term e_i R e_i^T
    # removed from key i's score
    omega, back = _turn_back(d)
    tokens = 0.02 * math.sqrt(d) * np.random.default_rng(seed).standard_normal((draws, n, d))
    x = positional.sinusoidal_encoding(n, d) + tokens
    s = 16.0 * (x @ back) @ x.transpose(0, 2, 1)
    s[:, np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] = -np.inf
    top = s[:, 1:].argmax(axis=-1)
    hit = top == np.arange(n - 1)
    on_self = (top == np.arange(1, n))[~hit].mean()
    own = np.arange(n)
    s[:, own, own] -= 16.0 * np.einsum("bnd,de,bne->bn", tokens, back, tokens)
    return on_self, hit.mean(), np.mean(s[:, 1:].argmax(axis=-1) == np.arange(n - 1))


def test_most_misses_of_the_rotation_head_with_tokens_land_on_the_querys_own_position():
    # section 1.8 (s42 expert): a self-match bias of this W_K = I head, plus noise. The printed
    # values (seed 22, N = 40) as pins, then the skeptic's variations: other draws and N = 200
    pins = {16: (0.617, 0.875, 0.914), 64: (0.924, 0.345, 0.703)}
    for d, quoted in pins.items():
        assert tuple(round(float(v), 3) for v in _where_the_misses_go(d)) == quoted, d
    for seed, n in ((0, 40), (1, 40), (2, 40), (0, 200)):
        on_self, hits, no_self = _where_the_misses_go(64, n, 50 if n == 40 else 5, seed)
        assert on_self > 0.85 and no_self > hits + 0.3, (seed, n, on_self, hits, no_self)
        on_self16, hits16, no_self16 = _where_the_misses_go(16, n, 50 if n == 40 else 5, seed)
        assert on_self16 > 0.5 and no_self16 > hits16, (seed, n, on_self16)
    # the bias against the margin (divided by beta): 1.58 against 1.08 at 64, 0.096 against 0.515
    for d, (bias_q, margin_q) in {64: (1.583, 1.083), 16: (0.096, 0.515)}.items():
        omega = 10000.0 ** (-np.arange(0, d, 2) / d)
        bias = (0.02 * math.sqrt(d)) ** 2 * 2 * np.cos(omega).sum()  # sigma^2 tr(R_back)
        margin = d / 2 - np.cos(omega).sum()  # g(0) - g(1)
        assert (round(bias, 3), round(margin, 3)) == (bias_q, margin_q), d


def test_the_packages_layernorm_alone_pulls_some_queries_off_the_previous_key():
    # section 1.8's dropdown (s38 expert D1): the package's block is Pre-LN, so its first head
    # sees LayerNorm(codes + tokens). The printed values (seed 22, N = 40) as pins, with the
    # package's attention, then the skeptic's variations: a longer sentence, other token draws
    pins = {16: (0.897, 0.762, 0.998), 64: (0.974, 0.170, 0.0)}
    for d, (alone_share, tokens_share, tokens_median) in pins.items():
        prev, top = _head_with_tokens(d, 0.0, draws=1, norm=True)
        assert round(top.mean(), 3) == alone_share, d
        assert round(float(np.median(prev)), 3) == 1.0 and prev.min() < 5e-4, d
        prev, top = _head_with_tokens(d, 0.02 * math.sqrt(d), norm=True)
        assert round(top.mean(), 3) == tokens_share, d
        assert round(float(np.median(prev)), 3) == tokens_median, d
    # without the LayerNorm the same draws give 0.875 and 0.345: LayerNorm lowers both
    # longer sentences: the codes-alone share rises (0.961, 0.999 at N = 1000), the miss stays
    for d, share in ((16, 0.961), (64, 0.999)):
        prev, top = _head_with_tokens(d, 0.0, n=1000, draws=1, norm=True)
        assert round(top.mean(), 3) == share and prev.min() < 5e-4, d
    for seed in (0, 1, 2):  # three other token draws: LayerNorm lowers the share every time
        for d in (16, 64):
            std = 0.02 * math.sqrt(d)
            plain = _head_with_tokens(d, std, seed=seed)[1].mean()
            normed = _head_with_tokens(d, std, seed=seed, norm=True)[1].mean()
            assert normed < plain - 0.05, (seed, d, normed, plain)


def _distance_in_steps_by_offset(d, k_max, chunk=250_000):
    # the distance between two sinusoid codes k apart (the same for every such pair), over the
    # neighbour step, k = 1, ..., k_max: the root-sum-square of the circles' chords 2|sin(k w/2)|
    omega = 10000.0 ** (-np.arange(0, d, 2) / d)
    parts = []
    for start in range(1, k_max + 1, chunk):
        k = np.arange(start, min(start + chunk, k_max + 1))[:, None]
        parts.append(np.sqrt((4 * np.sin(k * omega / 2) ** 2).sum(axis=1)))
    dist = np.concatenate(parts)
    return dist / dist[0]


def test_four_circles_fail_uniqueness_past_6283_and_eight_circles_keep_half_a_step_to_2_million():
    # section 1.6's "Four circles" dropdown (s38 expert D3): half a step is our convention
    four = _distance_in_steps_by_offset(8, 10_000)
    first = int(np.argmax(four < 0.5)) + 1
    assert first == 6283 and round(four[first - 1], 2) == 0.19
    assert four[1:1000].min() > 0.5  # up to N = 1000 the nearest far pair is offset 63, 0.67
    pe = positional.sinusoidal_encoding(6284, 8)  # the same pair from the package
    ratio = np.linalg.norm(pe[-1] - pe[0]) / np.linalg.norm(pe[1] - pe[0])
    assert abs(ratio - four[first - 1]) < 1e-9
    # eight circles (d_model = 16): at least 1.23 steps to offset 200,000; the margin shrinks
    # over longer windows (0.83 by 2,000,000) but stays above half a step
    eight = _distance_in_steps_by_offset(16, 2_000_000)
    assert round(eight[1:200_000].min(), 2) == 1.23
    assert 0.5 < eight[1:].min() < 1.0


def test_with_unequal_norms_a_louder_code_outscores_the_one_the_query_aims_at():
    # requirement 3's reason: at equal norms p_(i-1) . p_j peaks at j = i - 1; make p_i louder
    # by 1.5 and the same query scores it higher
    pe = positional.sinusoidal_encoding(40, 16)
    louder = pe.copy()
    louder[20] *= 1.5
    scores = pe[19] @ pe.T
    assert scores.argmax() == 19
    assert (pe[19] @ louder.T).argmax() == 20


@pytest.mark.parametrize("code", ["pos/N", "index"])
def test_a_one_channel_code_puts_at_most_the_geometric_bound_on_the_previous_position(code):
    # section 1.7: weights exp(beta p_j) change geometrically with j for a code linear in j, so
    # the weight on key i - 1 (keys 0..i) is r (1 - r) / (1 - r^(i+1)), r = exp(-beta * step):
    # at most 1/3 for any i >= 2 and about 1/4 for i = 20 ("0.250 on position 19")
    n = 40
    p = positional.normalized_index_encoding(n) if code == "pos/N" else positional.index_encoding(n)
    step = p[1, 0] - p[0, 0]
    slopes = np.linspace(-60, 60, 2401) / step  # covers r from e^-60 to e^60
    r = np.linspace(1e-4, 1 - 1e-4, 20_000)
    for i in (2, 5, 20, 39):
        mask = attention.causal_mask(n)[i : i + 1].expand(len(slopes), n)
        w = _package_weights(slopes[:, None], np.broadcast_to(p, (n, 1)).copy(), mask)
        best = w[:, i - 1].max()
        bound = (r * (1 - r) / (1 - r ** (i + 1))).max()
        assert best <= bound + 1e-6, (code, i)
        assert best >= bound - 5e-3, (code, i)  # the slope grid reaches the bound
        assert best <= 1 / 3 + 1e-9 and (i < 20 or best < 0.2501), (code, i)


@pytest.mark.parametrize("N", [10, 100])
def test_held_at_one_varying_energy_the_codes_hits_barely_move_with_d_model(N):
    # section 1.11: the matched curves rise with d_model because the sinusoid's varying energy
    # does; held at its d_model = 64 value, each code's hits change by at most 0.128 from 16 to
    # 1024 in the chapter's draw (0.143 in this one): far below the matched rise of 0.5 or more.
    gen = np.random.default_rng(2024)
    p = positional.normalized_index_encoding(N)[:, 0]

    def varying(c):
        return np.mean(((c - c.mean(0)) ** 2).sum(axis=1))

    def hits(c, d):
        e = gen.standard_normal((5000 // N, N, d))
        score = (e + c) @ c.T - 0.5 * (c**2).sum(axis=1)
        return np.mean(score.argmax(axis=-1) == np.arange(N))

    target = varying(positional.sinusoidal_encoding(N, 64))
    held, matched = {}, {}
    for d in (16, 1024):
        sin = positional.sinusoidal_encoding(N, d)
        table = gen.standard_normal((N, d))
        line = np.zeros((N, d))
        line[:, 0] = p - p.mean()
        for name, c in (("sinusoid", sin), ("random", table), ("line", line)):
            c = c - c.mean(0)
            held[name, d] = hits(c * np.sqrt(target / varying(c)), d)
            matched[name, d] = hits(c * np.sqrt(varying(sin) / varying(c)), d)
    for name in ("sinusoid", "random", "line"):
        assert abs(held[name, 1024] - held[name, 16]) < 0.2, (name, held)
    assert max(matched[nm, 1024] - matched[nm, 16] for nm in ("sinusoid", "random", "line")) > 0.5


# --- round s7j1: the 0.25 bound and the random-speed circles ---------------------------------


def test_previous_key_weight_under_a_scalar_code_is_the_closed_form_and_at_most_a_quarter_far_out():
    """Appendix A.9: a head scoring pos/N directly gives key j the weight r^j / sum, r = e^(b/N),
    so key i - 1 gets r^(i-1) (r - 1) / (r^(i+1) - 1). Over r in [1e-4, 1e4] (a log grid of
    200,001 values, finer than the chapter's 4,001 slopes) that is below 0.2501 at i = 20, tends
    to (r - 1)/r^2 <= 1/4 for r > 1, stays at most 1/(i + 1) for r <= 1, and near the start is
    larger: 1/3 at i = 2 (r = 1) and 0.277 at i = 3, as A.9's dropdown says (0.277 printed only)."""
    log_r = np.linspace(np.log(1e-4), np.log(1e4), 200_001)

    def weight_on_previous(i):
        s = log_r[:, None] * np.arange(i + 1)[None, :]  # scores, up to the factor N
        w = np.exp(s - s.max(axis=1, keepdims=True))
        return (w / w.sum(axis=1, keepdims=True))[:, i - 1]

    r = np.exp(log_r)
    grows = r > 1.001
    for i in (20, 39):
        w = weight_on_previous(i)
        closed = r[grows] ** (i - 1) * (r[grows] - 1) / (r[grows] ** (i + 1) - 1)
        assert np.allclose(w[grows], closed, rtol=1e-9, atol=0)
        assert w.max() < 0.2501
        assert np.all(w[r <= 1] <= 1 / (i + 1) + 1e-12)
    assert np.all((r - 1) / r**2 <= 0.25 + 1e-15)  # = 1/4 - (r - 2)^2 / (4 r^2)
    assert abs(weight_on_previous(2).max() - 1 / 3) < 1e-9
    assert round(weight_on_previous(3).max(), 3) == 0.277


def test_eight_circles_at_random_speeds_pass_every_requirement_as_the_sinusoid_does():
    """Section 1.12: the list selects rotation codes, not the sinusoid's speeds. The chapter's
    8 circles at speeds drawn from U(0.001, 1) (seed 20) pass all six tests, scored by this file's
    own scorer; so does another draw (seed 21); one circle does not (section 1.6's 44 apart)."""
    for seed in (20, 21):
        speeds = np.random.default_rng(seed).uniform(0.001, 1, D // 2)

        def circles(n, speeds=speeds):
            angles = np.arange(n)[:, None] * speeds[None, :]
            out = np.empty((n, D))
            out[:, 0::2], out[:, 1::2] = np.sin(angles), np.cos(angles)
            return out

        s, _ = _score(circles)
        assert all(s[r] for r in s if r != "d_model dims") and s["d_model dims"], seed


def test_the_confusion_sum_of_section_1_11s_codes_orders_their_hits_in_every_cell():
    """Moved from Appendix A.3 (session 8): the *confusion sum*, sum over the wrong codes of
    Phi(-distance / 2) averaged over positions, a union bound on the chance of a mistake, ranks
    section 1.11's four codes as the oracle's hits do, strictly, in all 10 cells of its run."""
    gen = np.random.default_rng(5)  # the chapter's generator and order of draws (noise, table)
    names = ("scalar", "centred", "random", "sinusoid")
    for N, d in [(N, d) for N in (10, 100) for d in (4, 16, 64, 256, 1024)]:
        e = gen.standard_normal((5000 // N, N, d))
        scalar = np.zeros((N, d))
        scalar[:, 0] = positional.normalized_index_encoding(N)[:, 0]
        codes = {
            "scalar": scalar,
            "centred": _centred(N, d),
            "random": _random_table(gen.standard_normal((N, d)), N, d),
            "sinusoid": positional.sinusoidal_encoding(N, d),
        }
        confusion, hits_of = {}, {}
        for name, pe in codes.items():
            dist = (pe**2).sum(axis=1) - 2 * np.einsum("tnd,md->tnm", e + pe, pe)
            hits_of[name] = float(np.mean(dist.argmin(axis=-1) == np.arange(N)))
            gaps = np.linalg.norm(pe[:, None] - pe[None, :], axis=-1)[~np.eye(N, dtype=bool)]
            tails = [0.5 * math.erfc(g / 2 / math.sqrt(2)) for g in gaps]  # Phi(-g / 2)
            confusion[name] = np.mean(tails) * (N - 1)
        by_sum = sorted(names, key=lambda nm, c=confusion: -c[nm])  # the largest sum first
        hits = [hits_of[nm] for nm in by_sum]
        assert all(a < b for a, b in itertools.pairwise(hits)), (N, d, by_sum, hits)


def test_a_key_with_the_squared_position_escapes_the_quarter_cap_at_a_gain_growing_like_n_squared():
    """Appendix A.9 (s33 expert): the quarter cap holds for a key linear in pos/N. With the key
    (j/N, (j/N)^2) and the query beta (2(i-1)/N, -1) the score is -beta (j - (i-1))^2 / N^2 plus a
    constant, so the smallest weight on key i - 1 depends on beta / N^2 alone: 0.9993 at 8 N^2 and
    0.9999 at 10 N^2 for every N tried, while a fixed gain loses the previous key as N grows
    (resolution, not a cap)."""

    def smallest(N, gain):
        j = np.arange(N) / N
        keys = np.stack([j, j**2], axis=1)  # (N, 2)
        out = []
        for i in range(1, N):
            s = keys[: i + 1] @ (gain * np.array([2 * (i - 1) / N, -1.0]))  # keys 0..i
            w = np.exp(s - s.max())
            out.append(w[i - 1] / w.sum())
        return min(out)

    for N in (10, 40, 200):
        assert round(smallest(N, 8 * N**2), 4) == 0.9993
        assert smallest(N, 10 * N**2) > 0.9999
    fixed = [smallest(N, 8 * 40**2) for N in (40, 80, 160)]  # the gain that suffices at N = 40
    assert fixed[0] > 0.999 and fixed[1] < 0.97 and fixed[2] < 0.6


def _trained_with_tokens(d, seed=7, n=40, draws=100, steps=200):
    # section 1.8's dropdown: a W_Q trained with the tokens present (Appendix A.9's loss,
    # W_K = I, Adam lr 0.05) on `draws` sentences of n codes plus tokens of std 0.02 sqrt(d)
    pe = torch.as_tensor(positional.sinusoidal_encoding(n, d))
    std = 0.02 * math.sqrt(d)
    x = pe + std * torch.as_tensor(np.random.default_rng(seed).standard_normal((draws, n, d)))
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    W = torch.zeros(d, d, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([W], lr=0.05)
    for _ in range(steps):
        opt.zero_grad()
        w = torch.softmax((x @ W @ x.transpose(1, 2)).masked_fill(~causal, -torch.inf), dim=-1)
        loss = -torch.log(w[:, torch.arange(1, n), torch.arange(n - 1)]).mean()
        loss.backward()
        opt.step()
    return W.detach()


def _top_key_hits(W, d, std, n=200, draws=50, seed=22):
    # (draws, n - 1): whether key i - 1 is query i's top key, for the head x W x^T (W_K = I)
    x = positional.sinusoidal_encoding(n, d) + std * np.random.default_rng(seed).standard_normal(
        (draws, n, d)
    )
    x = torch.as_tensor(x)
    s = (x @ W @ x.transpose(1, 2)).masked_fill(
        ~torch.tril(torch.ones(n, n, dtype=torch.bool)), -torch.inf
    )
    return (s[:, 1:].argmax(dim=-1) == torch.arange(n - 1)).numpy()


def test_a_wq_trained_with_tokens_fits_its_40_positions_and_not_the_positions_past_them():
    # section 1.8 (s45 expert): the W_Q trained with tokens on N = 40 puts key i - 1 on top at
    # the positions it saw, and for few queries past them, where the hand-built head (package
    # attention) keeps its share. The printed values (training seed 7, N = 200, seed 22) as pins,
    # then the skeptic's variations: other training and test draws, and the codes alone
    pins = {16: (1.0, 0.153, 0.867), 64: (0.956, 0.003, 0.337)}
    for d, (seen_q, past_q, hand_q) in pins.items():
        std = 0.02 * math.sqrt(d)
        W = _trained_with_tokens(d)
        hits, hand = _top_key_hits(W, d, std), _head_with_tokens(d, std, n=200)[1]
        got = (hits[:, :39].mean(), hits[:, 39:].mean(), hand[:, 39:].mean())
        assert tuple(round(float(v), 3) for v in got) == (seen_q, past_q, hand_q), d
        # the codes alone: the trained map misses past its positions without any token noise
        assert _top_key_hits(W, d, 0.0, draws=1)[:, 39:].mean() < 0.3, d
    for d in (16, 64):  # other training draws (seed 8) and test draws (seed 23)
        std = 0.02 * math.sqrt(d)
        hits = _top_key_hits(_trained_with_tokens(d, seed=8), d, std, seed=23)
        hand = _head_with_tokens(d, std, n=200, seed=23)[1]
        assert hits[:, :39].mean() > 0.9 and hits[:, 39:].mean() < min(0.3, hand[:, 39:].mean()), d


# --- session 12, c1b (cold reads s46) ------------------------------------------------------


def test_at_std_002_the_embedding_outweighs_the_scalar_from_712_on_and_the_oracle_still_reads_it():
    # section 1.10's std-0.02 rows (s46 expert): the embedding's energy 0.0004 d_model passes the
    # scalar's 0.285 at d_model = 712.5; the printed shares; then the skeptic's variations of the
    # d_model = 1024 row: another seed with twice the guesses, and d_model = 4096
    p = positional.normalized_index_encoding(10)[:, 0]
    mean_p2 = float(np.mean(p**2))
    assert round(mean_p2, 3) == 0.285 and round(mean_p2 / 0.02**2) == 712

    def share(N, d):
        m = float(np.mean(positional.normalized_index_encoding(N) ** 2))
        return m / (m + d * 0.02**2)

    assert [round(share(N, d), 3) for N, d in ((10, 64), (100, 64), (10, 1024))] == [
        0.918,
        0.928,
        0.410,
    ]
    assert share(10, 712) > 0.5 > share(10, 713)
    gen = np.random.default_rng(44)
    for d, n_tokens in ((1024, 1000), (4096, 200)):
        codes = np.zeros((10, d))
        codes[:, 0] = p
        hits = []
        for _ in range(n_tokens // 100):  # chunks of 100 tokens per position
            x = 0.02 * gen.standard_normal((100, 10, d)) + codes
            score = x @ codes.T - 0.5 * (codes**2).sum(axis=1)  # the nearest code
            hits.append(np.argmax(score, axis=-1) == np.arange(10))
        assert abs(np.mean(hits) - 0.989) < 0.01, d  # the d_model = 64 row's prediction


def test_the_wq_trained_on_120_sinusoid_rows_loses_key_i_minus_1_to_far_keys_only():
    # Appendix A.9 (s46 expert): used at N = 240, the W_Q trained on the sinusoid's first 120
    # positions (width 16, 3,000 Adam steps) keeps key i - 1 on top for 0.442 of the queries at
    # 120 to 239, every miss going to a key 45 to 120 back; among the last 20 keys it is on top for
    # every query, among the last 40 for 0.817 (median weight 0.982)
    tab = torch.as_tensor(positional.sinusoidal_encoding(120, 16))
    causal = torch.tril(torch.ones(120, 120, dtype=torch.bool))
    W = torch.zeros(16, 16, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([W], lr=0.05)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 3,000 small steps: one thread, as the chapter runs them
    try:
        for _ in range(3000):
            opt.zero_grad()
            w = torch.softmax((tab @ W @ tab.T).masked_fill(~causal, -torch.inf), dim=-1)
            (-torch.log(w[torch.arange(1, 120), torch.arange(119)]).mean()).backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    pe = torch.as_tensor(positional.sinusoidal_encoding(240, 16))
    s = pe @ W.detach() @ pe.T
    lower = torch.tril(torch.ones(240, 240, dtype=torch.bool))
    back = (torch.arange(1, 240) - s.masked_fill(~lower, -torch.inf)[1:].argmax(dim=-1))[119:]
    assert round((back == 1).double().mean().item(), 3) == 0.442
    assert (back[back != 1].min().item(), back[back != 1].max().item()) == (45, 120)
    for window, top_share in ((20, 1.0), (40, 0.817)):
        near = lower & ~torch.tril(torch.ones(240, 240, dtype=torch.bool), diagonal=-window)
        s_near = s.masked_fill(~near, -torch.inf)
        top = (s_near[1:].argmax(dim=-1) == torch.arange(239)).double()[119:]
        assert round(top.mean().item(), 3) == top_share, window
    w_near = torch.softmax(s_near, dim=-1)[torch.arange(1, 240), torch.arange(239)][119:]
    assert round(w_near.median().item(), 3) == 0.982


# --- session 13, c1 (cold reads s51) -------------------------------------------------------


def test_the_wq_trained_with_tokens_puts_key_i_minus_1_on_top_for_other_training_seeds_too():
    # section 1.8's dropdown (s51 expert): "200 Adam steps at learning rate 0.05 ... two other
    # training seeds give at least 0.95": seeds 8 and 9, scored on the book's 50 draws at N = 40
    for d in (16, 64):
        std = 0.02 * math.sqrt(d)
        for seed in (8, 9):
            hits = _top_key_hits(_trained_with_tokens(d, seed=seed), d, std, n=40)
            assert hits.mean() >= 0.95, (d, seed)


def test_layernorm_keeps_equal_norms_but_spreads_the_offset_1_dot_product():
    # section 1.8's dropdown (s51 expert; s53 expert): full LN gives every code the norm
    # sqrt(d) but spreads LN(p_(i+1)) . LN(p_i) over positions 0 to 999 (requirement 6 lost: 1.91
    # and 3.15); each step alone leaves unequal norms, and one constant mean misses at 16 even with
    # the turn undone
    def rot(d):
        R = np.zeros((d, d))
        for k, w in enumerate(10000.0 ** (-np.arange(0, d, 2) / d)):
            R[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] = [
                [np.cos(w), np.sin(w)],
                [-np.sin(w), np.cos(w)],
            ]
        return R

    def top(q, k):
        s = q @ k.T
        s[np.triu_indices(len(k), 1)] = -np.inf
        return float(np.mean(s[1:].argmax(axis=-1) == np.arange(len(k) - 1)))

    def prev(v):
        return np.vstack([np.zeros_like(v[:1]), v[:-1]])

    pins = {
        16: (0.897, (4.08, 6.35), (1.92, 2.92), 0.846, 1.91),
        64: (0.974, (8.93, 12.43), (3.81, 5.11), 1.0, 3.15),
    }
    for d, (ln_share, div_norms, const_norms, const_share, spread) in pins.items():
        p, R = positional.sinusoidal_encoding(40, d), rot(d)
        m, s = p.mean(axis=1, keepdims=True), p.std(axis=1, keepdims=True)
        ln = (p - m) / s
        assert np.allclose(np.linalg.norm(ln, axis=1), np.sqrt(d))
        p_k = positional.sinusoidal_encoding(1000, d)
        ln_k = (p_k - p_k.mean(axis=1, keepdims=True)) / p_k.std(axis=1, keepdims=True)
        offset_1 = np.sum(ln_k[1:] * ln_k[:-1], axis=1)
        assert round(top(ln @ R, ln), 3) == ln_share and round(float(np.ptp(offset_1)), 2) == spread
        # the division alone commutes with R_back: the query is p_(i-1) / s_i, the keys unequal
        assert np.allclose((p / s @ R)[1:], (p[:-1] / s[1:]))
        n_div = np.linalg.norm(p / s, axis=1)
        assert (round(n_div.min(), 2), round(n_div.max(), 2)) == div_norms
        c = p - m.mean()
        n_c = np.linalg.norm(c, axis=1)
        assert (round(n_c.min(), 2), round(n_c.max(), 2)) == const_norms
        assert round(top(prev(c), c), 3) == round(top(c @ R, c), 3) == const_share
        unit = c / n_c[:, None]
        assert top(prev(unit), unit) == 1.0


# --- session 18, c1 (cold reads s81) -------------------------------------------------------


def test_the_wq_trained_with_tokens_fails_past_its_40_positions_for_three_more_training_seeds():
    # section 1.8's dropdown (s81 expert): "three more training seeds give the same split ... past
    # them under 0.01 at 64": seeds 0, 1, 2 (the book trains seed 7), scored on the book's 50 draws
    # of N = 200 (seed 22): key i - 1 on top for most queries 1 to 39, for almost none at 40 to 199
    std = 0.02 * math.sqrt(64)
    for seed in (0, 1, 2):
        hits = _top_key_hits(_trained_with_tokens(64, seed=seed), 64, std)
        assert hits[:, :39].mean() >= 0.95 and hits[:, 39:].mean() <= 0.01, seed


def test_a_class_mean_reader_of_the_plain_scalar_is_drowned_by_width_on_other_seeds():
    """Section 1.10 (s121 review): next to std-1 tokens, the class-mean reader trained on 1,020
    tokens reads the plain scalar 0.131 at d_model = 4 and 0.104 at 1024 (chance 0.1, seeds
    300-309). On ten other seeds, with the means learned by torch rather than NumPy, the fall
    and the near-chance reading at 1024 hold."""
    p = torch.tensor(positional.normalized_index_encoding(10)[:, 0])
    hits = {4: [], 1024: []}
    for seed in range(10):
        g = torch.Generator().manual_seed(500 + seed)
        for d in hits:
            codes = torch.zeros(10, d, dtype=torch.float64)
            codes[:, 0] = p
            learn = torch.randn(102, 10, d, generator=g, dtype=torch.float64) + codes
            test = torch.randn(500, 10, d, generator=g, dtype=torch.float64) + codes
            means = learn.mean(0)  # (10, d)
            nearest = torch.cdist(test.reshape(-1, d), means).argmin(-1).reshape(500, 10)
            hits[d].append((nearest == torch.arange(10)).double().mean().item())
    fall = np.array(hits[4]) - np.array(hits[1024])
    assert fall.mean() > 3 * fall.std(ddof=1) / np.sqrt(10)
    assert abs(np.mean(hits[1024]) - 0.1) < 0.01 and 0.12 < np.mean(hits[4]) < 0.14
