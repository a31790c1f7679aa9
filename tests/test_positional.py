"""Tests of mini_transformer.positional.

References are independent of the implementation: the papers' formulas as plain Python
loops over scalars (``math.sin``), the numbers printed in seed 01, and identities checked
with hypothesis over many sizes and positions.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_transformer import positional as P

FAST = settings(max_examples=25, deadline=None)
even_d = st.integers(1, 32).map(lambda h: 2 * h)


# --------------------------------------------------------------------------- references
def paper_pe(n_positions: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """Vaswani et al. (2017), section 3.5, one entry at a time."""
    pe = np.zeros((n_positions, d_model))
    for pos in range(n_positions):
        for col in range(d_model):
            i = col // 2
            angle = pos / base ** (2 * i / d_model)
            pe[pos, col] = math.sin(angle) if col % 2 == 0 else math.cos(angle)
    return pe


def tensorflow_tutorial_pe(n_positions: int, d_model: int) -> np.ndarray:
    """The code quoted in seed 01, as loops: sines of the even columns, then cosines of the odd."""
    sines, cosines = [], []
    for pos in range(n_positions):
        row_s, row_c = [], []
        for col in range(d_model):
            angle = pos / 10000 ** ((2 * (col // 2)) / d_model)
            (row_s if col % 2 == 0 else row_c).append(
                math.sin(angle) if col % 2 == 0 else math.cos(angle)
            )
        sines.append(row_s)
        cosines.append(row_c)
    return np.concatenate([np.array(sines), np.array(cosines).reshape(n_positions, -1)], axis=1)


def block_rotation(offset: float, d_model: int, base: float = 10000.0) -> np.ndarray:
    """The 2x2 blocks of seed 04 ([[cos, sin], [-sin, cos]]) placed on the diagonal."""
    R = np.zeros((d_model, d_model))
    for i in range(d_model // 2):
        w = base ** (-2 * i / d_model)
        c, s = math.cos(w * offset), math.sin(w * offset)
        R[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, s], [-s, c]]
    return R


# Seed 01: print(positional_encoding(5, 6).round(3)) and its distance/norm/dot printout.
SEED01_TABLE = np.array(
    [
        [0.0, 0.0, 0.0, 1.0, 1.0, 1.0],
        [0.841, 0.046, 0.002, 0.54, 0.999, 1.0],
        [0.909, 0.093, 0.004, -0.416, 0.996, 1.0],
        [0.141, 0.139, 0.006, -0.99, 0.99, 1.0],
        [-0.757, 0.185, 0.009, -0.654, 0.983, 1.0],
    ]
)
SEED01_DISTANCE, SEED01_NORM, SEED01_DOT = 0.9600, 1.7321, 2.5392


# --------------------------------------------------------------------------- scalar encodings
def test_index_encoding_is_the_position():
    assert np.array_equal(P.index_encoding(4), [[0.0], [1.0], [2.0], [3.0]])


def test_normalized_index_divides_by_sentence_length_as_in_seed01():
    # "I love you so much": I -> 0/5, love -> 1/5, ...
    assert np.allclose(
        P.normalized_index_encoding(5)[:, 0], [0, 1 / 5, 2 / 5, 3 / 5, 4 / 5], atol=1e-15
    )


def test_binary_encoding_matches_python_bin():
    got = P.binary_encoding(16, 4)
    for pos in range(16):
        bits = [int(b) for b in reversed(format(pos, "04b"))]
        assert got[pos].tolist() == bits


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_binary_bit_k_flips_every_2_to_the_k_positions(k):
    col = P.binary_encoding(64, 5)[:, k]
    flips = np.flatnonzero(np.diff(col)) + 1
    assert np.array_equal(flips, np.arange(2**k, 64, 2**k))


# --------------------------------------------------------------------------- sinusoidal values
@pytest.mark.parametrize(
    "n,d,base",
    [(7, 4, 10000.0), (20, 6, 10000.0), (9, 7, 10000.0), (5, 1, 10000.0), (12, 10, 100.0)],
)
def test_interleaved_layout_matches_paper_formula_loop(n, d, base):
    assert np.allclose(P.sinusoidal_encoding(n, d, base=base), paper_pe(n, d, base), atol=1e-12)


@pytest.mark.parametrize("n,d", [(5, 6), (11, 8), (6, 3), (4, 5)])
def test_concat_layout_matches_tensorflow_tutorial_loop(n, d):
    got = P.sinusoidal_encoding(n, d, layout="concat")
    assert np.allclose(got, tensorflow_tutorial_pe(n, d), atol=1e-12)


def test_seed01_printed_table_d6_concat():
    assert np.array_equal(P.sinusoidal_encoding(5, 6, layout="concat").round(3), SEED01_TABLE)


def test_seed01_distance_norm_dot_between_neighbours():
    pe = P.sinusoidal_encoding(5, 6, layout="concat")
    for i in range(4):
        assert round(float(np.linalg.norm(pe[i] - pe[i + 1])), 4) == SEED01_DISTANCE
        assert round(float(np.linalg.norm(pe[i])), 4) == SEED01_NORM
        assert round(float(pe[i] @ pe[i + 1]), 4) == SEED01_DOT


@FAST
@given(n=st.integers(1, 40), d=st.integers(1, 40))
def test_concat_is_a_fixed_column_permutation_of_interleaved(n, d):
    perm = list(range(0, d, 2)) + list(range(1, d, 2))  # sin columns, then cos columns
    inter = P.sinusoidal_encoding(n, d)
    assert np.array_equal(P.sinusoidal_encoding(n, d, layout="concat"), inter[:, perm])


def test_frequencies_span_wavelengths_2pi_to_almost_base_times_2pi():
    w = P.sinusoidal_frequencies(512)
    assert w[0] == 1.0 and w.shape == (256,)
    assert np.all(np.diff(w) < 0)
    assert 2 * np.pi / w[-1] < 2 * np.pi * 10000 and 2 * np.pi / w[-1] > 2 * np.pi * 9000


# --------------------------------------------------------------------------- sinusoidal identities
@FAST
@given(n=st.integers(1, 300), d=even_d)
def test_norm_is_constant_sqrt_d_over_2(n, d):
    norms = np.linalg.norm(P.sinusoidal_encoding(n, d), axis=1)
    assert np.allclose(norms, math.sqrt(d / 2), atol=1e-12)


@FAST
@given(d=even_d, p=st.integers(0, 10_000), q=st.integers(0, 10_000), k=st.integers(-500, 500))
def test_dot_product_depends_only_on_offset_and_equals_sum_of_cosines(d, p, q, k):
    pe = P.sinusoidal_encoding(max(p, q) + abs(k) + 1, d)
    omega = [10000.0 ** (-2 * i / d) for i in range(d // 2)]
    expected = sum(math.cos(w * k) for w in omega)
    p0, q0 = p + max(0, -k), q + max(0, -k)  # both p0 + k and q0 + k stay >= 0
    assert math.isclose(pe[p0] @ pe[p0 + k], expected, abs_tol=1e-9)
    assert math.isclose(pe[q0] @ pe[q0 + k], expected, abs_tol=1e-9)


@FAST
@given(d=even_d, p=st.integers(0, 2000), k=st.integers(0, 200))
def test_dot_product_is_symmetric_in_offset(d, p, k):
    pe = P.sinusoidal_encoding(p + 2 * k + 1, d)
    assert math.isclose(pe[p + k] @ pe[p + 2 * k], pe[p + k] @ pe[p], abs_tol=1e-9)


@FAST
@given(d=even_d, k=st.integers(1, 50))
def test_distance_between_p_and_p_plus_k_does_not_depend_on_p(d, k):
    pe = P.sinusoidal_encoding(300, d)
    dist = np.linalg.norm(pe[k:] - pe[:-k], axis=1)
    assert np.ptp(dist) < 1e-10


@FAST
@given(d=even_d, k=st.integers(-60, 60), base=st.sampled_from([100.0, 10000.0]))
def test_rotation_matrix_shifts_every_position_by_offset(d, k, base):
    pe = P.sinusoidal_encoding(200, d, base=base)
    R = P.rotation_matrix(k, d, base=base)
    assert np.allclose(R, block_rotation(k, d, base), atol=1e-14)
    for p in range(max(0, -k), 200 - max(0, k)):
        assert np.allclose(R @ pe[p], pe[p + k], atol=1e-10)


@FAST
@given(d=even_d, a=st.integers(-100, 100), b=st.integers(-100, 100))
def test_rotation_matrix_is_orthogonal_and_composes(d, a, b):
    Ra, Rb = P.rotation_matrix(a, d), P.rotation_matrix(b, d)
    assert np.allclose(Ra.T @ Ra, np.eye(d), atol=1e-12)
    assert np.allclose(Ra.T, P.rotation_matrix(-a, d), atol=1e-12)
    assert np.allclose(Ra @ Rb, P.rotation_matrix(a + b, d), atol=1e-10)


# --------------------------------------------------------------------------- RoPE
def test_rope_applies_rotation_matrix_of_each_position():
    torch.manual_seed(0)
    d, T = 8, 12
    rope = P.RotaryEmbedding(d)
    x = torch.randn(2, 3, T, d, dtype=torch.float64)
    got = rope(x, offset=5)
    for t in range(T):
        R = torch.from_numpy(P.rotation_matrix(t + 5, d))
        assert torch.allclose(got[..., t, :], x[..., t, :] @ R.T, atol=1e-12)


def test_rope_of_pe0_is_the_sinusoidal_encoding():
    d, T = 16, 50
    x = torch.zeros(1, 1, T, d)
    x[..., 1::2] = 1.0  # PE_0 = (sin 0, cos 0, ...)
    got = P.RotaryEmbedding(d)(x)[0, 0].double().numpy()
    assert np.allclose(got, P.sinusoidal_encoding(T, d), atol=1e-6)  # float32 tables


ROPE16 = P.RotaryEmbedding(16, max_len=1024)


@FAST
@given(m=st.integers(0, 300), n=st.integers(0, 300), shift=st.integers(0, 300))
def test_rope_score_depends_only_on_offset(m, n, shift):
    gen = torch.Generator().manual_seed(m * 1000 + n)
    d = 16
    q, k = (
        torch.randn(d, generator=gen, dtype=torch.float64),
        torch.randn(d, generator=gen, dtype=torch.float64),
    )

    def at(v, pos):
        return ROPE16(v.view(1, 1, 1, d), offset=pos).view(d)

    s1 = at(q, m) @ at(k, n)
    s2 = at(q, m + shift) @ at(k, n + shift)
    assert torch.allclose(s1, s2, atol=1e-10)


def test_rope_offset_equals_slice_of_longer_sequence_and_cache_regrows():
    torch.manual_seed(0)
    rope = P.RotaryEmbedding(8, max_len=4)
    x = torch.randn(1, 2, 10, 8)
    full = rope(x)  # T = 10 > max_len = 4: cache regrows
    assert rope.cos_cached.shape[0] >= 10
    assert torch.allclose(rope(x[:, :, 6:], offset=6), full[:, :, 6:], atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rope_low_precision_inputs_keep_dtype_and_agree_with_float32(dtype):
    torch.manual_seed(0)
    rope = P.RotaryEmbedding(32)
    x = torch.randn(2, 4, 20, 32)
    out = rope(x.to(dtype))
    assert out.dtype == dtype
    tol = 1e-2 if dtype == torch.float16 else 6e-2  # rounding of the input and the output
    assert torch.allclose(out.float(), rope(x.to(dtype).float()), atol=tol)


def test_rope_preserves_norm_of_each_vector():
    torch.manual_seed(0)
    x = torch.randn(2, 2, 30, 16)
    assert torch.allclose(P.RotaryEmbedding(16)(x).norm(dim=-1), x.norm(dim=-1), atol=1e-5)


# --------------------------------------------------------------------------- MemN2N
@pytest.mark.parametrize("J,d", [(1, 1), (5, 4), (13, 20), (7, 3)])
def test_memn2n_matches_paper_formula_loop(J, d):
    got = P.memn2n_encoding(J, d)
    assert got.shape == (J, d)
    for j in range(1, J + 1):
        for k in range(1, d + 1):
            assert math.isclose(
                got[j - 1, k - 1], (1 - j / J) - (k / d) * (1 - 2 * j / J), abs_tol=1e-15
            )


def test_memn2n_module_multiplies_by_the_numpy_encoding():
    torch.manual_seed(0)
    x = torch.randn(2, 9, 12, dtype=torch.float64)
    got = P.MemN2NPositionalEncoding(12)(x)
    assert torch.allclose(got, x * torch.from_numpy(P.memn2n_encoding(9, 12)), atol=1e-15)


# --------------------------------------------------------------------------- modules
def test_sinusoidal_module_adds_the_numpy_table_with_offset():
    x = torch.randn(2, 7, 10)
    m = P.SinusoidalPositionalEncoding(10, max_len=20)
    table = torch.from_numpy(P.sinusoidal_encoding(20, 10)).float()
    assert torch.allclose(m(x), x + table[:7], atol=1e-7)
    assert torch.allclose(m(x, offset=13), x + table[13:20], atol=1e-7)
    assert len(list(m.parameters())) == 0 and "pe" not in m.state_dict()


def test_learned_embedding_init_std_is_close_to_0_1():
    torch.manual_seed(0)
    w = P.LearnedPositionalEmbedding(512, 64).weight.detach()
    # 32768 samples: the standard error of the std estimate is about 0.1 / sqrt(2 * 32768)
    assert abs(w.std().item() - 0.1) < 0.003 and abs(w.mean().item()) < 0.003


def test_learned_embedding_adds_rows_and_has_gradient():
    m = P.LearnedPositionalEmbedding(8, 4)
    x = torch.zeros(3, 5, 4)
    out = m(x, offset=2)
    assert torch.equal(out[1], m.weight[2:7].detach())
    out.sum().backward()
    assert m.weight.grad[2:7].abs().sum() > 0 and m.weight.grad[:2].abs().sum() == 0


# --------------------------------------------------------------------------- ALiBi
def test_alibi_slopes_for_8_heads_are_powers_of_one_half():
    assert torch.equal(P.alibi_slopes(8), torch.tensor([1 / 2**h for h in range(1, 9)]))


def test_alibi_slopes_geometric_for_power_of_two_heads():
    s = P.alibi_slopes(16)
    start = 2 ** (-8 / 16)
    assert torch.allclose(s, torch.tensor([start**h for h in range(1, 17)]), rtol=1e-6)


def test_alibi_slopes_for_6_heads_follow_the_papers_interpolation():
    # closest power of two 4: 2^-2, 2^-4, 2^-6, 2^-8; then every other slope of 8 heads.
    expected = torch.tensor([2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3])
    assert torch.equal(P.alibi_slopes(6), expected)


@pytest.mark.parametrize("h,T_q,T_k", [(4, 5, None), (3, 2, 6), (8, 1, 1)])
def test_alibi_bias_matches_loop(h, T_q, T_k):
    slopes = P.alibi_slopes(h).tolist()
    Tk = T_q if T_k is None else T_k
    got = P.alibi_bias(h, T_q, T_k)
    assert got.shape == (h, T_q, Tk) and got.dtype == torch.float32
    for a in range(h):
        for i in range(T_q):
            pos_i = i + Tk - T_q
            for j in range(Tk):
                assert math.isclose(
                    got[a, i, j].item(), -slopes[a] * abs(pos_i - j), rel_tol=1e-6, abs_tol=1e-7
                )


# --------------------------------------------------------------------------- properties
def test_encoding_properties_of_sinusoidal_have_zero_spreads():
    props = P.encoding_properties(P.sinusoidal_encoding(100, 16))
    for key in ("norm_spread", "neighbour_distance_spread", "neighbour_angle_spread"):
        assert props[key] < 1e-12
    assert props["unique"] and props["max_abs"] <= 1.0
    assert math.isclose(props["norm_min"], math.sqrt(8), abs_tol=1e-12)


def test_encoding_properties_of_index_and_binary():
    idx = P.encoding_properties(P.index_encoding(10))
    assert idx["norm_spread"] == 9.0 and idx["neighbour_distance_spread"] == 0.0
    assert idx["value_max"] == 9.0 and idx["unique"]
    binary = P.encoding_properties(P.binary_encoding(20, 4))  # wraps after 16
    assert not binary["unique"] and binary["n_unique"] == 16


# --------------------------------------------------------------------------- offset share
def lstsq_offset_share(S: np.ndarray, mask: np.ndarray) -> float:
    """R^2 of a least-squares fit of the selected entries on one-hot offset regressors."""
    m, n = np.nonzero(mask)
    offsets = np.unique(n - m)
    A = (n - m)[:, None] == offsets[None, :]  # (entries, offsets) one-hot; spans the constant
    y = S[m, n]
    resid = y - A @ np.linalg.lstsq(A.astype(float), y, rcond=None)[0]
    return 1 - (resid**2).sum() / ((y - y.mean()) ** 2).sum()


@pytest.mark.parametrize("shape", [(6, 6), (5, 9), (24, 24), (9, 4)])
def test_offset_share_is_the_r2_of_an_offset_fit(shape):
    gen = np.random.default_rng(sum(shape))
    S = gen.normal(size=shape)
    full = np.ones(shape, bool)
    half = gen.random(shape) < 0.5  # a random selection, several entries per offset
    assert math.isclose(P.offset_share(S), lstsq_offset_share(S, full), rel_tol=1e-9)
    assert math.isclose(P.offset_share(S, half), lstsq_offset_share(S, half), rel_tol=1e-9)
    assert 0 < P.offset_share(S) < 1  # noise: explained only in part


def test_offset_share_of_a_relative_table_is_one_and_of_an_absolute_one_is_not():
    T = 20
    gen = np.random.default_rng(1)
    f = gen.normal(size=2 * T + 4)  # any function of the offset n - m, on (T, T + 5)
    relative = f[np.arange(T + 5) - np.arange(T)[:, None] + T - 1]
    assert 1 - P.offset_share(relative) < 1e-12
    pe = P.sinusoidal_encoding(T, 16)
    assert 1 - P.offset_share(pe @ pe.T) < 1e-12  # chapter 2: PE PE^T = f(n - m)
    u = gen.normal(size=T)
    assert P.offset_share(np.add.outer(u, u)) < 0.2  # u_m + u_n: m and n apart, chance level


def test_offset_share_covers_chapter_3s_upper_triangle_of_cosines():
    # chapter 3: cosines between learned rows i < j, offsets 1..L/2, as eta^2 by bincount
    L = 32
    W = np.random.default_rng(3).normal(size=(L, 8))
    W /= np.linalg.norm(W, axis=1, keepdims=True)
    cos = W @ W.T
    iu = np.triu_indices(L, 1)
    pair_off = iu[1] - iu[0]
    keep = pair_off <= L // 2
    v, o = cos[iu][keep], pair_off[keep] - 1
    eta2 = ((np.bincount(o, v) / np.bincount(o))[o] - v.mean()).var() / v.var()
    off = np.arange(L) - np.arange(L)[:, None]
    mask = (off >= 1) & (off <= L // 2)
    assert math.isclose(P.offset_share(cos, mask), eta2, rel_tol=1e-9)
    assert math.isclose(P.offset_share(cos, mask), lstsq_offset_share(cos, mask), rel_tol=1e-9)


@pytest.mark.parametrize(
    ("S", "mask", "match"),
    [
        (np.ones(5), None, "S must"),
        (np.zeros((2, 3, 4)), None, "S must be 2-D"),
        (np.eye(4), np.ones((4, 3), bool), "mask a boolean array of its shape"),
        (np.eye(4), np.ones((4, 4)), "mask a boolean array"),
        (np.eye(4), np.eye(4, dtype=bool), "mask must select two offsets"),
        (np.ones((4, 4)), None, "S must vary"),
        (np.ones((1, 1)), None, "two offsets"),
    ],
)
def test_offset_share_names_a_bad_argument(S, mask, match):
    with pytest.raises(ValueError, match=match):
        P.offset_share(S, mask)


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda: P.index_encoding(0), ValueError, "n must be a positive integer, got 0"),
        (lambda: P.normalized_index_encoding(-3), ValueError, "n must be a positive integer"),
        (lambda: P.binary_encoding(4, 0), ValueError, "n_bits must be a positive integer"),
        (lambda: P.sinusoidal_encoding(0, 4), ValueError, "n_positions must be a positive integer"),
        (lambda: P.sinusoidal_encoding(3, 0), ValueError, "d_model must be a positive integer"),
        (
            lambda: P.sinusoidal_encoding(2.5, 4),
            TypeError,
            "n_positions must be a positive integer",
        ),
        (lambda: P.sinusoidal_encoding(3, True), TypeError, "d_model must be a positive integer"),
        (
            lambda: P.sinusoidal_encoding(3, 4, layout="stacked"),
            ValueError,
            "layout must be one of 'interleaved', 'concat', got 'stacked'",
        ),
        (
            lambda: P.sinusoidal_encoding(3, 4, base=0.0),
            ValueError,
            r"base must be a finite number >= 1 \(10000 in the paper\), got 0.0",
        ),
        (
            lambda: P.sinusoidal_encoding(3, 4, base=-2),
            ValueError,
            "base must be a finite number >= 1 .*got -2.0",
        ),
        (
            lambda: P.sinusoidal_encoding(3, 4, base="10000"),
            TypeError,
            "base must be a finite number >= 1 .*got '10000'",
        ),
        (
            lambda: P.sinusoidal_encoding(3, 64, base=1e-320),
            ValueError,
            "base must be a finite number >= 1 .*got 1e-320",
        ),
        (
            lambda: P.rotation_matrix(1, 4, base=float("inf")),
            ValueError,
            "base must be a finite number >= 1 .*got inf",
        ),
        (lambda: P.RotaryEmbedding(8, base=0.5), ValueError, "base must be a finite number >= 1"),
        (
            lambda: P.rotation_matrix(1, 7),
            ValueError,
            "d_model must be a positive even integer for a rotation, got 7",
        ),
        (
            lambda: P.rotation_matrix(float("nan"), 4),
            ValueError,
            "offset must be a finite real number, got nan",
        ),
        (lambda: P.memn2n_encoding(0, 4), ValueError, "sentence_length must be a positive integer"),
        (lambda: P.encoding_properties(np.ones((1, 3))), ValueError, "n_positions >= 2"),
        (lambda: P.alibi_slopes(0), ValueError, "n_heads must be a positive integer"),
        (
            lambda: P.alibi_bias(4, 5, 3),
            ValueError,
            r"T_k must be an integer >= 5 \(queries are the last T_q\), got 3",
        ),
        (
            lambda: P.RotaryEmbedding(7),
            ValueError,
            "d_head must be a positive even integer for a rotation, got 7",
        ),
        (
            lambda: P.RotaryEmbedding(8)(torch.zeros(1, 1, 4, 6)),
            ValueError,
            r"x must have shape \(B, n_heads, T, d_head=8\) with size 8 in dimension 3",
        ),
        (
            lambda: P.RotaryEmbedding(8)(torch.zeros(8)),
            ValueError,
            r"x must have at least 2 dimensions \(B, n_heads",
        ),
        (
            lambda: P.RotaryEmbedding(8)(torch.zeros(1, 1, 4, 8), offset=-1),
            ValueError,
            "offset must be a non-negative integer, got -1",
        ),
        (
            lambda: P.SinusoidalPositionalEncoding(8, max_len=4)(torch.zeros(1, 5, 8)),
            ValueError,
            "max_len=4",
        ),
        (
            lambda: P.SinusoidalPositionalEncoding(8)(torch.zeros(5, 8)),
            ValueError,
            r"x must have 3 dimensions \(B, T, d_model\)",
        ),
        (
            lambda: P.SinusoidalPositionalEncoding(8)(torch.zeros(1, 5, 6)),
            ValueError,
            r"x must have shape \(B, T, d_model\) with size 8 in dimension 2",
        ),
        (lambda: P.LearnedPositionalEmbedding(4, 8)(torch.zeros(1, 5, 8)), ValueError, "max_len=4"),
        (
            lambda: P.LearnedPositionalEmbedding(4, 8, init_std=-1.0),
            ValueError,
            "init_std must be a finite number >= 0",
        ),
        (
            lambda: P.LearnedPositionalEmbedding(0, 8),
            ValueError,
            "max_len must be a positive integer",
        ),
        (
            lambda: P.MemN2NPositionalEncoding(8)(np.zeros((1, 2, 8))),
            TypeError,
            "x must be a torch.Tensor",
        ),
        # integer, bool and complex inputs were silently cast (issue 15)
        (
            lambda: P.SinusoidalPositionalEncoding(8)(torch.ones(1, 3, 8, dtype=torch.long)),
            TypeError,
            "x must be a floating-point tensor .*got dtype torch.int64",
        ),
        (
            lambda: P.LearnedPositionalEmbedding(8, 8)(torch.ones(1, 3, 8, dtype=torch.bool)),
            TypeError,
            "x must be a floating-point tensor .*got dtype torch.bool",
        ),
        (
            lambda: P.MemN2NPositionalEncoding(8)(torch.ones(1, 3, 8, dtype=torch.complex64)),
            TypeError,
            "x must be a floating-point tensor .*got dtype torch.complex64",
        ),
        (
            lambda: P.RotaryEmbedding(8)(torch.ones(1, 1, 3, 8, dtype=torch.int32)),
            TypeError,
            "x must be a floating-point tensor .*got dtype torch.int32",
        ),
        # sizes are refused before allocating, with the estimate
        (
            lambda: P.LearnedPositionalEmbedding(10**9, 1024),
            ValueError,
            r"the table \(max_len, d_model\) of shape \(1000000000, 1024\) would need 3.7 TiB",
        ),
        (
            lambda: P.RotaryEmbedding(8)(torch.ones(1, 1, 3, 8), offset=10**12),
            ValueError,
            r"the rotary cache \(max_len or offset \+ T, d_head / 2\) .* would need 29.1 TiB",
        ),
    ],
)
def test_error_messages_name_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
