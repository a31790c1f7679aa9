"""Checks of chapter 2 (book/02_sinusoidal.ipynb) moved out of the reader's way.

The chapter keeps one to three asserts per visible cell, the ones that state its claims.
What lives here: exact pins of committed data, bookkeeping checks, the secondary checks of
the chapter's asides, and the checks of the solutions that the chapter no longer shows.
Everything is computed from the package (or from ``data.load_result``), so each test fails
when the package or the data change, not only when the notebook does.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mini_transformer import data
from mini_transformer import positional as P


def pe_inline(n_positions, d_model, base=10000.0):
    """The chapter's three-line encoding (section 2.1)."""
    omega = base ** (-np.arange(0, d_model, 2) / d_model)
    angles = np.arange(n_positions)[:, None] * omega
    return np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(n_positions, d_model)


def f(k, d_model):
    return np.cos(np.multiply.outer(k, P.sinusoidal_frequencies(d_model))).sum(axis=-1)


# --- 2.1-2.2: the formula and the wavelengths -------------------------------------------


def test_inline_encoding_is_the_package_bit_for_bit():
    for n, d in [(6, 8), (1000, 128), (3, 2)]:
        assert np.array_equal(pe_inline(n, d), P.sinusoidal_encoding(n, d))


def test_wavelengths_at_d_model_128():
    lam = 2 * np.pi / P.sinusoidal_frequencies(128)
    # pair 0 has exponent 0, so wavelength 2 pi at every base (moved from section 2.2's cell)
    assert math.isclose(lam[0], 2 * np.pi)
    assert round(float(lam[-1])) == 54_410 and round(2 * np.pi * 10000) == 62_832
    # section 2.2's formula for the slowest pair, 2 pi 10000^((d - 2)/d) (moved from the chapter)
    assert math.isclose(lam[-1], 2 * np.pi * 10000 ** (126 / 128), rel_tol=1e-12)
    assert [round(float(lam[c // 2]), 1) for c in (0, 20, 40, 60)] == [6.3, 26.5, 111.7, 471.2]
    # the slowest wavelength approaches 2 pi 10000 only as d_model grows (review m4)
    gaps = [
        1 - 2 * np.pi / P.sinusoidal_frequencies(d)[-1] / (2 * np.pi * 1e4) for d in (4, 128, 512)
    ]
    assert gaps[0] > 0.98 and 0.12 < gaps[1] < 0.14 and gaps[2] < gaps[1]


def test_tensor2tensor_spacing():
    omega = P.sinusoidal_frequencies(128)
    omega_t2t = 10.0 ** (-4 * np.arange(64) / 63)  # retyped: its slowest wavelength is not a check
    assert np.all(omega >= omega_t2t) and math.isclose(
        np.max(omega / omega_t2t), 10000 ** (2 / 128)
    )


def why_10000_rows(d=512, n=512):
    rows = {}
    for base in (10, 100, 1_000, 5_000, 10_000, 20_000, 100_000, 10**8):
        omega = P.sinusoidal_frequencies(d, base=base)
        lam = 2 * np.pi / omega
        rows[base] = (
            lam.max(),
            np.mean(lam < n),
            np.mean(omega * (n - 1) < 0.1),
            np.mean(omega > 0.5),
        )
    return rows


def test_why_10000_nothing_singles_it_out():
    rows, n = why_10000_rows(), 512
    for b in (5_000, 10_000, 20_000):
        lam, w, s, _ = rows[b]
        assert lam > n and 0 <= s < w < 1, b
        assert abs(w - rows[10_000][1]) < 0.1 and abs(s - rows[10_000][2]) < 0.1, b
    # wrapping is not resolving neighbours: far fewer pairs turn fast than wrap
    assert rows[10_000][3] < 0.5 * rows[10_000][1]
    # the numbers the prose quotes (48, 7); 8% turn fast, a column the chapter no longer prints
    assert [round(100 * rows[10_000][i]) for i in (1, 2, 3)] == [48, 7, 8]
    assert round(rows[10][0]) == 62 and round(100 * rows[10**8][2]) == 54
    # "barely move" (less than 0.1 radian over the sequence) is the heatmap's criterion too
    turn = P.sinusoidal_frequencies(128) * 99
    assert int(np.argmax(turn < 0.1)) == 48 and np.all(turn[48:] < 0.1)
    assert round(rows[10_000][0]) == 60_611


# --- 2.3: the pictures --------------------------------------------------------------------


def test_circle_near_return_and_helix():
    pe2 = P.sinusoidal_encoding(800, 2)
    gaps = np.linalg.norm(pe2[1:] - pe2[0], axis=1)
    assert int(np.argmin(gaps)) + 1 == 710 and gaps.min() < 1e-4
    pe3 = P.sinusoidal_encoding(720, 3)
    assert round(float(pe3[710, 2]), 3) == 0.999


def test_heatmap_still_pairs():
    pe = P.sinusoidal_encoding(100, 128, layout="concat")
    still = (np.ptp(pe[:, :64], axis=0) < 0.1) & (np.ptp(pe[:, 64:], axis=0) < 0.1)
    first = min(i for i in range(65) if still[i:].all())
    # the paper's layout agrees: column 95, the cosine of pair 47, is the last one that moves
    inter = np.ptp(P.sinusoidal_encoding(100, 128), axis=0) < 0.1
    assert first == 48 and min(c for c in range(129) if inter[c:].all()) == 95
    assert round(2 * np.pi / P.sinusoidal_frequencies(128)[48]) == 6283


# --- 2.4: layouts and the blog post's table -----------------------------------------------


def test_layouts_are_a_permutation_for_every_size():
    for d in (2, 3, 6, 16, 7, 128):
        perm = np.r_[0:d:2, 1:d:2]
        inter = P.sinusoidal_encoding(40, d)
        assert np.array_equal(P.sinusoidal_encoding(40, d, layout="concat"), inter[:, perm])


def test_blog_table_numbers_are_the_proved_identities():
    pe = P.sinusoidal_encoding(5, 6, layout="concat")
    d = np.linalg.norm(np.diff(pe, axis=0), axis=1)
    assert np.allclose(d, math.sqrt(6 - 2 * f(1, 6)), rtol=0, atol=1e-12)
    assert f"{d[0]:.4f} {math.sqrt(3):.4f} {f(1, 6):.4f}" == "0.9600 1.7321 2.5392"


# --- 2.5: proofs --------------------------------------------------------------------------


@pytest.mark.parametrize("d", [2, 8, 16, 64])
def test_rotation_matrix_is_orthogonal_and_composes(d):
    for k in (1, 5, -12, 37):
        R = P.rotation_matrix(k, d)
        assert np.allclose(R.T @ R, np.eye(d), rtol=0, atol=1e-14)
        assert np.allclose(R @ P.rotation_matrix(-k, d), np.eye(d), rtol=0, atol=1e-14)
    assert np.allclose(
        P.rotation_matrix(5, d) @ P.rotation_matrix(37, d),
        P.rotation_matrix(42, d),
        rtol=0,
        atol=1e-12,
    )


def test_dot_product_curve_numbers():
    k = np.arange(1, 1001)
    fk = f(k, 128)
    step = np.diff(fk)
    assert int((step > 0).sum()) == 479
    assert f"{step.min():.3f} {step.max():.3f}" == "-5.196 3.695"


def test_dot_product_far_means_fall_past_the_slow_wavelengths():
    # 2.5: 13.51 is the mean over |k| = 501..1000 only; further out it keeps falling, and past
    # the slowest wavelength (54,410) it is near 0 (the claim is scoped to what is printed)
    means = [
        f(np.arange(lo, hi + 1), 128).mean() for lo, hi in [(501, 1000), (1001, 2000), (2001, 5000)]
    ]
    assert [round(float(m), 2) for m in means] == [13.51, 8.75, 3.33]
    assert abs(f(np.arange(100_001, 200_001), 128).mean()) < 0.5
    # each of the 15 slow pairs adds cos(k w_i) > cos 1 = 0.54 for k <= 1000
    slow = P.sinusoidal_frequencies(128)[1000 * P.sinusoidal_frequencies(128) < 1]
    assert len(slow) == 15 and np.cos(1000 * slow).min() > math.cos(1)


def test_blog_code_with_column_index_fails_the_checks():
    enc = np.array([p / np.power(10000, 2 * i / 8) for p in range(100) for i in range(8)])
    enc[::2], enc[1::2] = np.sin(enc[::2]), np.cos(enc[1::2])
    enc = enc.reshape(100, 8)
    norms = np.linalg.norm(enc, axis=1)
    assert f"{norms.min():.2f} {norms.max():.2f}" == "1.76 2.37"
    # the dropdown's "up to 2.50 for the offsets k = 1 to 9"; k = 1 alone happens to give 2.50 too
    gram = enc @ enc.T
    spreads = [np.ptp(np.diagonal(gram, offset=k)) for k in range(1, 10)]
    assert f"{max(spreads):.2f}" == f"{spreads[0]:.2f}" == "2.50"


# --- 2.6: the attention score -------------------------------------------------------------


def test_four_terms_and_the_commuting_case():
    g = np.random.default_rng(0)
    T, d = 12, 8
    X, Pm = g.normal(size=(T, d)), P.sinusoidal_encoding(T, d)
    W_Q, W_K = g.normal(size=(d, d)), g.normal(size=(d, d))
    W = W_Q @ W_K.T
    scores = ((X + Pm) @ W_Q) @ ((X + Pm) @ W_K).T
    assert np.allclose(X @ W @ X.T + X @ W @ Pm.T + Pm @ W @ X.T + Pm @ W @ Pm.T, scores)
    # a block-diagonal W made of [[a, b], [-b, a]] commutes with every R(k)
    W_c = np.zeros((d, d))
    for i in range(d // 2):
        a, b = g.normal(size=2)
        W_c[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[a, b], [-b, a]]
    for k in (1, 3, 50):
        R = P.rotation_matrix(k, d)
        assert np.allclose(W_c @ R, R @ W_c, rtol=0, atol=1e-12)
    S = Pm @ W_c @ Pm.T
    assert max(np.ptp(np.diagonal(S, offset=o)) for o in range(-T + 1, T)) < 1e-12


def commuting_W(gen, d):
    a, b = gen.normal(size=d // 2), gen.normal(size=d // 2)
    W = np.zeros((d, d))
    for i in range(d // 2):
        W[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[a[i], b[i]], [-b[i], a[i]]]
    return W


def diagonal_spread(S):
    return max(np.ptp(np.diagonal(S, offset=o)) for o in range(-S.shape[0] + 1, S.shape[1]))


def offset_share(S):
    """Share of S's variance its diagonal means explain (the chapter's definition), written
    with a least-squares fit on one indicator column per offset instead of a loop of means."""
    T, U = S.shape
    offsets = (np.arange(U)[None, :] - np.arange(T)[:, None]).ravel() + T - 1
    A = np.eye(T + U - 1)[offsets]  # (T*U, number of offsets)
    fit = A @ np.linalg.lstsq(A, S.ravel(), rcond=None)[0]
    c = S.ravel() - S.mean()
    return 1 - ((S.ravel() - fit) ** 2).sum() / (c**2).sum()


def layer_norm(M, centre=True):
    M = M - M.mean(1, keepdims=True) if centre else M
    return M / np.sqrt((M**2).mean(1, keepdims=True))


def test_the_package_offset_share_is_the_least_squares_share_on_the_chapters_tables():
    # 2.6-2.8 call P.offset_share; the pins in this file use the lstsq helper above
    T, d = 24, 16
    g = np.random.default_rng(20)
    X = g.normal(size=(T, d))
    W = g.normal(size=(d, d)) @ g.normal(size=(d, d)).T / d
    Pm = P.sinusoidal_encoding(T, d)
    L = layer_norm(Pm)
    for S in (Pm @ W @ Pm.T, X @ W @ Pm.T, L @ commuting_W(np.random.default_rng(21), d) @ L.T):
        assert math.isclose(P.offset_share(S), offset_share(S), rel_tol=0, abs_tol=1e-12)


def chapter_tables():
    """Section 2.6's draws: X and the random W_QK (seed 20), the block-form W (seed 21)."""
    T, d = 24, 16
    g = np.random.default_rng(20)
    X = g.normal(size=(T, d))
    W = g.normal(size=(d, d)) / math.sqrt(d) @ (g.normal(size=(d, d)) / math.sqrt(d)).T
    return X, W, commuting_W(np.random.default_rng(21), d), P.sinusoidal_encoding(T, d)


def nearest_block_form(W):
    B = np.zeros_like(W)
    for i in range(W.shape[0] // 2):
        blk = W[2 * i : 2 * i + 2, 2 * i : 2 * i + 2]
        a, b = (blk[0, 0] + blk[1, 1]) / 2, (blk[0, 1] - blk[1, 0]) / 2
        B[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[a, b], [-b, a]]
    return B


def test_one_block_by_product_to_sum():
    # 2.6's "only if" fold: a block [[p, q], [r, s]] on one pair contributes a relative part and
    # a part in m + n with coefficients (s - p)/2 and (q + r)/2; checked by a double loop
    g = np.random.default_rng(5)
    w = 0.37
    for _ in range(5):
        p, q, r, s = g.normal(size=4)
        for m in range(-6, 7):
            for n in range(-6, 7):
                u, v = (
                    np.array([math.sin(m * w), math.cos(m * w)]),
                    np.array([math.sin(n * w), math.cos(n * w)]),
                )
                direct = u @ np.array([[p, q], [r, s]]) @ v
                rel = 0.5 * ((p + s) * math.cos((n - m) * w) + (r - q) * math.sin((n - m) * w))
                both = 0.5 * ((s - p) * math.cos((m + n) * w) + (q + r) * math.sin((m + n) * w))
                assert math.isclose(direct, rel + both, rel_tol=0, abs_tol=1e-12)


@pytest.mark.parametrize("d", [4, 8, 16])
def test_relative_iff_block_form(d):
    # 2.6: a block-form W gives a relative term at every size; changing any one entry (inside a
    # block so that s != p or r != -q, or between two pairs) makes it depend on m and n apart
    T = 64
    Pm = P.sinusoidal_encoding(T, d)
    g = np.random.default_rng(d)
    W = commuting_W(g, d)
    assert diagonal_spread(Pm @ W @ Pm.T) < 1e-11
    for row in range(d):
        for col in range(d):
            W2 = W.copy()
            W2[row, col] += 0.5
            # far above float64 rounding (1e-13); small (6e-4) only on the slowest pairs, whose
            # m + n terms barely move within T positions: the criterion is over all m, n
            assert diagonal_spread(Pm @ W2 @ Pm.T) > 1e-6, (row, col)
    # the nearest block form of a random W carries the whole relative part: removing it leaves
    # every diagonal's spread unchanged
    Wr = g.normal(size=(d, d))
    S = Pm @ Wr @ Pm.T
    rest = Pm @ (Wr - nearest_block_form(Wr)) @ Pm.T
    assert math.isclose(diagonal_spread(rest), diagonal_spread(S), rel_tol=1e-9)


def test_section_2_6_numbers():
    X, W, W_c, Pm = chapter_tables()
    W_in, W_between = W_c.copy(), W_c.copy()
    W_in[1, 1] += 0.5
    W_between[0, 2] += 0.5
    got = [diagonal_spread(Pm @ M @ Pm.T) for M in (np.eye(16), W_c, W_in, W_between, W)]
    assert max(got[:2]) < 1e-12
    assert [f"{v:.2f}" for v in got[2:]] == ["0.50", "0.91", "5.44"]
    assert f"{np.ptp(Pm @ W @ Pm.T):.2f}" == "7.19"
    # the dropdown's scope: an entry inside the slowest pair (7) barely moves the spread within
    # 24 positions; one linking pair 0 to pair 7 gives sin(m) cos(n w_7) ~ sin(m): spread ~1
    W_slow, W_link = W_c.copy(), W_c.copy()
    W_slow[14, 15] += 0.5
    W_link[0, 15] += 0.5
    got = [diagonal_spread(Pm @ M @ Pm.T) for M in (W_slow, W_link)]
    assert f"{got[0]:.4f} {got[1]:.2f}" == "0.0036 1.00"
    # about 0.5 sin(23 w_7): the changed entry times the slow pair's largest sine over the window
    assert math.isclose(got[0], 0.5 * math.sin(23 * P.sinusoidal_frequencies(16)[-1]), rel_tol=1e-3)
    B = nearest_block_form(W)
    assert round(100 * (B**2).sum() / (W**2).sum(), 1) == 4.4
    # the projection is orthogonal: W - B is orthogonal to every block-form matrix
    assert abs(((W - B) * W_c).sum()) < 1e-12
    shares = [(B**2).sum() / (W**2).sum()]
    for seed in range(100, 110):
        gen = np.random.default_rng(seed)
        Wr = gen.normal(size=(16, 16)) @ gen.normal(size=(16, 16)).T / 16
        shares.append((nearest_block_form(Wr) ** 2).sum() / (Wr**2).sum())
    assert round(100 * float(np.mean(shares)), 1) == 5.6


def test_layer_norm_splits_and_its_position_term():
    # 2.8: LN(x + p) = content part + PE's part, against torch's layer_norm (no eps, no gain);
    # the closed form of the position-position term; the chapter's numbers
    X, _, W_c, Pm = chapter_tables()
    Z = X + Pm
    mu, sigma = Pm.mean(1), Z.std(1)
    ln = torch.nn.functional.layer_norm(torch.from_numpy(Z), (16,), eps=0.0).numpy()
    content = (X - X.mean(1, keepdims=True)) / sigma[:, None]
    pe_part = (Pm - mu[:, None]) / sigma[:, None]
    assert np.allclose(ln, content + pe_part, rtol=0, atol=1e-12)
    S = pe_part @ W_c @ pe_part.T
    T = len(Pm)
    for m in range(T):
        for n in range(T):
            fw = Pm[m] @ W_c @ Pm[n]
            num = (
                fw
                - mu[n] * Pm[m] @ W_c.sum(1)
                - mu[m] * W_c.sum(0) @ Pm[n]
                + mu[m] * mu[n] * W_c.sum()
            )
            assert math.isclose(S[m, n], num / (sigma[m] * sigma[n]), rel_tol=0, abs_tol=1e-12)
    assert [round(float(v), 3) for v in mu[:3]] == [0.5, 0.549, 0.51]
    assert f"{sigma.min():.2f} {sigma.max():.2f}" == "0.76 1.50"
    assert f"{diagonal_spread(S):.2f} {np.ptp(S):.2f}" == "5.79 7.16"
    # the centring alone (sigma = 1), the chapter's 5.46: relativity fails without the divisor
    C = np.eye(16) - np.ones((16, 16)) / 16
    assert f"{diagonal_spread(Pm @ C @ W_c @ C @ Pm.T):.2f}" == "5.46"
    # 2.8's form: the centring is C = I - 11^T/d, and the term is PE_m^T (C W C) PE_n / s_m s_n
    C = np.eye(16) - np.ones((16, 16)) / 16
    assert np.allclose(S, Pm @ C @ W_c @ C @ Pm.T / np.outer(sigma, sigma), rtol=0, atol=1e-12)
    # PE alone (X = 0): the centring alone already breaks it (mu_m differ), the rescaling alone
    # (RMSNorm: every row of PE has RMS 1/sqrt 2) does not
    L = layer_norm(Pm)
    assert diagonal_spread(L @ W_c @ L.T) > 0.5 * np.ptp(L @ W_c @ L.T)
    Rn = layer_norm(Pm, centre=False)
    assert diagonal_spread(Rn @ W_c @ Rn.T) < 1e-11 * np.ptp(Rn @ W_c @ Rn.T)


def test_appendix_a5_offset_shares_after_the_norms():
    # A.5: ten block-form W (seeds 21..30) after each norm, with the lstsq offset share above
    X, _, _, Pm = chapter_tables()
    Z = X + Pm
    tables = {
        "ln": layer_norm(Pm),
        "ln_X": (Pm - Pm.mean(1, keepdims=True)) / Z.std(1, keepdims=True),
        "rms": layer_norm(Pm, centre=False),
        "rms_X": Pm / np.sqrt((Z**2).mean(1, keepdims=True)),
    }
    got = {k: [] for k in tables}
    for seed in range(21, 31):
        W = commuting_W(np.random.default_rng(seed), 16)
        for k, N in tables.items():
            got[k].append(offset_share(N @ W @ N.T))
    rng = {k: [round(min(v), 2), round(max(v), 2)] for k, v in got.items()}
    assert rng["ln"] == [0.41, 0.72] and rng["ln_X"] == [0.45, 0.6] and rng["rms_X"] == [0.7, 0.94]
    assert max(1 - np.array(got["rms"])) < 1e-12
    assert np.allclose(np.sqrt((Pm**2).mean(1)), math.sqrt(0.5), rtol=0, atol=1e-12)


def test_offset_share_noise_floor():
    # A.5: noise's expected offset share is (p - 1)/(N - 1) for p = 2T - 1 offset means and
    # N = T^2 entries, (2T - 2)/(T^2 - 1), not the earlier (2T - 1)/T^2 (review s14 #9)
    T = 24
    noise = [offset_share(np.random.default_rng(s).normal(size=(T, T))) for s in range(100, 110)]
    assert [round(min(noise), 2), round(max(noise), 2)] == [0.06, 0.13]
    floor = (2 * T - 2) / (T**2 - 1)
    assert f"{floor:.2f}" == "0.08" and min(noise) < floor < max(noise)
    draws = [
        P.offset_share(np.random.default_rng(1000 + s).normal(size=(T, T))) for s in range(4000)
    ]
    mean = float(np.mean(draws))
    assert abs(mean - floor) < 4 * np.std(draws) / math.sqrt(len(draws))
    assert abs(mean - floor) < abs(mean - (2 * T - 1) / T**2)


def test_lab_sinusoidal_beyond_training_length_is_pinned():
    # regression pin of committed data (mini_transformer/results/extrapolation.json)
    res = data.load_result("extrapolation")
    assert res["config"]["train_length"] == 32 and res["chance_accuracy"] == 0.0625
    beyond = res["results"]["sinusoidal"]["accuracy_beyond"]
    assert beyond["48"]["per_seed"] == [0.1184, 0.1348, 0.1101]
    assert beyond["256"]["per_seed"] == [0.1095, 0.0845, 0.0785]
    # the chapter's statistic: the mean over seeds at each length, quoted at T = 48 and 256
    mean = {
        s: [
            round(float(np.mean(v["per_seed"])), 2)
            for T, v in r["accuracy_beyond"].items()
            if int(T) > 32
        ]
        for s, r in res["results"].items()
    }
    assert mean["sinusoidal"] == mean["learned"] == [0.12, 0.11, 0.10, 0.09]
    assert mean["none"] == [0.22, 0.19, 0.15, 0.11] and mean["rope"] == [1.0, 1.0, 0.94, 0.58]
    within = res["results"]["sinusoidal"]["accuracy"]["32"]["per_seed"]
    assert within == [1.0, 1.0, 1.0]
    none = res["results"]["none"]
    assert round(float(np.mean(none["accuracy"]["32"]["per_seed"])), 2) == 0.68
    # every no-encoding seed beats every sinusoidal seed at every length; narrowly at 256
    none_beyond = {T: v["per_seed"] for T, v in none["accuracy_beyond"].items() if int(T) > 32}
    assert all(min(none_beyond[T]) > max(beyond[T]["per_seed"]) for T in none_beyond)
    assert 0 < min(none_beyond["256"]) - max(beyond["256"]["per_seed"]) < 0.005
    assert len(res["seeds"]) == 3 and max(res["eval_lengths"]) == 256


def test_the_sinusoidal_lab_model_fails_past_its_trained_length():
    # section 2.6's forward link to section 3.7 ("the sinusoidal model does not work past its
    # trained length"), the claim the chapter's lab cell asserted before it moved here:
    # perfect within L = 32, near chance past it like the learned table, RoPE near perfect
    res = data.load_result("extrapolation")["results"]
    mean_beyond = {
        s: float(np.mean(res[s]["accuracy_beyond"]["48"]["per_seed"]))
        for s in ("sinusoidal", "learned", "rope")
    }
    assert float(np.mean(res["sinusoidal"]["accuracy"]["32"]["per_seed"])) == 1.0
    assert max(mean_beyond["sinusoidal"], mean_beyond["learned"]) < 0.2
    assert mean_beyond["rope"] > 0.95


# --- 2.9: limits --------------------------------------------------------------------------


def test_prose_numbers_of_2_2_2_3_and_2_5():
    # 2.2: the two counts trade off monotonically in the base (d_model = 512, 512 positions)
    bases = (10, 100, 1_000, 5_000, 10_000, 20_000, 100_000, 10**8)
    om = [P.sinusoidal_frequencies(512, base=b) for b in bases]
    wraps = [np.mean(2 * np.pi / o < 512) for o in om]
    stills = [np.mean(o * 511 < 0.1) for o in om]
    assert np.all(np.diff(wraps) <= 0) and np.all(np.diff(stills) >= 0)
    # 2.2 dropdown: the still pairs' sine columns end between 0.053 and 0.097, under sin(0.1 rad)
    om10k = P.sinusoidal_frequencies(512)
    ramp_top = np.sin(511 * om10k[om10k * 511 < 0.1])
    assert [round(float(v), 3) for v in (ramp_top.min(), ramp_top.max())] == [0.053, 0.097]
    assert ramp_top.max() < np.sin(0.1) and np.all(ramp_top > 0)
    assert ramp_top.min() > 0.04  # a ramp, not a constant (moved from the chapter's cell)
    # 2.3 caption: pair 48 of d_model = 128 over 100 positions rises from 0 to 0.099
    sines = P.sinusoidal_encoding(100, 128)[:, 96]
    assert sines[0] == 0 and round(float(sines[-1]), 3) == 0.099 and np.all(np.diff(sines) > 0)
    # 2.5 dropdown: the slowest pair of d_model = 16 turns 1.26 rad over 4,000 positions
    assert round(3999 * float(P.sinusoidal_frequencies(16)[-1]), 2) == 1.26


def test_float32_drift_numbers():
    # machine-independent float32 rounding: a change in the package's frequencies shows here
    omega64 = P.sinusoidal_frequencies(128)
    omega32 = omega64.astype(np.float32)
    pos = np.arange(2**16)
    dev = np.empty(len(pos))
    for c in np.array_split(pos, 16):
        a32 = (c.astype(np.float32)[:, None] * omega32).astype(np.float64)
        a64 = c.astype(np.float64)[:, None] * omega64
        dev[c] = np.maximum(
            np.abs(np.sin(a32) - np.sin(a64)), np.abs(np.cos(a32) - np.cos(a64))
        ).max(1)
    first_bad = int(np.argmax(dev > 1e-3))
    assert 1e-4 < dev[:4096].max() < 5e-4 and round(dev[:4096].max(), 5) == 0.00024
    assert first_bad == 17_780
    assert np.all(dev <= pos * 2.0**-23 + 1e-15)


def test_float32_drift_is_linear_and_bfloat16_is_the_yardstick():
    # 2.9: per-octave maxima of the float32-angle error rise with slope 1.03 on log-log axes;
    # bfloat16 storage of the encoding errs by 2^-9 (half the gap near 1); in bfloat16 the
    # positions 256 and 257 are one number (8 significant bits), and so are their angles
    omega64 = P.sinusoidal_frequencies(128)
    pos = np.arange(2**16)
    a32 = (pos.astype(np.float32)[:, None] * omega64.astype(np.float32)).astype(np.float64)
    a64 = pos[:, None] * omega64
    dev = np.maximum(np.abs(np.sin(a32) - np.sin(a64)), np.abs(np.cos(a32) - np.cos(a64))).max(1)
    octave_max = [dev[2**j : 2 ** (j + 1)].max() for j in range(4, 16)]
    assert round(float(np.polyfit(np.arange(4, 16), np.log2(octave_max), 1)[0]), 2) == 1.03
    pe = torch.from_numpy(P.sinusoidal_encoding(4096, 128))
    err = (pe.to(torch.bfloat16).double() - pe).abs().max().item()
    assert err < 2.0**-9 + 1e-7 and round(err, 4) == 0.002  # via float32: rounded twice
    p = torch.tensor([256.0, 257.0], dtype=torch.bfloat16)
    assert p[1].item() == 256.0
    assert torch.equal(*(p[:, None] * torch.from_numpy(omega64).to(torch.bfloat16)))


def test_rope_drawing_score():
    # section 2.10's drawing: one pair (d_model = 2), q = (1, 0), key = (-0.2, 0.95), offset 1
    q, key = np.array([1.0, 0.0]), np.array([-0.2, 0.95])
    scores = [
        (P.rotation_matrix(m, 2) @ q) @ (P.rotation_matrix(n, 2) @ key) for m, n in [(1, 2), (2, 3)]
    ]
    assert math.isclose(scores[0], -0.2 * math.cos(1) + 0.95 * math.sin(1), rel_tol=1e-12)
    assert f"{scores[0]:.4f}" == f"{scores[1]:.4f}" == "0.6913"


def test_float32_table_error_is_half_an_ulp():
    # the prose's 2^-25 (round to nearest of numbers in [-1, 1]), reached at 4,096 positions
    module = P.SinusoidalPositionalEncoding(128, max_len=4096)
    err = np.abs(module.pe.double().numpy() - P.sinusoidal_encoding(4096, 128)).max()
    assert 2.0**-26 < err <= 2.0**-25 and f"{err:.1e}" == "3.0e-08"


def test_rope_applied_to_pe0_is_the_encoding():
    rope = P.RotaryEmbedding(16)
    pe0 = torch.zeros(1, 1, 64, 16)
    pe0[..., 1::2] = 1.0
    assert np.allclose(rope(pe0)[0, 0].double().numpy(), P.sinusoidal_encoding(64, 16), atol=1e-6)


def test_exercise_5_near_repeats_and_the_slow_turn():
    # Ex. 5's four bases (moved from the solution cell): only base 100's first near-repeat falls
    # at the slow pair's first turn (0.5 to 1.5 slow wavelengths); base 30000's comes at 19
    pe_at = {}
    for base in (10, 100, 3000, 30000):
        ang = np.arange(200_000)[:, None] * base ** (-np.arange(0, 4, 2) / 4)
        pe = np.stack([np.sin(ang), np.cos(ang)], axis=-1).reshape(-1, 4)
        hits = np.flatnonzero(np.linalg.norm(pe[1:] - pe[0], axis=1) < 0.2)
        pe_at[base] = int(hits[0]) + 1
    assert pe_at == {10: 358, 100: 63, 3000: 685, 30000: 19}
    slow = {b: 2 * np.pi * math.sqrt(b) for b in pe_at}
    at_first_turn = {b: bool(0.5 * slow[b] < pe_at[b] < 1.5 * slow[b]) for b in pe_at}
    assert at_first_turn == {10: False, 100: True, 3000: False, 30000: False}
    assert round(19 / math.sqrt(30000), 3) == 0.11 and 19 / math.sqrt(30000) > 0.1


def test_float32_error_splits_into_a_harmless_and_a_harmful_rounding():
    # 2.9: rounding omega_i gives an exactly sinusoidal table at other frequencies (its dot
    # products still depend on k alone); rounding each product pos * omega_i does not. Written
    # with torch's float32 arithmetic instead of the chapter's NumPy.
    omega64 = P.sinusoidal_frequencies(128)
    w32 = torch.from_numpy(omega64).float()

    def tables(pos):
        p = torch.from_numpy(pos)
        angles = {
            "float32": (p.float()[:, None] * w32).double(),
            "omega": p.double()[:, None] * w32.double(),  # exact: 16 + 24 bits < 53
            "float64": p.double()[:, None] * torch.from_numpy(omega64),
        }
        return {k: torch.cat([a.sin(), a.cos()], dim=1).numpy() for k, a in angles.items()}

    pos = np.arange(2**16)
    dev = {"product": np.empty(len(pos)), "omega": np.empty(len(pos))}
    for c in np.array_split(pos, 16):
        t = tables(c)
        dev["product"][c] = np.abs(t["float32"] - t["omega"]).max(1)
        dev["omega"][c] = np.abs(t["omega"] - t["float64"]).max(1)
    assert [f"{dev[k][:4096].max():.5f}" for k in ("omega", "product")] == ["0.00012", "0.00012"]
    assert int(np.argmax(dev["product"] > 1e-3)) == 37_840
    assert np.all(dev["product"] <= pos * 2.0**-24 + 1e-15)
    t = tables(np.arange(60_000, 62_001))
    spread = {k: [np.ptp((E[j:] * E[:-j]).sum(1)) for j in (1, 10)] for k, E in t.items()}
    assert [f"{v:.3f}" for v in spread["float32"]] == ["0.011", "0.016"]
    assert max(spread["omega"] + spread["float64"]) < 1e-9


# --- s15 reads: the content-position terms, the centring, bfloat16 storage, the moved checks --


def relative_dimension(A):
    """Dimension of the W with A W A^T relative, by an SVD (the chapter uses matrix_rank)."""
    rows = np.array(
        [
            np.kron(A[m], A[n]) - np.kron(A[m + 1], A[n + 1])
            for m in range(len(A) - 1)
            for n in range(len(A) - 1)
        ]
    )
    sv = np.linalg.svd(rows, compute_uv=False)
    return A.shape[1] ** 2 - int((sv > 1e-10).sum())


@pytest.mark.parametrize("d", [4, 6, 8])
def test_after_centring_only_c_w_c_zero_is_relative(d):
    # 2.8: without centring the relative W are the block form (d numbers); with it, the space
    # has dimension d^2 - (d - 1)^2, the W with C W C = 0, whose term is identically 0
    A = P.sinusoidal_encoding(80, d)
    C = np.eye(d) - np.ones((d, d)) / d
    assert relative_dimension(A) == d
    assert relative_dimension(A @ C) == d**2 - (d - 1) ** 2
    # a block form is centred to a matrix that is no longer of block form (the pair-0 block
    # [[a, b], [-b, a]] does not map (1, 1) to 0), and its term is not relative
    W = commuting_W(np.random.default_rng(d), d)
    assert diagonal_spread(A @ C @ W @ C @ A.T) > 1e-3


def test_content_position_terms_follow_absolute_position():
    # 2.7: one token at all 24 positions, block-form W: the expert's table (s15 #1)
    X, _, W_c, Pm = chapter_tables()
    Xs = np.tile(X[0], (24, 1))
    S = (Xs + Pm) @ W_c @ (Xs + Pm).T
    cp = Xs @ W_c @ Pm.T
    assert (
        f"{diagonal_spread(cp):.2f} {diagonal_spread(S):.2f} {np.ptp(S):.2f}" == "5.98 13.30 13.77"
    )
    # softmax ignores the position-content term here (one value per query row); what is left
    # has exactly the content-position term's spread (the rest is constant or relative)
    pc = Pm @ W_c @ Xs.T
    assert np.ptp(pc, axis=1).max() < 1e-12
    assert math.isclose(diagonal_spread(S - pc), diagonal_spread(cp), rel_tol=1e-9)
    # the content-position table is constant down each column: it depends on n, not n - m
    assert np.ptp(cp, axis=0).max() < 1e-12 and np.ptp(cp[0]) > 1


def test_bfloat16_storage_spreads_the_dot_product_more_than_float32_angles():
    # 2.9: the exact table stored in bfloat16, measured like the float32 angles
    pe = torch.from_numpy(P.sinusoidal_encoding(62_001, 128)[60_000:])
    E = pe.to(torch.bfloat16).double().numpy()
    spread = [np.ptp((E[k:] * E[:-k]).sum(1)) for k in (1, 10)]
    assert [f"{v:.3f}" for v in spread] == ["0.101", "0.078"]
    E32 = pe.float().double().numpy()  # float32 storage of the exact table: no visible spread
    assert max(np.ptp((E32[k:] * E32[:-k]).sum(1)) for k in (1, 10)) < 1e-5


def test_float32_product_is_exact_at_powers_of_two():
    # 2.9's figure: the drops are at pos = 2^j, where pos * omega32 only shifts the exponent
    w32 = P.sinusoidal_frequencies(128).astype(np.float32)
    for j in range(17):
        p = np.float32(2**j)
        assert np.array_equal((p * w32).astype(np.float64), 2.0**j * w32.astype(np.float64))


def test_rms_norm_of_pe_alone_stays_relative_with_tokens_not():
    # formerly the chapter's Appendix A.5 (RMSNorm, cut from the page in s9s2): its asserts
    X, _, W_c, Pm = chapter_tables()
    R = layer_norm(Pm, centre=False)
    assert diagonal_spread(R @ W_c @ R.T) < 1e-12
    part = Pm / np.sqrt(((X + Pm) ** 2).mean(1, keepdims=True))
    assert f"{diagonal_spread(part @ W_c @ part.T):.2f}" == "3.49"  # a new token at each position
    # A.5's control (s30 expert 2): section 2.7's one token at every position, so only the
    # position moves along a diagonal; RMS(x + PE_m) still moves with m through x . PE_m
    Xs = np.tile(X[0], (len(Pm), 1))
    part = Pm / np.sqrt(((Xs + Pm) ** 2).mean(1, keepdims=True))
    S = part @ W_c @ part.T
    assert f"{diagonal_spread(S):.2f} {diagonal_spread(S) / np.ptp(S):.2f}" == "2.05 0.30"
    rms2 = ((Xs + Pm) ** 2).mean(1)  # |x|^2 + 2 x.PE_m + d/2, over d: only x.PE_m moves
    assert np.allclose(
        rms2, (Xs[0] @ Xs[0] + 2 * Pm @ Xs[0] + len(Xs[0]) / 2) / len(Xs[0]), atol=1e-12
    )


def test_rope_scores_do_not_change_when_the_whole_sequence_shifts():
    # moved from section 2.10: the offset argument (a starting position) leaves scores unchanged
    rope = P.RotaryEmbedding(16)
    g = torch.Generator().manual_seed(69)
    Qx, Kx = torch.randn(2, 4, 64, 16, generator=g), torch.randn(2, 4, 64, 16, generator=g)
    s0 = rope(Qx) @ rope(Kx).transpose(-1, -2)
    s1000 = rope(Qx, offset=1000) @ rope(Kx, offset=1000).transpose(-1, -2)
    assert torch.allclose(s1000, s0, atol=1e-4)
    assert not torch.allclose(rope(Qx, offset=1000), rope(Qx), atol=1e-2)  # the rotations differ


def test_exercise_5_explanation_numbers():
    fast, slow = 19 - 3 * 2 * math.pi, 19 / math.sqrt(30000)
    assert f"{fast:.3f} {slow:.3f} {math.hypot(fast, slow):.3f}" == "0.150 0.110 0.186"
    pe = P.sinusoidal_encoding(20, 4, base=30000)
    # the chord is a little shorter than the angles' hypot: the true distance is also < 0.2
    assert np.linalg.norm(pe[19] - pe[0]) < math.hypot(fast, slow) < 0.2


def fit_relative_w(*tables, ridge=1e-6):
    """The W whose row-centred A W A^T changes least along the diagonals for its size (1e-6
    ridge), summed over the tables A.

    Each query row's mean is removed from the entries first: softmax ignores it. The chapter
    solves it with scipy's generalised eigh; here the problem is whitened by a Cholesky factor
    and solved with numpy's eigh (a different route to the same W)."""
    d = tables[0].shape[1]
    EE, DD = np.zeros((d * d, d * d)), np.zeros((d * d, d * d))
    for A in tables:
        T = A.shape[0]
        E = np.einsum("mi,nj->mnij", A, A).reshape(T, T, d * d)
        E = (E - E.mean(1, keepdims=True)).reshape(T * T, d * d)
        D = np.einsum("mi,nj->mnij", A[:-1], A[:-1]) - np.einsum("mi,nj->mnij", A[1:], A[1:])
        D = D.reshape((T - 1) ** 2, d * d)
        EE += E.T @ E
        DD += D.T @ D
    L = np.linalg.cholesky(DD + ridge * np.eye(d * d))
    Li = np.linalg.inv(L)
    vecs = np.linalg.eigh(Li @ EE @ Li.T)[1]
    return np.linalg.solve(L.T, vecs[:, -1]).reshape(d, d)


def spread_over_span(A, W):
    S = A @ W @ A.T
    return diagonal_spread(S) / np.ptp(S)


def test_a_w_fitted_after_centring_is_nearly_relative_and_the_division_breaks_it():
    # 2.8: the fit on uncentred encodings (the ridge's residual), on the centred rows,
    # then one W fitted to 40 normed sentences and measured on 20 it was not fitted to
    X, _, _, Pm = chapter_tables()
    A = Pm - Pm.mean(1, keepdims=True)  # rows C PE_m
    divided = A / (X + Pm).std(1)[:, None]
    W = fit_relative_w(A)
    rel = [spread_over_span(Pm, fit_relative_w(Pm)), spread_over_span(A, W)]
    assert f"{rel[0]:.0e} {rel[1]:.0e}" == "2e-06 1e-05"
    # the fit is not the trivial numerator 0: the table has a span
    assert np.ptp(A @ W @ A.T) > 1e-3 * np.linalg.norm(W)
    # a W fitted before the division, reused after it (the old, unfair comparison): far off
    assert spread_over_span(divided, W) > 0.2

    def normed(s):
        return A / (np.random.default_rng(s).normal(size=Pm.shape) + Pm).std(1)[:, None]

    W_train = fit_relative_w(*[normed(s) for s in range(200, 240)])
    rel_o = [spread_over_span(normed(s), W_train) for s in range(100, 120)]
    rel_tr = [spread_over_span(normed(s), W_train) for s in range(200, 240)]
    got = f"{np.median(rel_o):.2f} {min(rel_o):.2f} {max(rel_o):.2f}"
    assert got == "0.08 0.04 0.21"
    # held-out sentences are no better than the ones fitted (no leak between the two sets)
    assert np.median(rel_tr) <= np.median(rel_o)
    # the division's break is far above the centred fit's residual on every unseen sentence
    assert min(rel_o) > 100 * rel[1]
    # the slowest pair at d = 16 turns 0.007 rad over the 24 positions
    assert f"{23 * P.sinusoidal_frequencies(16)[-1]:.3f}" == "0.007"


def test_section_2_8_ridge_and_length_sweep():
    # 2.8's shares are upper bounds that move with an unscaled ridge and the window (1e-6 is
    # not converged; the chapter now uses 1e-11 scaled with T^2, tested below); each divided
    # share stays far above centring's and below the random W_QK's 0.76
    _, _, _, Pm = chapter_tables()
    C = np.eye(16) - 1 / 16

    def normed(pe, s):
        return pe @ C / (np.random.default_rng(s).normal(size=pe.shape) + pe).std(1)[:, None]

    got = {}
    for T in (24, 48):
        pe = P.sinusoidal_encoding(T, 16)
        for ridge in (1e-6, 1e-9):
            for name, A in [("c", pe @ C), ("x0", pe @ C / pe.std(1)[:, None])]:
                got[T, ridge, name] = spread_over_span(A, fit_relative_w(A, ridge=ridge))
    W9 = fit_relative_w(*[normed(Pm, s) for s in range(200, 240)], ridge=1e-9)
    tok9 = np.median([spread_over_span(normed(Pm, s), W9) for s in range(100, 120)])
    assert f"{got[24, 1e-9, 'c']:.0e} {got[24, 1e-9, 'x0']:.2f} {tok9:.2f}" == "8e-07 0.02 0.10"
    assert f"{got[48, 1e-6, 'c']:.0e} {got[48, 1e-6, 'x0']:.2f} {got[48, 1e-9, 'x0']:.2f}" == (
        "5e-05 0.23 0.05"
    )
    centred = max(v for k, v in got.items() if k[2] == "c")
    assert 100 * centred < min(tok9, *(v for k, v in got.items() if k[2] == "x0"))
    assert max(tok9, *(v for k, v in got.items() if k[2] == "x0")) < 0.76


def test_section_2_9_float64_angles_stored_in_float32():
    # 2.9: the fix (float64 angles, float32 storage) leaves a spread of about 1e-6 far out:
    # above the float64 table's (below 1e-9), far below float32 angles' 0.011
    far = np.arange(60_000, 62_001)
    E = P.sinusoidal_encoding(62_001, 128)[far].astype(np.float32).astype(np.float64)
    s = [np.ptp((E[k:] * E[:-k]).sum(1)) for k in (1, 10)]
    assert [f"{v:.0e}" for v in s] == ["1e-06", "1e-06"]
    assert 1e-9 < min(s) and max(s) < 1e-5


def test_section_2_9_scale_and_bfloat16_near_position_0():
    # 2.9: f(1) at d_model = 128 is the scale of the spreads; bfloat16 storage spreads the dot
    # product about as much at positions 0 to 2,000 as far out
    assert f"{f(1, 128):.2f}" == "62.09"
    pe = torch.from_numpy(P.sinusoidal_encoding(2_001, 128))
    E = pe.to(torch.bfloat16).double().numpy()
    assert [f"{np.ptp((E[k:] * E[:-k]).sum(1)):.3f}" for k in (1, 10)] == ["0.087", "0.079"]


def test_random_w_spread_over_span_over_ten_more_seeds():
    # A.4: section 2.6's draw (0.76) is typical of ten more (0.68 to 0.93)
    _, W, _, Pm = chapter_tables()
    rel = [diagonal_spread(Pm @ W @ Pm.T) / np.ptp(Pm @ W @ Pm.T)]
    for seed in range(100, 110):
        gen = np.random.default_rng(seed)
        Wr = gen.normal(size=(16, 16)) @ gen.normal(size=(16, 16)).T / 16
        rel.append(diagonal_spread(Pm @ Wr @ Pm.T) / np.ptp(Pm @ Wr @ Pm.T))
    assert f"{rel[0]:.2f} {min(rel[1:]):.2f} {max(rel[1:]):.2f}" == "0.76 0.68 0.93"


def test_section_2_8_sigma_moves_with_position_without_tokens():
    # 2.8's X = 0 control: sigma_m^2 = 1/2 - mu_m^2, and a W fitted to LN(PE) alone is far off
    X, _, W_c, Pm = chapter_tables()
    mu, sigma0 = Pm.mean(1), Pm.std(1)
    assert np.allclose(sigma0**2, 0.5 - mu**2, rtol=0, atol=1e-12)
    assert f"{sigma0.min():.2f} {sigma0.max():.2f} {mu.min():.2f} {mu.max():.2f}" == (
        "0.45 0.65 0.27 0.55"
    )
    sigma = (X + Pm).std(1)
    assert f"{sigma.min():.2f} {sigma.max():.2f}" == "0.76 1.50"
    alone = (Pm - mu[:, None]) / sigma0[:, None]
    assert f"{spread_over_span(alone, fit_relative_w(alone)):.2f}" == "0.04"
    # the strawman, moved here from 2.8: section 2.6's block form, chosen before the norm,
    # is far from relative after centring
    A = Pm - mu[:, None]
    assert f"{diagonal_spread(A @ W_c @ A.T):.2f}" == "5.46"


def test_odd_width_norm_stops_below_two():
    # 2.5: at d_model = 7 the lone sine is the slowest column; by position 1,999 its angle is
    # 0.745 rad, so the norm reaches sqrt(3 + sin(0.745)^2) = 1.8601, not 2
    angle = 1999 * P.sinusoidal_frequencies(7)[-1]
    assert f"{angle:.3f}" == "0.745"
    odd = np.linalg.norm(P.sinusoidal_encoding(2000, 7), axis=1)
    assert math.isclose(odd.max(), math.sqrt(3 + math.sin(angle) ** 2), rel_tol=1e-12)


# --- Appendix A.7's former search, kept here (the chapter now refits in closed form) -------


def factored_forms(A, B=None):
    """Section 2.8's E and S for the table A W B^T, factored over m and n (B = A unless given):
    E = (A^T A) kron (B_c^T B_c) with B_c the key rows less their mean, and S the four
    Kronecker products of the step pairs (rows m and m + 1). (d^2, d^2) each."""
    B = A if B is None else B
    Bc = B - B.mean(0)
    a, b, c, e = A[:-1], A[1:], B[:-1], B[1:]
    E = np.kron(A.T @ A, Bc.T @ Bc)
    S = np.kron(a.T @ a, c.T @ c) - np.kron(a.T @ b, c.T @ e)
    S = S - np.kron(b.T @ a, e.T @ c) + np.kron(b.T @ b, e.T @ e)
    return E, S


def explicit_forms(A, B):
    """The same two forms summed entry by entry, as the earlier chapter built them."""
    T, d = A.shape
    ent = np.einsum("mi,nj->mnij", A, B).reshape(T, T, d * d)
    ent = (ent - ent.mean(1, keepdims=True)).reshape(T * T, d * d)
    stp = np.einsum("mi,nj->mnij", A[:-1], B[:-1]) - np.einsum("mi,nj->mnij", A[1:], B[1:])
    stp = stp.reshape((T - 1) ** 2, d * d)
    return ent.T @ ent, stp.T @ stp


def search_share(A, B=None, ridge=1e-11):
    """Section 2.8's fitted share: ridge scaled as (T/24)^2, scipy's generalised eigh."""
    from scipy.linalg import eigh

    E, S = factored_forms(A, B)
    d = A.shape[1]
    W = eigh(E, S + ridge * (len(A) / 24) ** 2 * np.eye(d * d))[1][:, -1].reshape(d, d)
    table = A @ W @ (A if B is None else B).T
    return diagonal_spread(table) / np.ptp(table)


def x0_tables(T):
    pe = P.sinusoidal_encoding(T, 16)
    C = np.eye(16) - 1 / 16
    return pe, pe @ C, pe @ C / pe.std(1)[:, None]


def test_section_2_8_factored_forms_equal_the_explicit_sums():
    # the Kronecker factoring is exact, also with different query and key tables
    for T in (24, 48):
        pe, centred, divided = x0_tables(T)
        for A, B in [(divided, divided), (centred, divided), (pe, pe)]:
            for got, ref in zip(factored_forms(A, B), explicit_forms(A, B), strict=True):
                assert np.allclose(got, ref, rtol=0, atol=1e-9 * np.abs(ref).max())


def test_section_2_8_window_length_shares():
    # the search's shares (no longer printed by the chapter); centring's break appears only once the
    # slowest pair turns about a radian, the division's share reaches random W's by 512
    got = {}
    for T in (24, 512):
        pe, centred, divided = x0_tables(T)
        got[T] = (search_share(centred), search_share(divided), search_share(centred, divided))
    assert f"{got[24][0]:.0e} {got[24][1]:.2f} {got[24][2]:.3f}" == "2e-07 0.02 0.011"
    assert f"{got[512][0]:.0e} {got[512][1]:.2f} {got[512][2]:.3f}" == "4e-06 0.80 0.061"
    _, centred, divided = x0_tables(2048)
    assert f"{search_share(centred):.3f} {search_share(centred, divided):.2f}" == "0.002 0.89"
    assert f"{search_share(x0_tables(4096)[1]):.3f}" == "0.212"
    # the random W_QK on the same X = 0 table at 512 positions: the found W is inside its range
    divided = x0_tables(512)[2]
    rnd = []
    for seed in range(100, 110):
        gen = np.random.default_rng(seed)
        W = gen.normal(size=(16, 16)) @ gen.normal(size=(16, 16)).T / 16
        rnd.append(diagonal_spread(divided @ W @ divided.T) / np.ptp(divided @ W @ divided.T))
    assert f"{min(rnd):.2f} {max(rnd):.2f}" == "0.70 0.92" and min(rnd) < got[512][1] < max(rnd)


def test_section_2_8_search_by_another_route_and_ridge():
    # at 24 positions the test file's own fit (explicit forms, Cholesky whitening, numpy eigh)
    # agrees with the chapter's share at its ridge, and a ten times larger ridge moves the
    # shares by under 0.02 (the chapter's convergence check)
    divided = x0_tables(24)[2]
    other = spread_over_span(divided, fit_relative_w(divided, ridge=1e-11))
    assert abs(other - search_share(divided)) < 1e-3
    for T in (24, 512):
        for A in x0_tables(T):
            assert abs(search_share(A, ridge=1e-10) - search_share(A)) < 0.02


def test_section_2_8_centred_spread_is_that_of_d_mu_mu():
    # moved from 2.8's cell: with W_QK = I, X = 0, the centred term f(n - m) - d mu_m mu_n has
    # exactly the diagonal spread of d mu_m mu_n (the f part is relative)
    Pm = P.sinusoidal_encoding(24, 16)
    C = np.eye(16) - np.ones((16, 16)) / 16
    mu = Pm.mean(1)
    assert math.isclose(
        diagonal_spread(Pm @ C @ C @ Pm.T), diagonal_spread(16 * np.outer(mu, mu)), rel_tol=1e-9
    )
    assert f"{diagonal_spread(Pm @ C @ C @ Pm.T):.2f}" == "3.62"


def test_appendix_a7_bound_after_the_division_is_the_lowest_over_every_w():
    # A.7's bound at 512 positions, X = 0: every fitted W (uncentred, centred, divided, keys
    # alone) and ten random W on the table divided on both sides; the keys-alone W gives 0.274,
    # far below the W fitted to that table (0.80) and every random W (from 0.70)
    from scipy.linalg import eigh

    pe, centred, divided = x0_tables(512)

    def fit(A, B=None):
        E, S = factored_forms(A, B)
        return eigh(E, S + 1e-11 * (512 / 24) ** 2 * np.eye(256))[1][:, -1].reshape(16, 16)

    def share(W):
        table = divided @ W @ divided.T
        return diagonal_spread(table) / np.ptp(table)

    fitted = [share(fit(A)) for A in (pe, centred, divided)] + [share(fit(centred, divided))]
    rnd = []
    for seed in range(100, 110):
        gen = np.random.default_rng(seed)
        rnd.append(share(gen.normal(size=(16, 16)) @ gen.normal(size=(16, 16)).T / 16))
    assert f"{min(fitted + rnd):.3f}" == "0.274" and min(fitted + rnd) == fitted[3]
    assert f"{fitted[2]:.2f}" == "0.80" and min(rnd) > 0.69


# --- A.7's controls, moved out of the chapter (the chapter keeps the centred shares) -------


def fit_tables(tables, key_tables=None, ridge=1e-11):
    """The W maximising the summed E / S over several tables (queries A, keys B), as A.7."""
    from scipy.linalg import eigh

    key_tables = key_tables or tables
    forms = [factored_forms(A, B) for A, B in zip(tables, key_tables, strict=True)]
    E, S = sum(f[0] for f in forms), sum(f[1] for f in forms)
    d, scale = tables[0].shape[1], (len(tables[0]) / 24) ** 2
    return eigh(E, S + ridge * scale * np.eye(d * d))[1][:, -1].reshape(d, d)


def share_of(A, W, B=None):
    table = A @ W @ (A if B is None else B).T
    return diagonal_spread(table) / np.ptp(table)


def normed(pe, seed):
    """PE's part of LayerNorm with a new random token at each position (A.7's tokens)."""
    centring = np.eye(pe.shape[1]) - 1 / pe.shape[1]
    tokens = np.random.default_rng(seed).normal(size=pe.shape)
    return pe @ centring / (tokens + pe).std(1)[:, None]


def test_appendix_a7_divided_keys_alone_and_the_bound():
    # formerly A.7's visible checks: after the division (X = 0) the fitted W leaves 0.02 at 24
    # positions and sits inside ten random W's range at 512; keys alone is below the divided
    # table at 24 and breaks by 2,048; the lowest over every W beats every random W at 512
    sh, rnd = {}, []
    for T in (24, 512, 2048):
        _, centred, divided = x0_tables(T)
        sh[T, "keys alone"] = search_share(centred, divided)
        if T <= 512:
            sh[T, "divided"] = search_share(divided)
    divided512 = x0_tables(512)[2]
    for seed in range(100, 110):
        gen = np.random.default_rng(seed)
        W = gen.normal(size=(16, 16)) @ gen.normal(size=(16, 16)).T / 16
        rnd.append(share_of(divided512, W))
    _, centred512, _ = x0_tables(512)
    bound = min(*rnd, share_of(divided512, fit_tables([centred512], [divided512])))
    assert 1e-4 < sh[24, "divided"] < 0.1
    assert min(rnd) < sh[512, "divided"] < max(rnd)
    assert sh[512, "keys alone"] < 0.1 < 0.5 < sh[2048, "keys alone"]
    assert sh[24, "keys alone"] < sh[24, "divided"]
    assert bound < 0.5 * min(rnd)  # a fitted W beats every random one


def test_appendix_a7_tokens_48_positions_and_row_constants():
    # formerly A.7's controls: random tokens (one W fitted to 40 sentences, median over 20
    # others), the 48-position point between 24's and 512's (both sides checked), and the
    # share with each row's least-squares constant taken out barely moving
    q_tok = {}
    for T in (512, 2048):
        pe = P.sinusoidal_encoding(T, 16)
        C = np.eye(16) - 1 / 16
        W = fit_tables([pe @ C] * 40, [normed(pe, s) for s in range(200, 240)], ridge=4e-10)
        q_tok[T] = np.median([share_of(pe @ C, W, normed(pe, s)) for s in range(100, 120)])
    assert q_tok[512] < q_tok[2048]
    tok_share, W_tok = {}, {}
    for T in (24, 512):
        pe = P.sinusoidal_encoding(T, 16)
        W_tok[T] = fit_tables([normed(pe, s) for s in range(200, 240)])
        tok_share[T] = np.median([share_of(normed(pe, s), W_tok[T]) for s in range(100, 120)])
    assert tok_share[24] < 0.2 < tok_share[512]
    div = {T: search_share(x0_tables(T)[2]) for T in (24, 48, 512)}
    assert div[24] < div[48] < div[512]

    def without_row_constants(S):
        T_, U_ = S.shape
        offsets = (np.arange(U_)[None, :] - np.arange(T_)[:, None]).ravel() + T_ - 1
        design = np.hstack([np.eye(T_ + U_ - 1)[offsets], np.repeat(np.eye(T_), U_, 0)[:, 1:]])
        coef = np.linalg.lstsq(design, S.ravel(), rcond=None)[0]
        return S - np.concatenate([[0.0], coef[T_ + U_ - 1 :]])[:, None]

    def share_free(A, W):
        return diagonal_spread(without_row_constants(A @ W @ A.T)) / np.ptp(A @ W @ A.T)

    alone24, pe24 = x0_tables(24)[2], P.sinusoidal_encoding(24, 16)
    free_x0 = share_free(alone24, fit_tables([alone24]))
    free_tok = np.median([share_free(normed(pe24, s), W_tok[24]) for s in range(100, 120)])
    assert abs(free_x0 - div[24]) < 0.01 and abs(free_tok - tok_share[24]) < 0.01


def test_section_2_8_dividing_lowers_this_one_share():
    # 2.8's dropdown: with W_QK = I, X = 0, T = 24, d_model = 16, dividing the centred rows
    # by sigma_m lowers this share (0.57 -> 0.35) only because it more than doubles the span;
    # on section 2.6's linear program the residual does not fall (0.30 -> 0.32, the chapter).
    Pm = P.sinusoidal_encoding(24, 16)
    C = np.eye(16) - np.ones((16, 16)) / 16
    shares = []
    for A in (Pm @ C, Pm @ C / Pm.std(1)[:, None]):
        S = A @ A.T
        shares.append(diagonal_spread(S) / np.ptp(S))
    assert f"{shares[0]:.2f} {shares[1]:.2f}" == "0.57 0.35"
    assert shares[1] < shares[0]


def test_section_2_2_wavelengths_follow_the_definition():
    # moved from section 2.2's cell (implementation checks, not evidence): neighbouring
    # wavelengths differ by 10000^(2/d_model), and the slowest is one step short of 10000 * 2 pi
    d_model = 128
    wavelength = 2 * np.pi / P.sinusoidal_frequencies(d_model)
    assert np.allclose(wavelength[1:] / wavelength[:-1], 10000 ** (2 / d_model), rtol=1e-12)
    assert math.isclose(wavelength[-1] * 10000 ** (2 / d_model), 10000 * 2 * np.pi, rel_tol=1e-12)


# --- 2.8 / A.6: the refit as a projection, six widths (s10: replaces the pinv refit) ---------


def span_of(A, cut=1e-10):
    """An orthonormal basis of the span of A's columns (directions above cut of the largest)."""
    U, s, _ = np.linalg.svd(A, full_matrices=False)
    return U[:, s > cut * s[0]]


def projection_error(A, pe, A_keys=None, pe_keys=None):
    """The least-squares relative error of U U^T F V V^T against F = pe pe_keys^T, computed on
    the (T, T) tables directly (the chapter sums over (d, d) products instead)."""
    A_keys, pe_keys = (A, pe) if A_keys is None else (A_keys, pe_keys)
    U, V, F = span_of(A), span_of(A_keys), pe @ pe_keys.T
    fitted = U @ (U.T @ F @ V) @ V.T
    return np.linalg.norm(fitted - F) / np.linalg.norm(F - F.mean())


def min_norm_weights(A, pe, cut=1e-6):
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    k = s > cut * s[0]
    B = (Vt[k].T / s[k]) @ (U[:, k].T @ pe)
    return B @ B.T


def rows(pe, kind, token=None):
    d = pe.shape[1]
    centred = pe @ (np.eye(d) - 1 / d)
    if kind == "centred":
        return centred
    return centred / ((pe if token is None else pe + token).std(1)[:, None])


def test_section_2_8_projection_is_the_pinv_refit_at_d16():
    # the brief: the projection form gives the chapter's former pinv numbers at d_model = 16
    pe = P.sinusoidal_encoding(2048, 16)
    for T in (512, 2048):
        p, F = pe[:T], pe[:T] @ pe[:T].T
        for kind in ("centred", "divided"):
            A = rows(p, kind)
            Ap = np.linalg.pinv(A, rcond=1e-10)
            e_pinv = np.linalg.norm(A @ (Ap @ F @ Ap.T) @ A.T - F) / np.linalg.norm(F - F.mean())
            assert abs(e_pinv - projection_error(A, p)) < 1e-4, (T, kind)
    got = [projection_error(rows(pe[:T], "divided"), pe[:T]) for T in (512, 2048)]
    assert [f"{g:.1%}" for g in got] == ["14.2%", "11.6%"]
    assert f"{projection_error(rows(pe, 'centred'), pe):.1%}" == "0.4%"


def test_section_2_8_pinv_is_not_least_squares_at_d32():
    # expert s37: at d_model = 32 the divided rows' singular values reach the pinv cutoff and the
    # pinv formula reports far more than the least-squares error. The singular values between the
    # cutoff and float64 rounding are noise, so how much more depends on the CPU's kernels: 92.7%
    # (torch/NumPy portable kernels) and 18.4% (an AMD EPYC's AVX path) against 8.1%; the test
    # asks only for more than twice, and that the spectrum does reach below the cutoff
    p = P.sinusoidal_encoding(512, 32)
    A, F = rows(p, "divided"), p @ p.T
    Ap = np.linalg.pinv(A, rcond=1e-10)
    e_pinv = np.linalg.norm(A @ (Ap @ F @ Ap.T) @ A.T - F) / np.linalg.norm(F - F.mean())
    sv = np.linalg.svd(A, compute_uv=False)
    assert sv[-1] / sv[0] < 1e-12  # numerically rank-deficient: pinv keeps rounding noise
    assert e_pinv > 2 * projection_error(A, p)
    assert f"{projection_error(A, p):.1%}" == "8.1%"


def test_section_2_8_width_sweep_pins_and_new_positions_only():
    # A.6's width sweep (section 2.8's table until s10 round 2), its window columns pinned; and
    # the held-out failure on new positions only (queries
    # and keys both past the 512 fitted), the expert's first variation, at every width
    div, held, top = [], [], []
    for d in (16, 32, 64, 128, 256, 512):
        pe_long = P.sinusoidal_encoding(4096, d)
        p = pe_long[:512]
        div.append(projection_error(rows(p, "divided"), p))
        U = span_of(rows(p, "divided"))
        fitted = U @ (U.T @ p @ P.rotation_matrix(3, d) @ p.T @ U) @ U.T
        top.append(np.mean(fitted[3:].argmax(1) == np.arange(509)))
        W = min_norm_weights(rows(p, "centred"), p)
        A_new, p_new = rows(pe_long, "centred")[512:], pe_long[512:]
        F_new = p_new @ p_new.T
        held.append(
            np.linalg.norm(A_new @ W @ A_new.T - F_new) / np.linalg.norm(F_new - F_new.mean())
        )
    assert [f"{e:.1%}" for e in div] == ["14.2%", "8.1%", "5.0%", "3.1%", "1.6%", "0.7%"]
    assert [f"{b:.1%}" for b in top] == ["93.9%", "97.6%", "99.8%", "99.8%", "100.0%", "100.0%"]
    assert min(held) > 1


def test_appendix_a6_one_token_draws_and_the_longer_window():
    # A.6's ranges over six token draws at 512 positions, and the centred fit on 2,048 positions
    # at d_model = 32 carrying to 4,096 when the cut is 1e-10 (computed on the tables directly)
    p = P.sinusoidal_encoding(512, 16)
    errs, tops = [], []
    for seed in range(30, 36):
        A = rows(p, "divided", np.random.default_rng(seed).normal(size=16))
        errs.append(projection_error(A, p))
        U = span_of(A)
        fitted = U @ (U.T @ p @ P.rotation_matrix(3, 16) @ p.T @ U) @ U.T
        tops.append(np.mean(fitted[3:].argmax(1) == np.arange(509)))
    assert f"{min(errs):.1%} {max(errs):.1%}" == "10.3% 20.5%"
    assert f"{min(tops):.1%} {max(tops):.1%}" == "79.8% 100.0%"
    pe_long = P.sinusoidal_encoding(4096, 32)
    A_long, F_long = rows(pe_long, "centred"), pe_long @ pe_long.T
    W = min_norm_weights(A_long[:2048], pe_long[:2048], cut=1e-10)
    held = np.linalg.norm(A_long @ W @ A_long.T - F_long) / np.linalg.norm(F_long - F_long.mean())
    assert held < 0.1


# --- 2.6 / A.6 (s10, round 2): the share's scale, and the sweep's two controls --------------


def test_section_2_7_share_grows_with_the_token_and_the_rest_is_the_content_position_term():
    # moved from section 2.7 (s12: the chapter no longer states the share, which grows with the
    # token's size, nor its dropdown "The share at other token sizes"; its numbers live here).
    # With one token and a block form, the score less the
    # position-content term is content-content (constant) + content-position + position-position
    # (relative), so its diagonal spread is the content-position term's (5.98); and the share,
    # that spread over the rest's span, grows with the token's size, token by token
    X, _, W_c, Pm = chapter_tables()
    T = len(Pm)

    def parts(x):
        Xx = np.tile(x, (T, 1))
        rest = (Xx + Pm) @ W_c @ (Xx + Pm).T - Pm @ W_c @ Xx.T
        return Xx @ W_c @ Xx.T, Xx @ W_c @ Pm.T, rest

    cc, cp, rest = parts(X[0])
    assert np.ptp(cc) < 1e-12 and diagonal_spread(Pm @ W_c @ Pm.T) < 1e-12
    assert math.isclose(diagonal_spread(rest), diagonal_spread(cp), rel_tol=1e-9)
    assert f"{diagonal_spread(cp):.2f} {diagonal_spread(cp) / np.ptp(rest):.2f}" == "5.98 0.50"

    def share(x):
        _, cp_, rest_ = parts(x)
        return diagonal_spread(cp_) / np.ptp(rest_)

    xs = np.random.default_rng(22).normal(size=(20, 16))
    got = {s: np.array([share(s * x) for x in xs]) for s in (0.25, 1, 4)}
    assert [f"{got[s].min():.2f} {got[s].max():.2f}" for s in (0.25, 1, 4)] == [
        "0.07 0.37",
        "0.24 0.77",
        "0.60 0.93",
    ]
    assert np.all(got[0.25] < got[1]) and np.all(got[1] < got[4])


def test_section_2_7_weight_ratio_moves_with_the_query_and_scales_with_w():
    # 2.7: one token at all 24 positions, block-form W: S[m, m+1] - S[m, m], the log of the
    # weight ratio between the next key and the query's own position, changes by 2.54 (a factor
    # of about 13) as m moves; 0.72 to 3.96 for 20 other N(0, 1) tokens (seed 22)
    X, _, W_c, Pm = chapter_tables()
    T = len(Pm)

    def change(x, W):
        Xx = np.tile(x, (T, 1))
        S = (Xx + Pm) @ W @ (Xx + Pm).T
        return np.ptp(np.diagonal(S, 1) - np.diagonal(S)[:-1])

    assert f"{change(X[0], W_c):.2f} {np.exp(change(X[0], W_c)):.0f}" == "2.54 13"
    lr = [change(x, W_c) for x in np.random.default_rng(22).normal(size=(20, 16))]
    assert f"{min(lr):.2f} {max(lr):.2f}" == "0.72 3.96"
    # "these unscaled scores, this W_QK's scale": the change is proportional to W's scale, so
    # scaled attention (scores / sqrt(16)) divides it by 4
    assert math.isclose(change(X[0], W_c / 4), change(X[0], W_c) / 4, rel_tol=1e-9)


def relative_errors_from(Ws, A, pe):
    """||A W A^T - pe pe^T|| / ||pe pe^T - its mean|| for each W, from (d, d) products only."""
    G, H, M0, s = A.T @ A, A.T @ pe, pe.T @ pe, pe.sum(0)
    FF, HH = np.sum(M0 * M0), H @ H.T
    return [
        math.sqrt(max(np.sum((G @ W @ G) * W) - 2 * np.sum(W * HH) + FF, 0.0))
        / math.sqrt(FF - (s @ s) ** 2 / len(pe) ** 2)
        for W in Ws
    ]


def test_appendix_a6_control_a_the_window_does_not_identify_w_without_layernorm():
    # control (a): raw PE rows fitted on 512 positions. The smallest-norm W is V V^T, the
    # projection onto the directions the window spans, so A W A^T - F = PE (V V^T - I) PE^T and
    # its norm on 4,096 positions comes from that form here (the chapter: the general formula)
    raw, cen, div, ranks = [], [], [], []
    for d in (16, 32, 64, 128, 256, 512):
        pe_long = P.sinusoidal_encoding(4096, d)
        p = pe_long[:512]
        cuts = (1e-6, 1e-3, 1e-10)
        W_raw = [min_norm_weights(p, p, cut) for cut in cuts]
        _, s, Vt = np.linalg.svd(p, full_matrices=False)
        V = Vt[s > 1e-6 * s[0]].T
        assert np.allclose(W_raw[0], V @ V.T, rtol=0, atol=1e-8)  # I on the span, 0 off it
        ranks.append(V.shape[1])
        M0, D, tot = pe_long.T @ pe_long, V @ V.T - np.eye(d), pe_long.sum(0)
        norm_F = math.sqrt(np.sum(M0 * M0) - (tot @ tot) ** 2 / 4096**2)
        raw.append(math.sqrt(np.sum((M0 @ D) * (M0 @ D).T)) / norm_F)
        assert relative_errors_from(W_raw[:1], p, p)[0] < 1e-3  # it gives f on its window
        W_cen = [min_norm_weights(rows(p, "centred"), p, cut) for cut in cuts]
        held_raw = relative_errors_from(W_raw, pe_long, pe_long)
        held_cen = relative_errors_from(W_cen, rows(pe_long, "centred"), pe_long)
        assert math.isclose(held_raw[0], raw[-1], rel_tol=1e-6)  # the two routes agree
        cen.append(held_cen[0])
        W_div = [min_norm_weights(rows(p, "divided"), p, cut) for cut in cuts]
        div.extend(relative_errors_from(W_div, rows(pe_long, "divided"), pe_long))
        if d >= 64:  # the variation: at every cut, raw and centred rows alike miss by over 100%
            assert min(held_raw + held_cen) > 1
        else:  # at 16 and 32 the centring adds to the miss, at every cut
            assert all(c > r for c, r in zip(held_cen, held_raw, strict=True))
    assert ranks == [15, 23, 35, 55, 85, 124]
    assert [f"{e:.0%}" for e in raw] == ["12%", "78%", "111%", "131%", "141%", "146%"]
    assert [f"{e:.0%}" for e in cen] == ["510%", "323%", "124%", "111%", "126%", "143%"]
    assert f"{min(div):.0%}" == "125%"  # the divided rows' window weights, every width and cut


def test_appendix_a6_control_b_the_fits_on_4096_positions():
    # control (b), by another route: the projection U U^T F U U^T with U from an SVD of the
    # 4,096 rows (the chapter: the eigenvectors of A^T A). At the chapter's cut 1e-6 the printed
    # values; at 1e-10 (the variation) the same picture within 0.2 percentage points
    out, size = {}, []
    for d in (16, 32, 64, 128, 256, 512):
        pe = P.sinusoidal_encoding(4096, d)
        for kind in ("centred", "divided"):
            U_all, s, Vt = np.linalg.svd(rows(pe, kind), full_matrices=False)
            # the centred rows' weights' size ||W||_F (the chapter: from A^T A's eigenvectors)
            if kind == "centred":
                k = s > 1e-6 * s[0]
                B = (Vt[k].T / s[k]) @ (U_all[:, k].T @ pe)
                size.append(float(np.linalg.norm(B @ B.T)))
            for cut in (1e-6, 1e-10):
                UtP = U_all[:, s > cut * s[0]].T @ pe
                M0, tot = pe.T @ pe, pe.sum(0)
                FF = np.sum(M0 * M0)
                kept = np.sum((UtP @ UtP.T) ** 2)
                out[d, kind, cut] = math.sqrt(
                    max(FF - kept, 0.0) / (FF - (tot @ tot) ** 2 / 4096**2)
                )
    widths = (16, 32, 64, 128, 256, 512)
    assert [f"{out[d, 'centred', 1e-6]:.1%}" for d in widths] == ["16.0%"] + ["0.0%"] * 5
    assert [f"{out[d, 'divided', 1e-6]:.1%}" for d in widths] == [
        "18.0%",
        "5.6%",
        "3.7%",
        "2.5%",
        "1.6%",
        "1.1%",
    ]
    assert (
        max(abs(out[d, k, 1e-10] - out[d, k, 1e-6]) for d in widths for k in ("centred", "divided"))
        < 2e-3
    )
    assert max(out[d, "centred", 1e-10] for d in widths[1:]) < 1e-3
    assert np.all(np.diff([out[d, "divided", 1e-10] for d in widths]) < 0)
    # against ||I||_F = sqrt(d_model): 434.4 at 32, within 10 times sqrt(d_model) elsewhere
    assert np.allclose(size, [20.5, 434.4, 57.8, 25.9, 19.5, 18.6], rtol=0, atol=0.05), size
    ratios = [g / math.sqrt(d) for g, d in zip(size, widths, strict=True)]
    assert ratios[1] > 50 and max(ratios[:1] + ratios[2:]) < 10


def test_appendix_a6_the_centred_fit_is_exact_while_the_row_sums_lie_in_its_span():
    # A.6's longer windows by other routes than the chapter's QR: the fit error of the weights
    # from A^T A (cut 1e-6, control (b)'s route) within 0.1 percentage point of the printed
    # value, and the part of PE 1 outside the span of PE C's columns by lstsq on the long rows
    want = {16: (0.0, 16.0, 25.7, 25.4), 32: (0.0, 0.0, 8.3, 18.1), 64: (0.0, 0.0, 0.0, 12.8)}
    outside = {}
    for d, errs in want.items():
        pe_all = P.sinusoidal_encoding(65_536, d)
        for T, e_want in zip((512, 4096, 16_384, 65_536), errs, strict=True):
            pe = pe_all[:T]
            A = rows(pe, "centred")
            lam, V = np.linalg.eigh(A.T @ A)
            k = lam > 1e-12 * lam[-1]
            B = (V[:, k] / lam[k]) @ (V[:, k].T @ (A.T @ pe))
            (e,) = relative_errors_from([B @ B.T], A, pe)
            assert abs(100 * e - e_want) < 0.1, (d, T, e)
            r = pe.sum(1)
            x = np.linalg.lstsq(A, r, rcond=1e-10)[0]
            outside[d, T] = np.linalg.norm(r - A @ x) / np.linalg.norm(r)
            assert (e_want == 0) == (outside[d, T] < 1e-6), (d, T, outside[d, T])
    assert [round(outside[k], 2) for k in ((16, 4096), (32, 16_384), (64, 65_536))] == [
        0.37,
        0.32,
        0.94,
    ]
    assert min(outside[d, 65_536] for d in (16, 32)) > 0.99


# --- A.6 (s11c2b): the least-squares refits of W_QK, withdrawn from the chapter -------------
# The chapter no longer reports these fits or draws verdicts from them (oracle fits, scored on
# their own window or by an error measure softmax does not use). Their former in-cell asserts
# live here as checks of what the fitting code outputs; they are not claims of the book.


def _a6_span_basis(A, cut=1e-10):
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    r = int(np.sum(s > cut * s[0]))
    return U[:, :r], s[:r], Vt[:r]


def _a6_fit_error(U, P_, Q_=None, V=None):
    # F = P_ Q_^T: || U U^T F V V^T - F || / || F - its mean ||, from (d, d) products
    Q_, V = (P_ if Q_ is None else Q_), (U if V is None else V)
    FF = np.sum((P_.T @ P_) * (Q_.T @ Q_))
    kept = np.sum(((U.T @ P_) @ (Q_.T @ V)) ** 2)
    mean_part = (P_.sum(0) @ Q_.sum(0)) ** 2 / (len(P_) * len(Q_))
    return math.sqrt(max(FF - kept, 0.0) / (FF - mean_part))


def _a6_top_key_share(U, pe_, j=3):
    M = (U.T @ pe_) @ P.rotation_matrix(j, pe_.shape[1]) @ (pe_.T @ U)
    return np.mean((U @ M @ U.T)[j:].argmax(1) == np.arange(len(U) - j))


def _a6_weights(A, pe_, cuts=(1e-6,)):
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    B = [(Vt[k].T / s[k]) @ (U[:, k].T @ pe_) for k in (s > cut * s[0] for cut in cuts)]
    return [b @ b.T for b in B]


def _a6_weights_from(G, H, cut=1e-6):
    lam, V = np.linalg.eigh(G)
    k = lam > cut**2 * lam[-1]
    B = (V[:, k] / lam[k]) @ (V[:, k].T @ H)
    return B @ B.T


def _a6_errors_from(Ws, G, H, GP, s, T_):
    FF, mean_part, HH = np.sum(GP * GP), (s @ s) ** 2 / T_**2, H @ H.T
    return [
        math.sqrt(max(np.sum((G @ W @ G) * W) - 2 * np.sum(W * HH) + FF, 0.0) / (FF - mean_part))
        for W in Ws
    ]


def test_appendix_a6_withdrawn_width_sweep_its_controls_and_longer_windows():
    # the former A.6 sweep cell (s11 round 1), its asserts unchanged; plus the expert's (s42)
    # point that the divided rows' "at least 125%" floor is the 1e-3 cut's: at 1e-6 they miss
    # by over 1e5 % at every width
    widths, T_fit, T_long, cuts = (16, 32, 64, 128, 256, 512), 512, 4096, (1e-6, 1e-3, 1e-10)
    sweep = {}
    for w in widths:
        C_w, pe_long = np.eye(w) - 1 / w, P.sinusoidal_encoding(T_long, w)
        pe_w = pe_long[:T_fit]
        rows_w = {"raw": pe_w, "centred": pe_w @ C_w, "divided": pe_w @ C_w / pe_w.std(1)[:, None]}
        for name in ("centred", "divided"):
            sweep[w, name] = _a6_fit_error(_a6_span_basis(rows_w[name])[0], pe_w)
        Y = pe_long / pe_long.std(1)[:, None]
        M0, M1, M2, s_l = pe_long.T @ pe_long, pe_long.T @ Y, Y.T @ Y, pe_long.sum(0)
        long_GH = {
            "raw": (M0, M0),
            "centred": (C_w @ M0 @ C_w, C_w @ M0),
            "divided": (C_w @ M2 @ C_w, C_w @ M1.T),
        }
        W_win = {name: _a6_weights(A, pe_w, cuts) for name, A in rows_w.items()}
        for name, (G, H) in long_GH.items():
            sweep[w, name, "on 4,096"] = _a6_errors_from(W_win[name], G, H, M0, s_l, T_long)
        M_w = pe_w.T @ pe_w
        (sweep[w, "raw"],) = _a6_errors_from(W_win["raw"][:1], M_w, M_w, M_w, pe_w.sum(0), T_fit)
        W0 = W_win["raw"][0]
        sweep[w, "projection"] = np.abs(W0 @ W0 - W0).max()
        for name in ("centred", "divided"):
            G, H = long_GH[name]
            (sweep[w, name, "fitted on 4,096"],) = _a6_errors_from(
                [_a6_weights_from(G, H)], G, H, M0, s_l, T_long
            )
    big = [w for w in widths if w >= 64]
    div_held = [e for w in widths for e in sweep[w, "divided", "on 4,096"]]
    err_d = [sweep[w, "divided"] for w in widths]
    long_c, long_d = (
        [sweep[w, name, "fitted on 4,096"] for w in widths] for name in ("centred", "divided")
    )
    assert max(sweep[w, k] for w in widths for k in ("centred", "raw")) < 1e-3
    assert all(min(sweep[w, name, "on 4,096"]) > 1 for w in big for name in ("raw", "centred"))
    assert min(div_held) >= 1.25
    assert max(sweep[w, "projection"] for w in widths) < 1e-6
    assert all(
        c > r
        for w in (16, 32)
        for c, r in zip(sweep[w, "centred", "on 4,096"], sweep[w, "raw", "on 4,096"], strict=True)
    )
    assert np.all(np.diff(err_d) < 0) and np.all(np.diff(long_d) < 0) and long_d[-1] < 0.02
    assert max(long_c[1:]) < 1e-3 and long_c[0] > 0.1
    # the expert's point: the floor of 125% is the 1e-3 cut's; at 1e-6 every width is far above
    assert min(sweep[w, "divided", "on 4,096"][0] for w in widths) > 1e3
    div_by_cut = [sweep[w, "divided", "on 4,096"] for w in widths]
    assert all(min(e) == e[1] for e in div_by_cut)  # each width's lowest: the cut 1e-3

    # the longer windows (widths 16 to 64): the centred fit's error against the part of PE 1
    # outside the span of PE C's columns (the chapter keeps only the latter)
    windows, by_window, slow_part = (512, 4096, 16_384, 65_536), {}, {}
    for w in (16, 32, 64):
        pe_all = P.sinusoidal_encoding(windows[-1], w)
        for T_ in windows:
            R = np.linalg.qr(pe_all[:T_], mode="r")
            U, s_c, Vt_c = _a6_span_basis(R - R.mean(1, keepdims=True))
            r = R.sum(1)
            v = Vt_c.T @ ((U.T @ r) / s_c)
            u = 1 - (v - v.mean())
            slow_part[w, T_] = np.sum(u[w // 2 :] ** 2) / np.sum(u**2)
            FF, col = np.sum((R.T @ R) ** 2), pe_all[:T_].sum(0)
            kept = np.sum(((U.T @ R) @ (R.T @ U)) ** 2)
            by_window[w, T_] = (
                math.sqrt(max(FF - kept, 0.0) / (FF - (col @ col) ** 2 / T_**2)),
                np.linalg.norm(r - U @ (U.T @ r)) / np.linalg.norm(r),
            )
    assert all((e < 1e-3) == (o < 1e-6) and (e < 1e-3 or o > 0.3) for e, o in by_window.values())
    assert min(slow_part[k] for k, (e, _) in by_window.items() if e < 1e-3) > 0.99
    assert min(by_window[w, 65_536][0] for w in (32, 64)) > 0.05
    assert all(
        abs(by_window[w, 4096][0] - sweep[w, "centred", "fitted on 4,096"]) < 1e-3
        for w in (16, 32, 64)
    )


def test_appendix_a6_withdrawn_d16_windows_scored_on_the_window():
    # the former d_model = 16 cell: refits on 512, 2,048 and 4,096 positions, scored on the
    # positions they were fitted on (which is why the chapter no longer reports them)
    d16 = 16
    C16 = np.eye(d16) - np.ones((d16, d16)) / d16
    x_tok = np.random.default_rng(30).normal(size=d16)
    wins = (512, 2048, 4096)
    fit, back3 = {}, {}
    for T_ in wins:
        pe_T = P.sinusoidal_encoding(T_, d16)
        rows_T = {
            "centred": pe_T @ C16,
            "divided": pe_T @ C16 / pe_T.std(1)[:, None],
            "divided, one token": pe_T @ C16 / (pe_T + x_tok).std(1)[:, None],
        }
        for name, A in rows_T.items():
            U = _a6_span_basis(A)[0]
            fit[T_, name], back3[T_, name] = _a6_fit_error(U, pe_T), _a6_top_key_share(U, pe_T)
    pe512 = P.sinusoidal_encoding(512, d16)
    U512 = _a6_span_basis(pe512 @ C16)[0]
    max_err = np.abs(U512 @ (U512.T @ pe512) @ (pe512.T @ U512) @ U512.T - pe512 @ pe512.T).max()
    draws = []
    for seed in range(30, 36):
        x_s = np.random.default_rng(seed).normal(size=d16)
        U = _a6_span_basis(pe512 @ C16 / (pe512 + x_s).std(1)[:, None])[0]
        draws.append((_a6_fit_error(U, pe512), _a6_top_key_share(U, pe512)))
    e_dr, b_dr = zip(*draws, strict=True)
    assert max_err < 1e-5 and fit[2048, "centred"] < 0.01 < 0.1 < fit[4096, "centred"]
    assert all(back3[T_, "centred"] == 1 > 0.97 > back3[T_, "divided"] for T_ in wins)
    assert min(e_dr) < fit[512, "divided, one token"] and min(b_dr) < 0.9 < max(b_dr)
    assert [f"{back3[T_, n]:.1%}" for n in ("divided", "divided, one token") for T_ in wins] == [
        "93.9%",
        "93.3%",
        "95.1%",
        "94.3%",
        "87.7%",
        "78.4%",
    ]


def test_appendix_a6_window_weights_held_out_by_the_top_key():
    # expert s42 (chk4): the window's weights (positions 0..511, cut 1e-6), refitted to
    # f(n - m + 3), scored on queries 512..4,095 with a causal mask by the top key, what a
    # softmax reader uses: raw rows 100%, centred 53-90%, divided 1-5%
    held, inside = {}, {}
    for d in (16, 32, 64):
        C = np.eye(d) - 1 / d
        pe_l, R3 = P.sinusoidal_encoding(4096, d), P.rotation_matrix(3, d)
        for name in ("raw", "centred", "divided"):
            A_l = pe_l if name == "raw" else pe_l @ C
            if name == "divided":
                A_l = A_l / pe_l.std(1)[:, None]
            U, s, Vt = np.linalg.svd(A_l[:512], full_matrices=False)
            k = s > 1e-6 * s[0]
            B = (Vt[k].T / s[k]) @ (U[:, k].T @ pe_l[:512])
            S = A_l @ (B @ R3 @ B.T) @ A_l.T
            inside[d, name] = np.mean(S[3:512, :512].argmax(1) == np.arange(509))
            S[np.triu_indices(4096, 1)] = -np.inf  # causal: keys up to the query
            held[d, name] = np.mean(S[512:].argmax(1) == np.arange(509, 4093))
    assert all(held[d, "raw"] == 1 for d in (16, 32, 64))
    assert [f"{held[d, 'centred']:.1%}" for d in (16, 32, 64)] == ["57.3%", "52.7%", "90.2%"]
    assert max(held[d, "divided"] for d in (16, 32, 64)) < 0.06
    assert [f"{inside[d, 'divided']:.1%}" for d in (16, 32, 64)] == ["93.9%", "97.6%", "99.8%"]


# --- s12c2b: the s46 expert's controls ------------------------------------------------------


def _a6_window_w(pe, cut=1e-10):
    """A.6's W_QK = B B^T for a window (rows of pe), B = I + v 1^T / d, with v the least-squares
    solution of PE C v = PE 1 by lstsq on the rows themselves (the chapter: a QR, then an SVD)."""
    d = pe.shape[1]
    C = np.eye(d) - 1 / d
    v = np.linalg.lstsq(pe @ C, pe.sum(1), rcond=cut)[0]
    B = np.eye(d) + np.outer(v, np.ones(d)) / d
    return C @ B @ B.T @ C - np.eye(d)  # the centred term minus f is PE M PE^T


def _a6_miss(M, pe):
    """The largest |PE M PE^T| over f's span on the offsets of pe's window."""
    d = pe.shape[1]
    return np.abs(pe @ M @ pe.T).max() / (d / 2 - f(np.arange(len(pe)), d).min())


def test_appendix_a6_held_out_next_window_by_lstsq_and_another_cut():
    # A.6's held-out column by another route (lstsq on the T rows, the whole (T, T) tables):
    # on the window below 1e-6 of f's span, on the next T positions the printed values
    printed = {(16, 512): 4.9e-3, (32, 512): 2.9e-3, (64, 512): 4.3e-2, (32, 4096): 0.20}
    printed[64, 4096] = 1.3
    for (d, T), want in printed.items():
        pe = P.sinusoidal_encoding(2 * T, d)
        M = _a6_window_w(pe[:T])
        on_window, nxt = _a6_miss(M, pe[:T]), _a6_miss(M, pe[T:])
        assert on_window < 1e-6 and f"{nxt:.1e}" == f"{want:.1e}", (d, T, on_window, nxt)
        # the miss grows with the distance: the first T/8 positions past the window miss by
        # far less than the next T (under 1e-3 of the span)
        assert _a6_miss(M, pe[T : T + T // 8]) < min(1e-3, nxt / 10), (d, T)
    # the first variation, another cut (1e-12): another W_QK, the held-out miss changes a lot
    # ("falls far on two windows and rises on one")
    other = {}
    for d, T in printed:
        pe = P.sinusoidal_encoding(2 * T, d)
        M = _a6_window_w(pe[:T], cut=1e-12)
        assert _a6_miss(M, pe[:T]) < 1e-6
        other[d, T] = _a6_miss(M, pe[T:])
    assert other[32, 512] < 1e-4 < 2.9e-3 and other[64, 4096] < 0.05 < 1.3
    assert other[64, 512] > 2 * 4.3e-2
    assert all(math.isclose(other[k], printed[k], rel_tol=0.05) for k in ((16, 512), (32, 4096)))


def test_section_2_7_a_slow_pair_makes_g_nearly_straight_on_a_window():
    # 2.7's "over all positions": u = W_QK^T x on the slowest pair's sine (d_model = 16), slope
    # 0.1 per position: on a finite window g(n + 1) - g(n) barely changes (an offset bias the
    # window cannot tell from a relative term), while g itself moves far
    d = 16
    om = P.sinusoidal_frequencies(d)
    u = np.zeros(d)
    u[14] = 0.1 / om[7]
    for T, step_var, moved in ((24, 3e-6, 2.2), (128, 1e-4, 12), (512, 2e-3, 50)):
        g = P.sinusoidal_encoding(T, d) @ u
        assert np.ptp(np.diff(g)) < step_var and np.ptp(g) > moved, (T, np.ptp(np.diff(g)))
    # but it is bounded over all positions, so the step does change further out
    g_far = P.sinusoidal_encoding(20_000, d) @ u
    assert np.ptp(np.diff(g_far)) > 0.1


def test_appendix_a4_r3_reader_with_tokens_other_draws():
    # A.4: W_QK = R(3) with section 2.6's token scale, 50 draws of 24 tokens: key m - 3 tops
    # 5.3% of the queries (seed 23, printed), near 1/24; other seeds agree; ten times smaller
    # tokens: 82.2% (printed), over 0.5 for the other seeds too; the lead f(0) - f(1) = 0.51
    T, d = 24, 16
    Pm, R3 = P.sinusoidal_encoding(T, d), P.rotation_matrix(3, d)

    def tops(seed, scale):
        Z = scale * np.random.default_rng(seed).normal(size=(50, T, d)) + Pm
        S = Z @ R3 @ Z.transpose(0, 2, 1)
        return np.mean(S[:, 3:].argmax(2) == np.arange(T - 3))

    assert f"{tops(23, 1.0):.1%} {tops(23, 0.1):.1%}" == "5.3% 82.2%"
    for seed in (24, 25, 40):
        assert tops(seed, 1.0) < 2 / T and tops(seed, 0.1) > 0.5
    assert f"{f(0, d) - f(1, d):.2f}" == "0.51"


def test_exercise_6_opposite_senses_need_one_channel_per_pair_negated():
    # Ex. 6's comment: a half-split model with RoFormer's sign, run through the package's
    # RotaryEmbedding (neighbour pairs, the book's sign): permuting the q/k channels alone gives
    # other scores; permuting and negating one channel of each pair gives the same scores
    T, d = 6, 16
    g = np.random.default_rng(0)
    q, k = g.standard_normal((T, d)), g.standard_normal((T, d))
    h = d // 2
    angle = np.arange(T)[:, None] * 1e4 ** (-2 * np.arange(h) / d)

    def rope_half(x):  # RoFormer's sign, channel i paired with i + d/2
        a, b = x[:, :h], x[:, h:]
        return np.concatenate(
            [a * np.cos(angle) - b * np.sin(angle), a * np.sin(angle) + b * np.cos(angle)], 1
        )

    S_half = rope_half(q) @ rope_half(k).T
    inv = np.argsort(np.r_[0:d:2, 1:d:2])  # half-split channels -> neighbour pairs
    sign = np.where(np.arange(d) % 2 == 1, -1.0, 1.0)  # the second channel of each pair

    def pkg(x):
        return P.RotaryEmbedding(d)(torch.from_numpy(x).view(1, 1, T, d))[0, 0].numpy()

    permuted = pkg(q[:, inv]) @ pkg(k[:, inv]).T
    negated = pkg(q[:, inv] * sign) @ pkg(k[:, inv] * sign).T
    assert np.abs(permuted - S_half).max() > 1 and np.allclose(negated, S_half, atol=1e-5)


# --- s12c2c: the s48 expert's controls ------------------------------------------------------


def _rows_free_left(S):
    """The range left in S after the best (least squares) c_m + h(n - m), by another route than
    the chapter's lstsq: the pseudo-inverse of the indicator columns (one a row, one an offset)."""
    T = len(S)
    m_, n_ = np.indices(S.shape)
    A = np.zeros((T * T, 3 * T - 1))
    A[np.arange(T * T), m_.ravel()] = 1
    A[np.arange(T * T), T + (n_ - m_).ravel() + T - 1] = 1
    return np.ptp(S.ravel() - A @ (np.linalg.pinv(A) @ S.ravel()))


def test_appendix_a4_slowest_pair_changes_are_numbers_per_row_on_longer_windows_too():
    # A.4: adding 0.5 at (0, 15) (pair 0 to the slowest pair) or (14, 15) (inside it) leaves, after
    # the best number per row plus function of n - m, 1.7e-05 and 3.7e-08 on section 2.6's 24
    # positions (printed), against 0.55 and 1.1 for section 2.6's changes (1, 1) and (0, 2) (least
    # squares, an upper bound; the chapter prints the floor, 0.50 and 0.88: the linear-program test
    # below). The
    # block form itself is relative, so the residual is that of the added term alone. First
    # variation, longer windows: the slow pair turns more and its residuals grow, yet stay small
    d, added = 16, [(0, 15), (14, 15), (1, 1), (0, 2)]
    W_c = commuting_W(np.random.default_rng(21), d)
    for T in (24, 48, 96):
        Pm, left = P.sinusoidal_encoding(T, d), {}
        for i, j in added:
            W = W_c.copy()
            W[i, j] += 0.5
            left[i, j] = _rows_free_left(Pm @ W @ Pm.T)
        if T == 24:
            assert [f"{left[k]:.2g}" for k in added] == ["1.7e-05", "3.7e-08", "0.55", "1.1"]
        assert max(left[0, 15], left[14, 15]) < 1e-3 < 0.5 < min(left[1, 1], left[0, 2]), (T, left)


def test_appendix_a6_wide_tables_by_lstsq_other_cuts_and_longer_windows():
    # A.6's rows at d_model = 128 and 512 by another route (lstsq on the rows): the W_QK built on
    # 512 positions matches f there (below 1e-6 of f's span) at the cuts 1e-8, 1e-10 and 1e-12, and
    # misses the next 512 positions by 0.1 or more at each: the drift does not hang on the cut
    for d in (128, 512):
        pe = P.sinusoidal_encoding(1024, d)
        for cut in (1e-8, 1e-10, 1e-12):
            M = _a6_window_w(pe[:512], cut)
            assert _a6_miss(M, pe[:512]) < 1e-6 and _a6_miss(M, pe[512:]) > 0.1, (d, cut)
    # at d_model = 512 on 2,048 positions too (a window the chapter does not run)
    pe = P.sinusoidal_encoding(4096, 512)
    M = _a6_window_w(pe[:2048])
    assert _a6_miss(M, pe[:2048]) < 1e-6 and _a6_miss(M, pe[2048:]) > 0.1
    # the s48 expert's longer window: at d_model = 128, 32,768 positions are inside the span too
    R = np.linalg.qr(P.sinusoidal_encoding(32_768, 128), mode="r")
    U, s, _ = np.linalg.svd(R - R.mean(1, keepdims=True))
    U, r = U[:, s > 1e-10 * s[0]], R.sum(1)
    assert np.linalg.norm(r - U @ (U.T @ r)) / np.linalg.norm(r) < 1e-6


def test_section_2_9_float32_range_over_f1():
    # 2.9: the far-out range 0.011 of PE[pos] . PE[pos+1], float32 angles, is 2e-4 of f(1) = 62.09
    # and about 1/400 of f(1) - f(2) = 4.71, the gap between neighbouring offsets
    d, far = 128, np.arange(60_000, 62_001)
    a32 = (far.astype(np.float32)[:, None] * P.sinusoidal_frequencies(d).astype(np.float32)).astype(
        np.float64
    )
    E = np.empty((len(far), d))
    E[:, 0::2], E[:, 1::2] = np.sin(a32), np.cos(a32)
    rng = np.ptp((E[1:] * E[:-1]).sum(1))
    gap = f(1, d) - f(2, d)
    assert f"{rng:.3f}" == "0.011" and f"{rng / f(1, d):.0e}" == "2e-04"
    assert f"{gap:.2f}" == "4.71" and round(gap / rng, -2) == 400


# --- s12c2d: the s49 expert's rows-free measure for section 2.6's random W_QK ---------------


def test_section_2_6_random_w_far_from_relative_with_a_number_per_row_free():
    # section 2.6: after the best (least squares) c_m + h(n - m), the random W_QK's
    # position-position term keeps 4.29 of its 7.19 span (least squares: an upper bound on the
    # best fit's range; A.4 prints the floor, 3.71, pinned in the linear-program test below).
    # First variations: longer windows of the same draw stay over half; ten other draws (A.4's
    # seeds 100 to 109) all keep over a quarter: not one draw's luck
    _, W, _, Pm = chapter_tables()
    S = Pm @ W @ Pm.T
    assert f"{_rows_free_left(S):.2f}" == "4.29" and f"{np.ptp(S):.2f}" == "7.19"
    for T in (48, 96):
        pe = P.sinusoidal_encoding(T, 16)
        S = pe @ W @ pe.T
        assert _rows_free_left(S) > 0.5 * np.ptp(S), T
    shares = []
    for seed in range(100, 110):
        g = np.random.default_rng(seed)
        Wr = g.normal(size=(16, 16)) @ g.normal(size=(16, 16)).T / 16
        S = Pm @ Wr @ Pm.T
        shares.append(_rows_free_left(S) / np.ptp(S))
    assert min(shares) > 0.25, shares


def test_a4_a_trained_block_form_reads_key_m_minus_3_better_than_r3():
    # A.4: R(3) weights every pair equally; trained for key m - 3 (Adam, cross-entropy, fresh
    # N(0, 1) tokens each step), a block form reads it about as well as an unconstrained W_QK,
    # and both far better than R(3): the limit is the signal-to-noise ratio at d = 16
    T, d, j = 24, 16, 3
    Pt = torch.from_numpy(P.sinusoidal_encoding(T, d))
    R3 = torch.from_numpy(P.rotation_matrix(j, d))
    idx = torch.arange(d // 2)

    def block(W):  # nearest block form: a = mean of the diagonal, b = half the off-diagonal gap
        a = (W.diagonal()[0::2] + W.diagonal()[1::2]) / 2
        b = (W.diagonal(1)[0::2] - W.diagonal(-1)[0::2]) / 2
        B = torch.zeros(d, d, dtype=torch.float64)
        B = B.index_put((2 * idx, 2 * idx), a).index_put((2 * idx + 1, 2 * idx + 1), a)
        return B.index_put((2 * idx, 2 * idx + 1), b).index_put((2 * idx + 1, 2 * idx), -b)

    def trained(block_form):
        W = R3.clone().requires_grad_(True)  # start at R(3)
        opt = torch.optim.Adam([W], lr=0.03)
        gen = torch.Generator().manual_seed(1)
        for _ in range(100):
            Wb = block(W) if block_form else W
            Z = torch.randn(64, T, d, generator=gen, dtype=torch.float64) + Pt
            S = Z @ Wb @ Z.transpose(1, 2)
            target = torch.arange(T - j).repeat(64)
            loss = torch.nn.functional.cross_entropy(S[:, j:].reshape(-1, T), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return (block(W) if block_form else W).detach()

    Z_test = torch.from_numpy(np.random.default_rng(999).normal(size=(2000, T, d))) + Pt

    def hit(W):  # share of queries m >= 3 whose top key is m - 3, over 2,000 new draws
        S = Z_test @ W @ Z_test.transpose(1, 2)
        return (S[:, j:].argmax(2) == torch.arange(T - j)).double().mean().item()

    W_block = trained(True)
    assert torch.equal(W_block, block(W_block))  # really of block form
    h_r3, h_block, h_free = hit(R3), hit(W_block), hit(trained(False))
    assert f"{h_r3:.1%}" == "4.7%"  # near chance, 1/24 = 4.2%
    assert 0.12 < h_block < 0.135  # "about 13%"
    assert abs(h_free - h_block) < 0.02  # an unconstrained W_QK does about as well


# --- s15c2: the s65 expert's control, a W_QK fitted to the attention weights themselves -------


def _lbfgs_kl(U, F, w, steps=50):
    """W_QK fitted to f's attention weights themselves: L-BFGS on the mean KL divergence from
    softmax(F / sqrt(w)) to softmax(U M U^T / sqrt(w)), over the span U (so again a projection),
    started at the least-squares M = U^T F U. Returns the fitted M (detached)."""
    log_ref = torch.log_softmax(F / math.sqrt(w), 1)
    M = (U.T @ F @ U).requires_grad_(True)
    opt = torch.optim.LBFGS(
        [M],
        max_iter=steps,
        history_size=20,
        line_search_fn="strong_wolfe",
        tolerance_grad=1e-12,
        tolerance_change=1e-15,
    )

    def closure():
        opt.zero_grad()
        logq = torch.log_softmax(U @ M @ U.T / math.sqrt(w), 1)
        loss = (log_ref.exp() * (log_ref - logq)).sum(1).mean()
        loss.backward()
        return loss

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices, many steps: one thread
    try:
        opt.step(closure)
    finally:
        torch.set_num_threads(threads)
    return M.detach()


def _weights_fitted_tv(w, T_, steps=50):
    # A.6 and section 2.8: the divided rows A = C PE_m / sigma_m (X = 0); W_QK fitted by L-BFGS
    # to the mean KL divergence from f's attention weights (softmax of scores / sqrt(d_model)),
    # not by least squares on scores. Parametrised as S = U M U^T over the span of A's columns
    # (cut 1e-10, as the cell), started at the least-squares fit M = U^T F U.
    pe_next = P.sinusoidal_encoding(T_ + 1, w)
    pe = pe_next[:-1]
    F = torch.from_numpy(pe @ pe.T)
    A = pe - pe.mean(1, keepdims=True)
    A = A / pe.std(1)[:, None]
    U, s, _ = np.linalg.svd(A, full_matrices=False)
    U = torch.from_numpy(U[:, s > 1e-10 * s[0]])
    ref = torch.softmax(F / math.sqrt(w), 1)
    log_ref = torch.log_softmax(F / math.sqrt(w), 1)
    shifted = torch.softmax(torch.from_numpy(pe @ pe_next[1:].T) / math.sqrt(w), 1)

    def weights(M):
        return torch.softmax(U @ M @ U.T / math.sqrt(w), 1)

    def kl(M):
        return (ref * (log_ref - torch.log_softmax(U @ M @ U.T / math.sqrt(w), 1))).sum(1).mean()

    def tv(E):
        return 0.5 * (E - ref).abs().sum(1)

    M0 = U.T @ F @ U
    tv_ls, kl_ls = tv(weights(M0)), kl(M0).item()
    M = _lbfgs_kl(U, F, w, steps)
    return tv_ls, tv(weights(M)), tv(shifted), kl_ls, kl(M).item()


def test_appendix_a6_a_w_fitted_to_the_weights_moves_them_less_than_a_one_position_shift():
    # A.6 names the control: a W_QK fitted to the weights, not to the scores. Fitted (50 L-BFGS
    # steps on the KL divergence), it moves every row less than half as far as f shifted by one
    # position moves that row (largest ratio 0.43 and 0.12); mean 0.010 and 0.009, worst row
    # 0.027 and 0.022 at (128, 512) and (512, 1,024), against the least-squares fit's first rows
    # (0.070, 0.108) and the shift's worst (0.068, 0.211). First variations (scratch): 200 steps,
    # or a start at M = 0, give means within 0.0003 and worst rows 0.019 to 0.021. (128, 4,096)
    # takes about 45 s, too slow for a test; a scratch run (50 steps) gave mean 0.010 but row 0 at
    # 0.067, above the shift's worst 0.058: not established there. Since s15c2c A.6's cell runs
    # the same fits and prints these numbers (to 0.01: the L-BFGS path moves with the kernels);
    # section 2.8 makes no claim about weights.
    for (w, T_), (mean_ls, max_ls, mean_sh, max_sh, mean_kl, max_kl) in {
        (128, 512): ("0.012", "0.070", "0.061", "0.068", 0.010, 0.027),
        (512, 1024): ("0.018", "0.108", "0.186", "0.211", 0.009, 0.022),
    }.items():
        tv_ls, tv_kl, tv_sh, kl_ls, kl_kl = _weights_fitted_tv(w, T_)
        assert [f"{v:.3f}" for v in (tv_ls.mean(), tv_ls.max(), tv_sh.mean(), tv_sh.max())] == [
            mean_ls,
            max_ls,
            mean_sh,
            max_sh,
        ]  # the cell's least-squares numbers, reproduced
        assert kl_kl < 0.6 * kl_ls  # the fit to the weights really fits them better
        assert (
            abs(tv_kl.mean() - mean_kl) < 0.0006 and abs(tv_kl.max() - max_kl) < 0.0015
        )  # as printed
        assert (tv_kl / tv_sh).max() < 0.5  # every row under half the shift's distance for that row
        assert tv_kl.mean() < tv_sh.mean() / 3  # the mean too (no yardstick alone: A.6)


def test_appendix_a6_held_out_the_next_512_positions_in_weights():
    # A.6 and section 2.8's scope: the norm-bounded refit (cut 1e-3) fitted to the divided scores
    # on positions 0 to 511, and the centred B B^T, evaluated on positions 512 to 1,023: mean
    # (largest) total-variation distance from f's weights there, against f shifted by one
    def tv(S, ref):
        E = torch.softmax(torch.from_numpy(S) / math.sqrt(128), 1).numpy()
        return 0.5 * np.abs(E - ref).sum(1)

    pe = P.sinusoidal_encoding(1025, 128)
    cen = [p - p.mean(1, keepdims=True) for p in (pe[:512], pe[512:1024])]
    div = [c / p.std(1)[:, None] for c, p in zip(cen, (pe[:512], pe[512:1024]), strict=True)]
    U, s, Vt = np.linalg.svd(div[0], full_matrices=False)
    k = s > 1e-3 * s[0]
    G = U[:, k].T @ pe[:512]
    W = Vt[k].T @ (G @ G.T / np.outer(s[k], s[k])) @ Vt[k]
    U, s, Vt = np.linalg.svd(cen[0], full_matrices=False)
    k = s > 1e-10 * s[0]
    B = np.eye(128) + np.outer(Vt[k].T @ (U[:, k].T @ pe[:512].sum(1) / s[k]), np.ones(128)) / 128
    ref = torch.softmax(torch.from_numpy(pe[512:1024] @ pe[512:1024].T) / math.sqrt(128), 1).numpy()
    # s16c2b: the positive control, the same fit on the raw rows (W_QK = I exactly relative)
    U, s, Vt = np.linalg.svd(pe[:512], full_matrices=False)
    k = s > 1e-3 * s[0]
    G = U[:, k].T @ pe[:512]
    W_raw = Vt[k].T @ (G @ G.T / np.outer(s[k], s[k])) @ Vt[k]
    got = [
        tv(div[1] @ W @ div[1].T, ref),
        tv(cen[1] @ B @ B.T @ cen[1].T, ref),
        tv(pe[512:1024] @ pe[513:].T, ref),
        tv(pe[512:1024] @ W_raw @ pe[512:1024].T, ref),
    ]
    assert math.isclose(np.linalg.norm(W, 2), 8.41, abs_tol=0.005)  # the refit A.6 prints
    assert [f"{v.mean():.3f} ({v.max():.3f})" for v in got] == [
        "0.454 (0.831)",
        "0.079 (0.173)",
        "0.061 (0.068)",
        "0.314 (0.417)",
    ]
    # past the window both fits are far off (the control too, so the test does not isolate the
    # division); the centred B B^T exceeds the shift
    assert got[0].mean() > 3 * got[2].mean() and got[1].mean() > got[2].mean()
    assert got[3].mean() > 3 * got[2].mean() and round(np.trace(W_raw)) == 52
    ref_in = torch.softmax(torch.from_numpy(pe[:512] @ pe[:512].T) / math.sqrt(128), 1).numpy()
    assert tv(pe[:512] @ W_raw @ pe[:512].T, ref_in).max() < 1e-5  # it matches on its window


# --- s15c2c: the s72 expert's control, unfitted terms against the one-position shift ---------


def test_appendix_a6_unfitted_terms_fail_the_per_row_yardstick():
    # A.6: the mean distance is no yardstick (the centred rows with W_QK = I, unfitted, average
    # 0.038 against the shift's 0.186 at (512, 1,024)); the largest per-row ratio to the shift
    # separates them. Pins of the numbers A.6 prints for the two unfitted terms, and held out
    # (128, positions 512 to 1,023, the window's best number 0.60 kept).
    def sm(S, w):
        return torch.softmax(torch.from_numpy(S) / math.sqrt(w), 1).numpy()

    got = {}
    for w, T_ in [(128, 512), (512, 1024), (128, 4096)]:
        pe_next = P.sinusoidal_encoding(T_ + 1, w)
        pe = pe_next[:-1]
        ref = sm(pe @ pe.T, w)
        sh = 0.5 * np.abs(sm(pe @ pe_next[1:].T, w) - ref).sum(1)
        cen = pe - pe.mean(1, keepdims=True)
        div = cen / pe.std(1)[:, None]
        c = (np.linalg.norm(div.T @ pe) / np.linalg.norm(div.T @ div)) ** 2
        tv_i = 0.5 * np.abs(sm(cen @ cen.T, w) - ref).sum(1)
        tv_c = 0.5 * np.abs(sm(c * div @ div.T, w) - ref).sum(1)
        got[w, T_] = (f"{(tv_i / sh).max():.2f}", f"{(tv_c / sh).max():.2f}", f"{c:.2f}")
        if (w, T_) == (512, 1024):
            assert f"{tv_i.mean():.3f}" == "0.038" and tv_i.mean() < sh.mean() / 3
        if (w, T_) == (128, 512):
            pe2 = P.sinusoidal_encoding(1025, w)
            p = pe2[512:1024]
            ref2 = sm(p @ p.T, w)
            c2 = p - p.mean(1, keepdims=True)
            d2 = c2 / p.std(1)[:, None]
            sh2 = 0.5 * np.abs(sm(p @ pe2[513:].T, w) - ref2).sum(1)
            h_c = 0.5 * np.abs(sm(c * d2 @ d2.T, w) - ref2).sum(1)
            h_i = 0.5 * np.abs(sm(c2 @ c2.T, w) - ref2).sum(1)
            assert [f"{v.mean():.3f} ({v.max():.3f})" for v in (h_c, h_i)] == [
                "0.151 (0.199)",
                "0.031 (0.056)",
            ]
            assert (h_i / sh2).max() < 1  # held out, the unfitted centred term: within the shift
    assert got == {
        (128, 512): ("3.91", "7.34", "0.60"),
        (512, 1024): ("4.29", "3.29", "0.60"),
        (128, 4096): ("4.66", "3.77", "0.54"),
    }


# --- Appendix A.6: the numerical fits, moved out of the chapter ----------------------------
# The chapter keeps Lemma 1, the counting and one paragraph on PE's numerical rank; these two
# tests rerun the fits and held-out tables the appendix used to print, with every assert kept.


def fraction_kept(W):
    """Fraction of W's squared entries kept by its nearest block form (A.4's measure)."""
    return (nearest_block_form(W) ** 2).sum() / (W**2).sum()


def test_appendix_a6_centred_term_fakes_f_on_long_windows():
    """A.6 (moved from the chapter): PE 1 in the span of PE C on long windows, W_QK = B B^T."""
    # PE = PE C + (PE 1) 1^T / d: a centred term can equal f on a window exactly when the row sums
    # PE 1 lie in the span of PE C's columns. From a QR of PE's first T_ rows, Q R: in Q's
    # coordinates (orthonormal, so lengths are kept) PE is R (d, d), PE C is R C and PE 1 is R 1
    windows, widths = (512, 4096, 16_384, 65_536), (16, 32, 64, 128, 512)
    outside, slow_part, miss, norm_W, kept_M, cut_moves = {}, {}, {}, {}, {}, {}  # keys (width, T_)

    def fit_v(R, svd, cut):
        # least squares R C v ~ R 1 over the span of R C (svd: its SVD) above cut of the largest
        # singular value; returns v and the part of R 1 outside that span, over its size
        U, s_c, Vt_c = svd
        k = s_c > cut * s_c[0]
        U, s_c, Vt_c, r = U[:, k], s_c[k], Vt_c[k], R.sum(1)  # r = R 1: the row sums
        return Vt_c.T @ ((U.T @ r) / s_c), np.linalg.norm(r - U @ (U.T @ r)) / np.linalg.norm(r)

    def built_W(v):
        # W_QK = B B^T, B = I + v 1^T / d (the "if" above); returns it and M = C W_QK C - I:
        # the centred term minus f(n - m) is PE M PE^T
        w = len(v)
        B, C_w = np.eye(w) + np.outer(v, np.ones(w)) / w, np.eye(w) - 1 / w
        return B @ B.T, C_w @ B @ B.T @ C_w - np.eye(w)

    def largest_miss(M, rows, f_span):  # max |PE M PE^T| over rows x rows
        E_rows = ((rows[i : i + 1024] @ M) @ rows.T for i in range(0, len(rows), 1024))
        return max(max(E.max(), -E.min()) for E in E_rows) / f_span

    for w in widths:
        runs = windows if w <= 64 else windows[:3]  # 65,536 at 128 and 512: not run (time)
        pe_all = P.sinusoidal_encoding(runs[-1], w)
        for T_ in runs:
            R = np.linalg.qr(pe_all[:T_], mode="r")
            if (w, T_) == (128, 512):  # PE's singular values are R's
                s_pe = np.linalg.svd(R, compute_uv=False)
                n_sv = int(np.sum(s_pe > 1e-15 * s_pe[0]))  # gap: 7.8e-15, then 3e-16
            svd = np.linalg.svd(R - R.mean(1, keepdims=True))  # R C = R minus its row means
            v, outside[w, T_] = fit_v(R, svd, 1e-10)  # the span: above 1e-10 of the largest
            cut_moves[w, T_] = max(
                abs(fit_v(R, svd, c)[1] - outside[w, T_]) for c in (1e-8, 1e-12, 1e-14)
            )
            u = 1 - (v - v.mean())  # 1 - C v (sum d): PE u is the part outside
            slow_part[w, T_] = np.sum(u[w // 2 :] ** 2) / np.sum(
                u**2
            )  # on the slower half of the pairs
            if outside[w, T_] >= 1e-6:
                continue
            W, M = built_W(v)  # inside: build W_QK
            plane = np.linalg.qr(np.c_[np.ones(w), v])[0]  # W_QK is I off the plane of 1 and v
            norm_W[w, T_] = max(1, np.linalg.eigvalsh(plane.T @ W @ plane)[-1])  # ||W_QK||_2
            kept_M[w, T_] = fraction_kept(M + np.eye(w))  # C W_QK C: A.4's fraction kept
            f_span = w / 2 - f(np.arange(T_), w).min()  # f's span over the window's offsets
            # on the window: |PE M PE^T| <= its Frobenius norm, that of R M R^T (Q keeps lengths)
            miss[w, T_, "window"] = np.linalg.norm(R @ M @ R.T) / f_span
            if T_ <= (4096 if w <= 64 else 512):  # the next T_ positions, a (T_, T_) table
                miss[w, T_, "next"] = largest_miss(M, pe_all[T_ : 2 * T_], f_span)
            if T_ == 512:  # another W_QK: the cut 1e-12
                M_12 = built_W(fit_v(R, svd, 1e-12)[0])[1]
                miss[w, T_, "window, 1e-12"] = np.linalg.norm(R @ M_12 @ R.T) / f_span
                miss[w, T_, "next, 1e-12"] = largest_miss(M_12, pe_all[T_ : 2 * T_], f_span)
                if w == 32:  # further out: positions lo to 2 lo
                    for lo in (1024, 2048):
                        miss[w, T_, f"from {lo}, 1e-12"] = largest_miss(
                            M_12, pe_all[lo : 2 * lo], f_span
                        )

    inside = sorted(key for key, o in outside.items() if o < 1e-6)
    on_window = max(miss[w, T_, "window"] for w, T_ in inside)
    wide = max(miss[w, T_, "window"] for w, T_ in inside if w >= 128)
    other = {w: miss[w, 512, "next, 1e-12"] for w in widths}
    far32 = {lo: miss[32, 512, f"from {lo}, 1e-12"] for lo in (1024, 2048)}
    wide_kept = [kept_M[key] for key in inside if key[0] >= 128]
    sv_at = {
        c: int(np.sum(s_pe > c * s_pe[0])) for c in (1e-15, 1e-12, 1e-10)
    }  # the count moves with the cut
    assert inside == sorted(
        [(16, 512), (32, 512), (32, 4096), (64, 512), (64, 4096), (64, 16_384)]
        + [(w, T_) for w in (128, 512) for T_ in windows[:3]]
    )
    assert min(o for o in outside.values() if o >= 1e-6) > 0.3  # a wide gap: inside or clearly not
    assert max(cut_moves.values()) < 1e-6  # the verdict does not hang on the cut
    assert min(slow_part[key] for key in inside) > 0.85  # the combination: mostly the slow pairs
    # reproduced on the window (both cuts), at 128 and 512 by a W_QK far from the block form
    # somewhere
    assert (
        on_window < 1e-5
        and wide < 1e-6
        and max(miss[w, 512, "window, 1e-12"] for w in widths) < 1e-5
    )
    assert min(wide_kept) < 0.1 < 0.9 < max(wide_kept)
    # past the window the error grows, by a factor of over 100 on every window run; at 128 and 512
    # for both cuts, while at d_model = 32 the cut-1e-12 W_QK still matches the next 512 positions
    assert all(
        miss[key + ("next",)] > 100 * miss[key + ("window",)]
        for key in inside
        if key + ("next",) in miss
    )
    assert (
        min(other[128], other[512]) > 0.1
        and other[32] < 1e-4 < 1e-2 < far32[1024] < 1 < far32[2048]
    )
    assert n_sv < 96 and sv_at[1e-10] < sv_at[1e-12] < n_sv  # numerically rank-deficient
    # for scale: f(n - m) itself computed in float32; and the directions of W_QK that PE W_QK PE^T
    # sees
    pe_rank = P.sinusoidal_encoding(512, 128)
    F_rank = pe_rank @ pe_rank.T  # f(n - m)
    pe_32 = pe_rank.astype(np.float32)
    err32 = np.abs((pe_32 @ pe_32.T) - F_rank).max() / np.ptp(F_rank)  # f computed in float32
    n_pairs, n_pairs_10 = (
        int(np.sum(np.outer(s_pe, s_pe) > c * s_pe[0] ** 2)) for c in (1e-15, 1e-10)
    )  # s_i s_j
    assert 1e-7 < err32 < 1e-6 and 0.9 < n_pairs / n_sv**2 < 1.1  # float32's level; about 62^2


def test_appendix_a6_fits_after_the_division():
    """A.6 (moved from the chapter): least-squares and weight fits after the division, held out."""

    # held out between fitted positions, X = 0: W_QK fitted by least squares
    # in scores on 512 positions drawn at random in [0, 65,536), tested on 512 others drawn there
    def softmax_rows(S, width):
        # softmax of each row of S / sqrt(width): attention weights (a new array, then in place:
        # memory)
        E = S / math.sqrt(width)
        E -= E.max(1, keepdims=True)
        np.exp(E, out=E)
        E /= E.sum(1, keepdims=True)
        return E

    def weights_tv(S, ref, width):
        # the weights softmax_rows(S, width) against the weights ref, row by row: the total-
        # variation distance of each row (half the summed |difference|; 0: equal, 1: disjoint)
        E = softmax_rows(S, width)
        E -= ref
        return 0.5 * np.abs(E, out=E).sum(1)

    def spread_rows(pos, w):  # PE's rows at the positions pos
        a = np.multiply.outer(pos.astype(float), P.sinusoidal_frequencies(w))
        out = np.empty((len(pos), w))
        out[:, 0::2], out[:, 1::2] = np.sin(a), np.cos(a)
        return out

    def spread_fits(A, pe_tr, cuts):
        # least squares in scores, A W_QK A^T against f's table on the fitted positions, over the
        # directions above cut x A's largest singular value, 0 on the others; one W_QK per cut
        U, s, Vt = np.linalg.svd(A, full_matrices=False)
        G = U.T @ pe_tr
        G = G @ G.T / np.outer(s, s)
        return [
            Vt[s > c * s[0]].T @ G[np.ix_(s > c * s[0], s > c * s[0])] @ Vt[s > c * s[0]]
            for c in cuts
        ]

    def centre(p):  # C PE_m: each row minus its mean
        return p - p.mean(1, keepdims=True)

    def divide(p):  # LayerNorm's rows, X = 0
        return centre(p) / p.std(1)[:, None]

    def held_out(w, seed, cuts):
        # per row of the held-out positions, the distance from f's weights: the raw rows' fit (the
        # control, cut 1e-3), f shifted by one position (the yardstick), the centred and divided
        # fits
        drawn = np.random.default_rng(seed).choice(65_536, 1024, replace=False)
        tr, te = np.sort(drawn[:512]), np.sort(drawn[512:])
        pe_tr, pe_te = spread_rows(tr, w), spread_rows(te, w)
        ref_te = softmax_rows(pe_te @ pe_te.T, w)
        W_r = spread_fits(pe_tr, pe_tr, cuts[:1])[0]
        out = {
            "control": weights_tv(pe_te @ W_r @ pe_te.T, ref_te, w),
            "shift": weights_tv(pe_te @ spread_rows(te + 1, w).T, ref_te, w),
        }
        for name, rows in (("centred", centre), ("divided", divide)):
            for cut, W in zip(cuts, spread_fits(rows(pe_tr), pe_tr, cuts), strict=True):
                out[name, cut] = (
                    weights_tv(rows(pe_te) @ W @ rows(pe_te).T, ref_te, w),
                    np.linalg.norm(W, 2),
                )
        return out

    held_spread = {
        (w, seed): held_out(w, seed, (1e-3, 1e-6) if w == 128 else (1e-3,))
        for w, seed in [(128, 0), (128, 1), (128, 2), (64, 0)]
    }
    sep = [held_spread[128, seed] for seed in range(3)]  # d_model = 128, cut 1e-6: three draws
    sep_cen = max(r["centred", 1e-6][0].max() for r in sep)
    sep_div = [r["divided", 1e-6][0].max() for r in sep]
    sep_shift = max(r["shift"].max() for r in sep)
    # this estimator only (least squares in scores, cut 1e-6, ||W_QK||_2 of order 1e5, held out
    # between spread positions): the centred fit reproduces f's weights, the divided fit does not in
    # its worst row
    assert (
        sep_cen < 0.01
        and min(sep_div) > sep_shift
        and min(r["centred", 1e-6][1] for r in sep) > 1e4
    )

    # LayerNorm's rows with X = 0 (centred, divided by sigma_m), d_model = 128: W_QK fitted on
    # positions 0 to 511, then tested on positions 512 to 1,023; the positive control fits the raw
    # rows the same way, where W_QK = I is exactly relative past any window
    pe_2 = P.sinusoidal_encoding(2 * 512 + 1, 128)
    cen_in, cen_out = (p - p.mean(1, keepdims=True) for p in (pe_2[:512], pe_2[512:1024]))
    div_in, div_out = cen_in / pe_2[:512].std(1)[:, None], cen_out / pe_2[512:1024].std(1)[:, None]

    def window_fit(A):
        # least squares in scores, A W_QK A^T against f's table on positions 0 to 511, over the
        # directions above 1e-3 of A's largest singular value (a bounded norm); 0 on the others
        U, s, Vt = np.linalg.svd(A, full_matrices=False)
        k = s > 1e-3 * s[0]
        G = U[:, k].T @ pe_2[:512]
        return (
            Vt[k].T @ (G @ G.T / np.outer(s[k], s[k])) @ Vt[k]
        )  # V diag(1/s) U^T F U diag(1/s) V^T

    W_div, W_raw = window_fit(div_in), window_fit(pe_2[:512])
    c_div = (
        np.linalg.norm(div_in.T @ pe_2[:512]) / np.linalg.norm(div_in.T @ div_in)
    ) ** 2  # best number
    ref_out = softmax_rows(pe_2[512:1024] @ pe_2[512:1024].T, 128)  # f's weights on 512 to 1,023
    held_27 = {
        "fitted W_QK": weights_tv(div_out @ W_div @ div_out.T, ref_out, 128),
        "f shifted by one position": weights_tv(pe_2[512:1024] @ pe_2[513:].T, ref_out, 128),
        f"no fit (divided rows x {c_div:.2f})": weights_tv(
            c_div * div_out @ div_out.T, ref_out, 128
        ),
        "the same fit on the raw rows": weights_tv(
            pe_2[512:1024] @ W_raw @ pe_2[512:1024].T, ref_out, 128
        ),
    }
    h27 = [tv_.mean() for tv_ in held_27.values()]
    # past the window both fits are off, each over three times the shift (7.4 and 5.1 times)
    assert h27[0] > 3 * h27[1] and h27[3] > 3 * h27[1]
    # the control's fit keeps only some directions: the identity there, 0 elsewhere
    assert np.allclose(W_raw @ W_raw, W_raw, rtol=0, atol=1e-9) and round(np.trace(W_raw)) < 128

    # held out between fitted positions: held_spread (the top of this cell) fits as window_fit
    # (cuts 1e-3 and 1e-6) on 512 positions drawn at random in [0, 65,536) and tests on 512 others

    fits = [(r["shift"], r[k]) for r in held_spread.values() for k in r if k[0] == "divided"]
    # in every run: the control passes, the divided fit's mean is under half the shift's, its worst
    # row over the shift's worst
    assert max(r["control"].max() for r in held_spread.values()) < 1e-3
    assert all(fit[0].mean() < sh.mean() / 2 for sh, fit in fits)
    assert all(fit[0].max() > sh.max() for sh, fit in fits)
    # the runs that do not isolate the division: centring alone also exceeds the shift's worst row,
    # in two of the three draws at the cut 1e-3 and in the one at d_model = 64
    assert (
        sum(
            held_spread[128, s]["centred", 1e-3][0].max() > held_spread[128, s]["shift"].max()
            for s in range(3)
        )
        == 2
    )
    assert held_spread[64, 0]["centred", 1e-3][0].max() > held_spread[64, 0]["shift"].max()

    # softmax_rows, weights_tv, and the held-out fit W_div (pe_2, cen_*, div_*, ref_out): the cell
    # above
    def fit_to_weights(U_k, pe, F, w, steps=50):
        # W_QK fitted to f's weights themselves (_lbfgs_kl; tests/test_book_ch2.py pins the runs)
        M = _lbfgs_kl(torch.from_numpy(U_k), torch.from_numpy(F), w, steps).numpy()
        return weights_tv(U_k @ M @ U_k.T, softmax_rows(F, w), w)

    # the best W_QK of any form for rows A: A W A^T = P F P, P = U U^T the projection onto the span
    # of A's columns, F = PE PE^T the table of f(n - m); what is left is F - U (U^T F U) U^T
    ln_miss, ln_tv, norm_fit, row_free = {}, {}, {}, {}  # (width, T_, rows, cut): (max, rms) / span
    base_tv, scalar_c = {}, {}  # unfitted terms' distances; the best number
    for w, T_ in [(128, 512), (512, 1024), (128, 4096)]:
        pe_next = P.sinusoidal_encoding(T_ + 1, w)
        pe = pe_next[:-1]
        F = pe @ pe.T  # (T_, T_): f(n - m)
        ref = softmax_rows(F, w)  # f's weights
        if (w, T_) == (128, 512):
            ln_ref_512 = ref
        ln_tv[w, T_, "shifted"] = weights_tv(pe @ pe_next[1:].T, ref, w)  # f(n - m + 1)
        centred = pe - pe.mean(1, keepdims=True)  # rows C PE_m
        # unfitted: centred rows with W_QK = I; divided rows times the best single number (least
        # squares in scores: c = <A A^T, F> / <A A^T, A A^T>, by traces)
        base_tv[w, T_, "centred, W_QK = I"] = weights_tv(centred @ centred.T, ref, w)
        A_div = centred / pe.std(1)[:, None]
        scalar_c[w, T_] = (np.linalg.norm(A_div.T @ pe) / np.linalg.norm(A_div.T @ A_div)) ** 2
        base_tv[w, T_, "divided, best number"] = weights_tv(
            scalar_c[w, T_] * A_div @ A_div.T, ref, w
        )
        for name, A in [("centred", centred), ("divided", centred / pe.std(1)[:, None])]:
            U, s, _ = np.linalg.svd(A, full_matrices=False)
            if name == "divided" and (w, T_) == (512, 1024):  # every direction kept: no cut
                E0 = F - U @ ((U.T @ pe) @ (pe.T @ U)) @ U.T
                all_dirs_rms = np.sqrt(np.mean(E0**2)) / np.ptp(F)
            if name == "divided" and (w, T_) == (128, 512):  # a norm-bounded refit: cut 1e-3
                k3 = s > 1e-3 * s[0]
                G3 = U[:, k3].T @ pe  # W_QK = V diag(1/s) U^T F U diag(1/s) V^T
                norm_fit["cut 1e-3"] = np.linalg.norm(G3 @ G3.T / np.outer(s[k3], s[k3]), 2)
                ln_tv[w, T_, "divided, cut 1e-3"] = weights_tv(
                    U[:, k3] @ G3 @ G3.T @ U[:, k3].T, ref, w
                )
            for cut in (1e-10, 1e-12):
                U_k = U[:, s > cut * s[0]]  # orthonormal basis of the span
                E = F - U_k @ ((U_k.T @ pe) @ (pe.T @ U_k)) @ U_k.T
                ln_miss[w, T_, name, cut] = (
                    np.abs(E).max() / np.ptp(F),
                    np.sqrt(np.mean(E**2)) / np.ptp(F),
                )
                if cut == 1e-10:  # per-row distances of the weights
                    inner = (U_k.T @ pe) @ (pe.T @ U_k)  # ||W_QK||_2 of this least-squares fit
                    norm_fit[w, T_, name] = np.linalg.norm(
                        inner / np.outer(s[s > cut * s[0]], s[s > cut * s[0]]), 2
                    )
                    ln_tv[w, T_, name] = weights_tv(F - E, ref, w)
                    if name == "divided" and T_ <= 1024:  # the fit to the weights (seconds)
                        ln_tv[w, T_, "divided, fit to weights"] = fit_to_weights(U_k, pe, F, w)
                    if (w, T_, name) == (128, 512, "divided"):  # scores x2, x4, x8: other scales
                        hot = {
                            k: [
                                weights_tv(k * S_, softmax_rows(k * F, w), w)
                                for S_ in (F - E, pe @ pe_next[1:].T)
                            ]
                            for k in (2, 4, 8)
                        }
                    if (
                        name == "divided"
                    ):  # target f + c 1^T, c free: c = -H^-1 E 1, H = T I - (1^T P 1) P
                        u1, e1 = U_k.sum(0), E.sum(1)  # U_k^T 1 and E 1
                        c_m = -e1 / T_ - (1 / (T_ - u1 @ u1) - 1 / T_) * (U_k @ (U_k.T @ e1))
                        E += c_m[:, None]  # in place (memory): E is done with
                        E -= np.multiply.outer(U_k @ (U_k.T @ c_m), U_k @ u1)  # minus P c (P 1)^T
                        row_free[w, T_] = max(E.max(), -E.min()) / np.ptp(F)
    centred_max = max(v[0] for k, v in ln_miss.items() if k[2] == "centred")
    divided_rms = min(v[1] for k, v in ln_miss.items() if k[2] == "divided")
    for w, T_ in [(128, 512), (512, 1024), (128, 4096)]:
        c_tv, d_tv, s_tv_ = (ln_tv[w, T_, k] for k in ("centred", "divided", "shifted"))
    row_ratio = {}
    for w, T_ in [(128, 512), (512, 1024), (128, 4096)]:
        sh_ = ln_tv[w, T_, "shifted"]
        terms = {
            "centred, W_QK = I": base_tv[w, T_, "centred, W_QK = I"],
            f"divided x {scalar_c[w, T_]:.2f}": base_tv[w, T_, "divided, best number"],
            "divided, least squares (a projection)": ln_tv[w, T_, "divided"],
        }
        if (w, T_, "divided, fit to weights") in ln_tv:
            terms["divided, fit to weights (a projection)"] = ln_tv[
                w, T_, "divided, fit to weights"
            ]
        for name, tv_ in terms.items():
            row_ratio[w, T_, name.split(" (")[0].rstrip("0123456789. ")] = (tv_ / sh_).max()
        # the L-BFGS path moves with the CPU's kernels (0.425 vs 0.424): its numbers to 0.1 and 0.01
    refit = ln_tv[128, 512, "divided, cut 1e-3"]
    # held out: the same W_QK (the refit above, formed as a matrix; the previous dropdown's centred
    # B B^T) on the next 512 positions, which neither was fitted to, against f's weights there
    U, s, Vt = np.linalg.svd(cen_in, full_matrices=False)
    k10 = s > 1e-10 * s[0]
    v_c = Vt[k10].T @ (U[:, k10].T @ pe_2[:512].sum(1) / s[k10])  # least squares (PE C) v = PE 1
    B_c = np.eye(128) + np.outer(v_c, np.ones(128)) / 128  # PE = PE C B on the window
    held = {
        "divided, refit cut 1e-3": weights_tv(div_out @ W_div @ div_out.T, ref_out, 128),
        "centred B B^T": weights_tv(cen_out @ B_c @ B_c.T @ cen_out.T, ref_out, 128),
        "f shifted by one position": weights_tv(pe_2[512:1024] @ pe_2[513:].T, ref_out, 128),
        f"unfitted: divided x {scalar_c[128, 512]:.2f} (the window's number)": weights_tv(
            scalar_c[128, 512] * div_out @ div_out.T, ref_out, 128
        ),
        "unfitted: centred, W_QK = I": weights_tv(cen_out @ cen_out.T, ref_out, 128),
        "positive control: the raw rows, fitted as the refit": weights_tv(
            pe_2[512:1024] @ W_raw @ pe_2[512:1024].T, ref_out, 128
        ),
    }
    raw_in = weights_tv(
        pe_2[:512] @ W_raw @ pe_2[:512].T, ln_ref_512, 128
    )  # the control on its window
    same_fit = np.abs(weights_tv(div_in @ W_div @ div_in.T, ln_ref_512, 128) - refit).max()
    d_tv = ln_tv[128, 512, "divided"]
    hot_ratio = [dv.max() / sv.max() for dv, sv in hot.values()]
    assert centred_max < 1e-6  # centring alone: reproduced
    assert (
        min(v[0] for k, v in ln_miss.items() if k[2] == "divided") > 1e-2 and divided_rms > 1e-4
    )  # divided: not
    assert min(row_free.values()) > 0.03  # nor with a free number per row (0.035 at least)
    # weights: the mean is no yardstick (an unfitted term passes "under a third of the shift"); per
    # row, every unfitted term moves some row over three times as far as the shift, the fit to the
    # weights moves every row under half as far
    assert base_tv[512, 1024, "centred, W_QK = I"].mean() < ln_tv[512, 1024, "shifted"].mean() / 3
    assert min(v for k, v in row_ratio.items() if k[2] in ("centred, W_QK = I", "divided x")) > 3
    assert max(v for k, v in row_ratio.items() if k[2] == "divided, fit to weights") < 0.5
    # the worst row, as stated, for the least-squares-in-scores W_QK only (one fitted to the
    # weights: tests/test_book_ch2.py): at 128 a first row (row < 4) above the shift's worst; at 512
    # below it
    worst = {
        key: (
            ln_tv[key + ("divided",)].argmax(),
            ln_tv[key + ("divided",)].max() / ln_tv[key + ("shifted",)].max(),
        )
        for key in [(128, 512), (512, 1024), (128, 4096)]
    }
    assert worst[128, 512][0] < 4 < worst[512, 1024][0] < 10 and worst[128, 4096][0] < 4
    assert worst[128, 512][1] > 1 and worst[128, 4096][1] > 2 and worst[512, 1024][1] < 0.6
    # the refit, still least squares in scores: a bounded norm, a worst row above the shift's worst
    assert (
        norm_fit["cut 1e-3"] < 20 < 1e10 < min(v for k, v in norm_fit.items() if k[-1] == "divided")
    )
    assert refit.max() > 1.2 * ln_tv[128, 512, "shifted"].max()
    # held out: the refit (the same one: its weights on the window as above) is past its window
    # several times as far as the shift, and so is the positive control (raw rows, W_QK = I exact);
    # centring's exact-on-the-window B B^T is past it too, the unfitted centred term within the
    # shift
    h_div, h_cen, h_shift, h_scalar, _, h_raw = (held[k].mean() for k in held)
    held_cen_i = held["unfitted: centred, W_QK = I"] / held["f shifted by one position"]
    assert (
        same_fit < 1e-6
        and h_div > 3 * h_shift
        and h_raw > 3 * h_shift
        and h_cen > h_shift
        and held_cen_i.max() < 1
    )
    assert all_dirs_rms > 1e-4  # T > d: the verdict does not hang on the cut
    assert d_tv[50:-50].max() <= 0.0295 and 0.8 < min(
        hot_ratio
    )  # the middle rows ("at most 0.029"); other scales
    # each number the dropdown quotes, to its printed digits (the L-BFGS fit's to 0.01: it moves
    # with the CPU)
    sh_512, cen_i_512 = ln_tv[128, 512, "shifted"], base_tv[128, 512, "centred, W_QK = I"]
    div_c_512, lbfgs_512 = (
        base_tv[128, 512, "divided, best number"],
        ln_tv[128, 512, "divided, fit to weights"],
    )
    quoted = [
        (h_div, "0.454"),
        (held["divided, refit cut 1e-3"].max(), "0.831"),
        (h_shift, "0.061"),
        (h_scalar, "0.151"),
        (held[next(k for k in held if k.startswith("unfitted: divided"))].max(), "0.199"),
        (held["f shifted by one position"].max(), "0.068"),
        (held["unfitted: centred, W_QK = I"].mean(), "0.031"),
        (held["unfitted: centred, W_QK = I"].max(), "0.056"),
        (h_cen, "0.079"),
        (held["centred B B^T"].max(), "0.173"),
        (h_raw, "0.314"),
        (held["positive control: the raw rows, fitted as the refit"].max(), "0.417"),
        (sh_512.mean(), "0.061"),
        (sh_512.max(), "0.068"),
        (d_tv.mean(), "0.012"),
        (d_tv.max(), "0.070"),
        (refit.mean(), "0.014"),
        (refit.max(), "0.104"),
        (norm_fit["cut 1e-3"], "8.41"),
        (scalar_c[128, 512], "0.60"),
        (div_c_512.mean(), "0.210"),
        (div_c_512.max(), "0.420"),
        (cen_i_512.mean(), "0.060"),
        (cen_i_512.max(), "0.227"),
        (refit.max() / sh_512.max(), "1.5"),
        (row_ratio[128, 512, "centred, W_QK = I"], "3.91"),
        (row_ratio[128, 512, "divided x"], "7.34"),
        (centred_max * 1e9, "1.2"),
        (divided_rms, "0.0013"),
        (row_free[128, 512], "0.073"),
        (row_free[512, 1024], "0.035"),
        (row_free[128, 4096], "0.2"),
        (min(hot_ratio), "0.88"),
        (max(hot_ratio), "1.05"),
        (ln_miss[128, 512, "divided", 1e-10][0], "0.15"),
        (ln_miss[512, 1024, "divided", 1e-10][0], "0.061"),
        (ln_miss[128, 4096, "divided", 1e-10][0], "0.27"),
        (lbfgs_512.mean(), "0.01"),
        (lbfgs_512.max(), "0.03"),
    ]
    off = [
        (v, q) for v, q in quoted if abs(v - float(q)) > 0.5 * 10.0 ** -len(q.split(".")[1]) + 1e-12
    ]
    assert all(
        abs(v - float(q)) <= 0.5 * 10.0 ** -len(q.split(".")[1]) + 1e-12 for v, q in quoted
    ), off
    # the positive control matches on its window ("within 1e-05"), a projection on "52 of 128"
    # directions
    assert raw_in.max() < 1e-5 and round(np.trace(W_raw)) == 52
    orders = [math.floor(math.log10(v)) for k, v in norm_fit.items() if k[-1] == "divided"]
    assert (min(orders), max(orders)) == (12, 15)  # "of order 1e+12 to 1e+15"


# --- s19: the s85 expert's M2, the best-range fit as a linear program -----------------------


def _best_range(S):
    """The least range max - min of S - c_m - h(n - m) over all c and h, by another route than
    the chapter's linprog call: minimise t with |S - c_m - h(n - m) - mid| <= t (half the range)."""
    from scipy.optimize import linprog

    T = len(S)
    m_, n_ = np.indices(S.shape)
    A = np.zeros((T * T, 3 * T - 1))
    A[np.arange(T * T), m_.ravel()] = 1
    A[np.arange(T * T), T + (n_ - m_).ravel() + T - 1] = 1
    # unknowns (c, h, t); the offset mid is absorbed by c
    ones = np.ones((T * T, 1))
    A_ub = np.block([[A, -ones], [-A, -ones]])
    b_ub = np.concatenate([S.ravel(), -S.ravel()])
    cost = np.zeros(3 * T)
    cost[-1] = 2.0
    res = linprog(cost, A_ub=A_ub, b_ub=b_ub, bounds=(None, None), method="highs")
    assert res.status == 0
    return res.fun


def test_rows_free_floors_by_linear_program_as_the_s85_expert_measured():
    # A.4 and A.6 quote the least range any number per row plus function of n - m leaves (a
    # floor, which the claims "a number per row cannot fix it" need), not the least-squares
    # residual's range (an upper bound): random W_QK 3.71 of 7.19; section 2.6's two one-entry
    # changes 0.50 and 0.88; A.6's W_QK = I centred 0.30 and divided 0.32 of the span. Each
    # floor lies at or below the least-squares range and at or above 2 RMS of its residual
    _, W, _, Pm = chapter_tables()
    d = 16
    S = Pm @ W @ Pm.T
    assert f"{_best_range(S):.2f}" == "3.71" and f"{np.ptp(S):.2f}" == "7.19"
    assert _best_range(S) <= _rows_free_left(S) + 1e-9
    # the expert's floor from least squares alone: twice the residual's root mean square, 1.59
    T = len(S)
    m_, n_ = np.indices(S.shape)
    A = np.zeros((T * T, 3 * T - 1))
    A[np.arange(T * T), m_.ravel()] = 1
    A[np.arange(T * T), T + (n_ - m_).ravel() + T - 1] = 1
    resid = S.ravel() - A @ (np.linalg.pinv(A) @ S.ravel())
    two_rms = 2 * np.sqrt(np.mean(resid**2))
    assert f"{two_rms:.2f}" == "1.59" and two_rms <= _best_range(S)
    W_c = commuting_W(np.random.default_rng(21), d)
    floors = []
    for i, j in [(1, 1), (0, 2)]:
        Wx = W_c.copy()
        Wx[i, j] += 0.5
        Sx = Pm @ Wx @ Pm.T
        floors.append(_best_range(Sx))
        assert floors[-1] <= _rows_free_left(Sx) + 1e-9
    assert [f"{v:.2f}" for v in floors] == ["0.50", "0.88"]
    C = np.eye(d) - 1 / d
    centred = Pm @ C
    shares = [
        _best_range(A @ A.T) / np.ptp(A @ A.T) for A in (centred, centred / Pm.std(1)[:, None])
    ]
    assert [f"{v:.2f}" for v in shares] == ["0.30", "0.32"]
    assert _best_range(Pm @ Pm.T) < 1e-6  # PE PE^T itself: relative


# --- moved from the chapter in s21 (appendix cut): A.4's forks, A.6's window and counting -


def section_2_6():
    """Section 2.6's setup: T, d, X, Pm, the random W_QK and the block form (seeds 20, 21)."""
    X, W_QK, W_comm, Pm = chapter_tables()
    return 24, 16, X, Pm, W_QK, W_comm


def test_helix_third_coordinate_climbs():
    # section 2.3: implied by 40 omega_1 < pi/2 (sin rises on [0, pi/2]); the link, moved here
    pe3 = P.sinusoidal_encoding(41, 3)
    assert np.all(np.diff(pe3[:, 2]) > 0)


def rows_free_design(n_rows):
    # S[m, n] ~ c_m + h(n - m): one column per row m, then one per offset k = 1-T..T-1
    m_, n_ = np.indices((n_rows, n_rows))
    M = np.zeros((n_rows * n_rows, 3 * n_rows - 1))
    M[np.arange(n_rows * n_rows), m_.ravel()] = 1
    M[np.arange(n_rows * n_rows), n_rows + (n_ - m_).ravel() + n_rows - 1] = 1
    return M


def rows_free_left(S):
    # least-squares c_m + h(n - m) removed: the range left, an upper bound on the best fit's
    M = rows_free_design(len(S))
    return np.ptp(S.ravel() - M @ np.linalg.lstsq(M, S.ravel(), rcond=None)[0])


def best_range(S):
    # the least range of S - c_m - h(n - m) over all c, h: a linear program (a floor)
    from scipy.optimize import linprog

    M = rows_free_design(len(S))
    ones, zeros = np.ones((M.shape[0], 1)), np.zeros((M.shape[0], 1))
    A_ub = np.block([[-M, -ones, zeros], [M, zeros, ones]])
    cost = np.zeros(M.shape[1] + 2)
    cost[-2:] = 1, -1  # top - bottom
    b_ub = np.concatenate([-S.ravel(), S.ravel()])
    res = linprog(cost, A_ub=A_ub, b_ub=b_ub, bounds=(None, None), method="highs")
    assert res.status == 0  # solved
    return max(res.fun, 0.0)


def test_random_w_qk_is_far_from_the_block_form_even_with_a_number_per_row():
    T, d, X, Pm, W_QK, W_comm = section_2_6()
    kept = [(nearest_block_form(W_QK) ** 2).sum() / (W_QK**2).sum()]
    rel = [diagonal_spread(Pm @ W_QK @ Pm.T) / np.ptp(Pm @ W_QK @ Pm.T)]
    for seed in range(100, 110):
        g = np.random.default_rng(seed)
        W_r = g.normal(size=(d, d)) @ g.normal(size=(d, d)).T / d
        kept.append((nearest_block_form(W_r) ** 2).sum() / (W_r**2).sum())
        rel.append(diagonal_spread(Pm @ W_r @ Pm.T) / np.ptp(Pm @ W_r @ Pm.T))
    assert abs(np.mean(kept) * d - 1) < 0.3  # near 1/d_model, within 30%
    assert 0.5 / d < kept[0] < 2 / d  # section 2.6's: near 1/d_model
    assert min(rel) > 0.5  # every draw: far from relative
    assert min(rel[1:]) < rel[0] < max(rel[1:])  # section 2.6's: within the ten
    S = Pm @ W_QK @ Pm.T
    assert best_range(S) > 0.5 * np.ptp(S)  # far from relative, rows free (3.71 of 7.19)


def test_slowest_pair_changes_vanish_once_a_number_per_row_is_free():
    T, d, X, Pm, W_QK, W_comm = section_2_6()
    W_slow, W_link, W_in, W_between = (W_comm.copy() for _ in range(4))
    W_slow[14, 15] += 0.5  # inside the slowest pair, 7
    W_link[0, 15] += 0.5  # linking pair 0 to pair 7
    W_in[1, 1] += 0.5  # section 2.6's two changes
    W_between[0, 2] += 0.5
    S = {k: Pm @ W @ Pm.T for k, W in [("slow", W_slow), ("link", W_link), ("in", W_in)]}
    S["between"] = Pm @ W_between @ Pm.T
    assert diagonal_spread(S["link"]) > 0.1 > 10 * diagonal_spread(S["slow"])
    assert max(rows_free_left(S["slow"]), rows_free_left(S["link"])) < 1e-4
    assert min(best_range(S["in"]), best_range(S["between"])) > 0.1


def test_a_block_form_reader_for_the_key_three_back():
    T, d, X, Pm, W_QK, W_comm = section_2_6()
    j = 3
    R3 = P.rotation_matrix(j, d)
    S_back = Pm @ R3 @ Pm.T
    best = S_back[j:].argmax(1)
    assert np.array_equal(best, np.arange(T - j)) and diagonal_spread(S_back) < 1e-12
    X_back, hit = np.random.default_rng(23).normal(size=(50, T, d)), {}
    for scale in (1.0, 0.1):
        Z = scale * X_back + Pm
        S_all = Z @ R3 @ Z.transpose(0, 2, 1)
        hit[scale] = np.mean(S_all[:, j:].argmax(2) == np.arange(T - j))
    assert hit[1.0] < 2 / T and hit[0.1] > 0.5  # near chance with N(0, 1) tokens


def nearest_block_t(W):  # torch, differentiable
    i2 = 2 * torch.arange(W.shape[0] // 2)
    a, b = (W[i2, i2] + W[i2 + 1, i2 + 1]) / 2, (W[i2, i2 + 1] - W[i2 + 1, i2]) / 2
    B = torch.zeros_like(W).index_put((i2, i2), a).index_put((i2 + 1, i2 + 1), a)
    return B.index_put((i2, i2 + 1), b).index_put((i2 + 1, i2), -b)


def test_training_the_key_three_back_reader():
    T, d, X, Pm, W_QK, W_comm = section_2_6()
    j = 3

    def trained(block_form, pe_t, start):
        # 1,000 steps; the W after step 100 is kept too (one run, the same generator)
        W = start.clone().requires_grad_(True)
        opt, gen = torch.optim.Adam([W], lr=0.03), torch.Generator().manual_seed(1)
        target = torch.arange(T - j).repeat(64)
        for step in range(1000):
            Z_t = torch.randn(64, T, d, generator=gen, dtype=torch.float64) + pe_t
            S_t = Z_t @ (nearest_block_t(W) if block_form else W) @ Z_t.transpose(1, 2)
            loss = torch.nn.functional.cross_entropy(S_t[:, j:].reshape(-1, T), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step == 99:
                at_100 = (nearest_block_t(W) if block_form else W).detach().clone()
        return at_100, (nearest_block_t(W) if block_form else W).detach()

    pe_t, R3 = torch.from_numpy(Pm), torch.from_numpy(P.rotation_matrix(j, d))
    Z_new = torch.from_numpy(np.random.default_rng(999).normal(size=(2000, T, d))) + pe_t

    def share(W):
        top = (Z_new @ W @ Z_new.transpose(1, 2))[:, j:].argmax(2)
        return (top == torch.arange(T - j)).double().mean().item()

    (W_block, long_block), (W_free, long_free) = trained(True, pe_t, R3), trained(False, pe_t, R3)
    top = {"R(3)": share(R3), "block": share(W_block), "free": share(W_free)}
    assert torch.equal(W_block, nearest_block_t(W_block)) and top["R(3)"] < 2 / T
    assert 0.12 < top["block"] < 0.14 and top["R(3)"] < 0.06  # about 13%
    assert abs(top["free"] - top["block"]) < 0.02  # about as well
    long = {"block": long_block, "free": long_free}
    assert all(abs(share(long[k]) - top[k]) < 0.005 for k in long)  # the shares stay
    norms_100 = [W_block.norm().item(), W_free.norm().item()]
    assert all(0.45 < W.norm().item() < 0.6 for W in long.values()) and max(norms_100) < 0.6


def test_a_window_fit_fakes_a_relative_centred_term():
    pe = P.sinusoidal_encoding(1024, 128)
    win, nxt = pe[:512], pe[512:]  # the window, and the next 512
    s_pe = np.linalg.svd(win, compute_uv=False)
    # cuts at 1e-12 and 1e-10 only: 1e-15 is below float64 resolution for this SVD (review m4)
    sv_at = {c: int(np.sum(s_pe > c * s_pe[0])) for c in (1e-12, 1e-10)}
    n_dirs = int(np.sum(np.outer(s_pe, s_pe) > 1e-10 * s_pe[0] ** 2))  # products s_i s_j
    assert sv_at[1e-12] < 96 and sv_at[1e-10] < sv_at[1e-12]  # numerically rank-deficient
    # products above the cut: at least the squared count above sqrt(cut) (true by construction)
    assert np.sum(s_pe > 1e-5 * s_pe[0]) ** 2 <= n_dirs <= sv_at[1e-10] ** 2
    assert 55**2 < n_dirs < 65**2  # "about 60^2"
    C = np.eye(128) - 1 / 128
    U, s_c, Vt = np.linalg.svd(win @ C, full_matrices=False)

    def fake(cut):  # W_QK = B B^T, B = I + v 1^T / d with PE C v = PE 1 (least squares)
        keep = s_c > cut * s_c[0]
        v = Vt[keep].T @ ((U[:, keep].T @ win.sum(1)) / s_c[keep])
        B = np.eye(128) + np.outer(v, np.ones(128)) / 128
        return B @ B.T

    W_fake, W6 = fake(1e-10), fake(1e-6)
    M, span = C @ W_fake @ C, np.ptp(win @ win.T)
    miss_win = np.abs(win @ (M - np.eye(128)) @ win.T).max() / span
    miss_next = np.abs(nxt @ (M - np.eye(128)) @ nxt.T).max() / span
    miss6 = np.abs(win @ (C @ W6 @ C - np.eye(128)) @ win.T).max() / span
    assert np.abs(M @ np.ones(128)).max() < 1e-9  # a code check: C 1 = 0, so not a block form
    assert miss_win < 1e-6 and miss_next > 0.1  # exact on the window, not past it
    assert np.linalg.norm(W_fake) < 3 * np.linalg.norm(np.eye(128)) and miss6 < 1e-5


def relative_dimension_cut(A, rows_free=False, tol=1e-10, other_tols=(1e-12, 1e-8)):
    # dimension of the W with A W A^T relative (rows_free: up to a number per row), counted
    # as d^2 minus the singular values above an absolute cut; also the ratios either side
    K = [[np.kron(A[m], A[n]) for n in range(len(A))] for m in range(len(A))]
    D = [[K[m + 1][n + 1] - K[m][n] for n in range(len(A) - 1)] for m in range(len(A) - 1)]
    rows = [
        D[m][n] - D[m][n + 1] if rows_free else D[m][n]
        for m in range(len(A) - 1)
        for n in range(len(A) - 1 - rows_free)
    ]
    s = np.linalg.svd(np.array(rows), compute_uv=False)
    rank = int(np.sum(s > tol))
    others = tuple(A.shape[1] ** 2 - int(np.sum(s > t)) for t in other_tols)
    return A.shape[1] ** 2 - rank, s[rank - 1] / s[0], s[rank] / s[0], others


def test_counting_the_w_qk_with_a_relative_term():
    pe8, C8 = P.sinusoidal_encoding(80, 8), np.eye(8) - np.ones((8, 8)) / 8
    tok8 = np.tile(np.random.default_rng(30).normal(size=8), (len(pe8), 1))
    cases = {
        "PE": pe8,
        "centred": pe8 @ C8,
        "divided, X = 0": pe8 @ C8 / pe8.std(1)[:, None],
        "divided, one token": pe8 @ C8 / (tok8 + pe8).std(1)[:, None],
    }
    dims = {(k, fr): relative_dimension_cut(A, fr) for k, A in cases.items() for fr in (0, 1)}
    assert dims["PE", 0][0] == 8 and all(v[0] == 15 for k, v in dims.items() if k[0] != "PE")
    assert min(v[1] / v[2] for k, v in dims.items() if k != ("PE", 1)) > 1e4  # a wide gap
    # unsettled (no gap at the cut): only the range 8 to 10 and the missing gap are checked
    assert 8 <= dims["PE", 1][0] <= 10 and dims["PE", 1][1] / dims["PE", 1][2] < 1e3
    assert dims["PE", 0][3] == (8, 8) and dims["centred", 1][3][0] == 15
    assert dims["centred", 1][3][1] >= 15  # implied by the count at 1e-10 (the review's link)
    svals = np.linalg.svd(P.sinusoidal_encoding(24, 16), compute_uv=False)
    assert svals[-1] / svals[0] < 1e-15  # section 2.6's PE: numerically rank-deficient


def test_w_qk_identity_shares_after_centring_and_dividing():
    d = 16
    C = np.eye(d) - np.ones((d, d)) / d
    share, free = {}, {}
    for T_ in (24, 512, 2048):
        pe = P.sinusoidal_encoding(T_, d)
        steps = {"PE": pe, "centred": pe @ C, "divided": pe @ C / pe.std(1)[:, None]}
        for name, A in steps.items():
            S = A @ A.T
            share[T_, name] = diagonal_spread(S) / np.ptp(S)
            if T_ == 24:
                free[name] = best_range(S) / np.ptp(S)
    assert share[24, "PE"] < 1e-12 and share[24, "centred"] - share[24, "divided"] > 0.2
    assert abs(free["centred"] - free["divided"]) < 0.05 and free["centred"] > 0.25
    assert all(share[T_, "divided"] > share[T_, "centred"] for T_ in (512, 2048))  # order flips
