"""Chapter 6's checks moved out of the reader's way (2026-11-25).

Three kinds: regression pins of committed data (the corpus, the two committed logs and
models, the presets the text quotes); independent recomputations of the side analyses the
chapter folds (the line-length comparison of the sample, the repeats among the cpu run's
windows); and the chapter's open training
loop against the package's loop on a second configuration (bf16 autocast, a short
schedule). Everything is computed from the package (``train.read_log``,
``train.load_model``, ``data.load_corpus``), never copied from the notebook; the one
exception, section 6.5's Kneser-Ney function, is read from its cell and held to an
independent dict-based implementation of the definition.
"""

from __future__ import annotations

import math
import re
import tempfile

import numpy as np
import pytest
import torch

from mini_transformer import data, train
from mini_transformer.model import TransformerLM

LINE = "To be, or not to be,--that is the question:--"


@pytest.fixture(scope="module")
def corpus():
    tok = data.CharTokenizer.from_corpus()
    train_text, val_text = data.load_corpus("train"), data.load_corpus("val")
    return tok, train_text, val_text, tok.encode(train_text), tok.encode(val_text)


@pytest.fixture(scope="module")
def cpu_model():
    torch.set_num_threads(1)
    lm, _, ckpt = train.load_model(train.PRETRAINED["cpu"])  # model, tokenizer, checkpoint dict
    return lm, ckpt


@pytest.fixture(scope="module")
def whole_loss(corpus, cpu_model):
    """Section 6.5's 1.698: the cpu model on every window of the held-out text (shared by three
    tests)."""
    return train.estimate_loss(cpu_model[0], corpus[4], n_batches=None, batch_size=16, seed=None)


@pytest.fixture(scope="module")
def thirty_samples(corpus, cpu_model):
    """Appendix A.1's 30 samples (seeds 1000-1029), each window's loss (shared by two tests)."""
    return [_window_losses(cpu_model[0], corpus[4], s) for s in range(1000, 1030)]


@pytest.fixture(scope="module")
def kn6_chars(corpus):
    """The chapter's Kneser-Ney 6-gram, per held-out character (shared by two tests)."""
    return _notebook_kneser_ney(corpus[3], corpus[4], per_character=True)(6)


# ---------------------------------------------------------------- pins of committed data


def test_corpus_split_as_the_chapter_quotes_it(corpus):
    tok, _, _, train_ids, val_ids = corpus
    works = data.load_works()
    total = sum(len(t) for t in works.values())
    held = sum(len(works[t]) for t in data.VAL_WORKS)
    assert len(works) == 42 and total == 5_057_198
    assert held == 490_684 and round(held / total, 3) == 0.097
    assert len(val_ids) == 490_690 and len(train_ids) == 4_566_588
    assert tok.vocab_size == 84


def test_tokenizer_ids_of_the_hamlet_line(corpus):
    tok = corpus[0]
    ids = tok.encode(LINE).tolist()
    assert ids[:6] == [46, 70, 1, 57, 60, 9] and len(ids) == len(LINE)


def test_unigram_baseline_of_the_held_out_text(corpus):
    tok, _, _, train_ids, val_ids = corpus
    freq = torch.bincount(train_ids, minlength=tok.vocab_size).double() / len(train_ids)
    unigram = float(-torch.log(freq[val_ids]).mean())
    assert round(unigram, 2) == 3.32  # pins the corpus, not the model


def test_cpu_log_and_checkpoint():
    log = train.read_log("cpu")
    start, end = log[0], log[-1]
    evals = [r for r in log if r["event"] == "eval"]
    assert end["step"] == 1630 and end["reason"] == "completed"
    assert start["tokens_per_step"] == 2048 and start["dtype"].startswith("bfloat16")
    assert round(evals[-1]["val_loss"], 3) == 1.682 and round(evals[-1]["train_loss"], 3) == 1.544
    rates = [r["tokens_per_s"] for r in evals if r["tokens_per_s"]]
    # 2 threads; the rate varies by under 1.5x (the last three stretches ran slowest); about 70 s
    assert start["threads"] == 2 and max(rates) / min(rates) < 1.5
    # moved from 6.7's throughput folded cell (a regression pin of the stored log, not explained):
    # the last three training stretches ran slowest
    assert set(sorted(rates)[:3]) == set(rates[-3:])
    assert round(end["wall_time_s"] / 60, 1) == 1.1
    # moved from that folded cell: the logged `mfu` (a share of a float32 matmul's rate
    # for a CPU run, not an MFU) lies between 0 and 1 on this log; a pin, not a law
    assert start["device_type"] == "cpu"
    assert all(0 < r["mfu"] < 1 for r in evals if r["tokens_per_s"])


def test_gpu_preset_is_nanogpt_shakespeare_char():
    cfg = train.get_preset("gpu")
    m = cfg.model
    assert (m.n_layers, m.n_heads, m.d_model, m.block_size, m.dropout) == (
        6,
        6,
        384,
        256,
        0.2,
    )
    assert (cfg.batch_size, cfg.steps, cfg.lr, cfg.min_lr) == (64, 5000, 1e-3, 1e-4)
    assert (cfg.warmup_steps, cfg.beta1, cfg.beta2, cfg.weight_decay) == (100, 0.9, 0.99, 0.1)
    assert (cfg.grad_clip, cfg.eval_interval) == (1.0, 250)


def _training_share(log):
    start, end = log[0], log[-1]
    prev, busy = 0, 0.0
    for r in log:
        if r["event"] == "eval" and r["tokens_per_s"]:
            busy += (r["step"] - prev) * start["tokens_per_step"] / r["tokens_per_s"]
        if r["event"] == "eval":
            prev = r["step"]
    return busy / end["wall_time_s"]


def test_gpu_log_as_the_chapter_quotes_it(corpus):
    train_ids = corpus[3]
    log = train.read_log("gpu")
    start, end = log[0], log[-1]
    evals = [r for r in log if r["event"] == "eval"]
    later = [r for r in evals if r["tokens_per_s"]][1:]
    mfu = float(np.median([r["mfu"] for r in later]))
    assert 0.07 < mfu < 0.10 and round(mfu, 3) == 0.082
    assert end["wall_time_s"] < 180 and round(end["wall_time_s"]) == 157
    assert round(evals[-1]["tokens_seen"] / len(train_ids)) == 18
    assert len(evals) == 21 and start["torch"] == "2.11.0+cu130"
    assert round(_training_share(log), 2) == 0.64


def test_the_5_percent_h100_mfu_is_the_committed_runs_whole_run_rate():
    """Section 6.7's 5%: the preset's FLOPs (training plus forward-only evaluation) over the
    committed H100 run's whole wall time and the H100's bf16 peak, not an independent guess."""
    cfg = train.get_preset("gpu")
    T = cfg.model.block_size
    per_token = TransformerLM(cfg.model).flops_per_token()
    evaluated = (cfg.steps // cfg.eval_interval + 1) * 2 * cfg.eval_batches * cfg.batch_size * T
    total = cfg.steps * cfg.batch_size * T * per_token + evaluated * per_token / 3
    wall = train.read_log("gpu")[-1]["wall_time_s"]
    assert f"{total:.2e}" == "7.46e+15"
    assert round(total / (wall * train.GPU_PEAK_FLOPS["H100"]), 3) == 0.048


def test_29_percent_of_the_cpu_runs_characters_were_repeats(corpus):
    """0.73 passes are not 0.73 epochs: windows are drawn with replacement, so a character's
    count is about Poisson(0.73), and about 29% of what was processed had been seen before."""
    train_ids = corpus[3]
    log = train.read_log("cpu")
    evals = [r for r in log if r["event"] == "eval"]
    lam = evals[-1]["tokens_seen"] / len(train_ids)
    assert round(lam, 2) == 0.73
    assert round(1 - (1 - math.exp(-lam)) / lam, 2) == 0.29


def test_cpu_run_spent_most_of_its_time_training():
    share = _training_share(train.read_log("cpu"))
    assert round(share, 2) == 0.97  # evaluation, checkpoints and start-up: the other 3%


# ---------------------------------------------------------------- the side analyses, folded


def _words(text):
    words = re.findall(r"[A-Za-z]+", text)
    return words[:-1] if text[-1].isalpha() else words


def _lines(text):
    return [line for line in text.split("\n")[:-1] if line.strip()]


def test_thirteen_sample_lines_do_not_show_learned_line_lengths(corpus, cpu_model):
    """A binomial comparison (no longer in the chapter): 9 of the sample's 13 lines fall in the
    corpus' 10-90% length band, which the baseline's lines reach as often by chance."""
    tok, train_text, _, train_ids, _ = corpus
    lm = cpu_model[0]
    prompt = tok.encode("KING.\n")[None, :]
    out = lm.generate(
        prompt, max_new_tokens=400, temperature=0.8, generator=torch.Generator().manual_seed(0)
    )
    body = tok.decode(out[0])[len("KING.\n") :]
    lines = _lines(body)
    corpus_lengths = np.array([len(line) for line in train_text.split("\n") if line.strip()])
    lo, hi = np.percentile(corpus_lengths, 10), np.percentile(corpus_lengths, 90)
    counts = torch.bincount(train_ids, minlength=tok.vocab_size).double()
    band = []
    for seed in range(5):
        drawn = tok.decode(
            torch.multinomial(
                counts, 400, replacement=True, generator=torch.Generator().manual_seed(seed)
            )
        )
        band += [lo <= len(line) <= hi for line in _lines(drawn)]
    p = float(np.mean(band))
    k, n = sum(lo <= len(line) <= hi for line in lines), len(lines)
    chance = sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))
    assert (k, n) == (9, 13) and round(chance, 2) == 0.49
    assert chance > 0.05  # the band does not separate the sample from the baseline


# ---------------------------------------------------------------- the open loop, second config


def _seed_for(*keys):
    return int(np.random.SeedSequence(list(keys)).generate_state(2, np.uint64)[0] >> np.uint64(1))


def test_open_loop_matches_the_package_under_bf16_autocast(corpus):
    """The chapter's loop, with autocast on (forced bf16) and 12 steps: still bit for bit."""
    tok, _, _, train_ids, _ = corpus
    torch.set_num_threads(1)
    cfg = train.get_preset(
        "tiny", device="cpu", progress=False, steps=12, warmup_steps=3, precision="bf16"
    )
    torch.manual_seed(cfg.seed)
    net = TransformerLM(cfg.model)
    opt, schedule = train.configure_optimizer(net, cfg), cfg.schedule()
    losses = []
    for step in range(cfg.steps):
        g = torch.Generator().manual_seed(_seed_for(cfg.seed, 0, step))
        xs, ys = data.get_batch(train_ids, cfg.batch_size, net.config.block_size, g)
        for group in opt.param_groups:
            group["lr"] = schedule(step)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            _, loss = net(xs, ys)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(loss.item())
    with tempfile.TemporaryDirectory() as tmp:
        result = train.train(cfg, tmp, argv=["test"])
        log = train.read_log(f"{tmp}/metrics.jsonl")
    assert log[0]["precision"] == "bf16"
    assert losses == result["losses"]


# -------------------------------------------------------- statistics folded out of 6.5 and 6.6


def _window_losses(lm, val_ids, seed):
    """Each window's mean loss in a sample of 8 batches of 16 windows drawn with ``seed``."""
    g, T, per_window = torch.Generator().manual_seed(seed), lm.config.block_size, []
    with torch.no_grad():
        for _ in range(8):
            xs, ys = data.get_batch(val_ids, 16, T, generator=g)
            logits, _ = lm(xs)
            nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ys, reduction="none")
            per_window.append(nll.mean(1))
    return torch.cat(per_window).double()


def test_a_samples_standard_error_predicts_the_scatter_of_30_samples(whole_loss, thirty_samples):
    """Appendix A.1: one sample's s / sqrt(128), averaged over seeds 1000-1029, is 0.018; the
    30 sampled means scatter by 0.021, within a factor 2 of that; the whole text is 1.698. The
    same 30 samples are the stored 06_sample_seeds's (float32 windows: 1e-5)."""
    whole, samples = whole_loss, thirty_samples
    stored = data.load_result("06_sample_seeds")["runs"]
    assert all(
        abs(float(w.mean()) - r["mean"]) < 1e-5 for w, r in zip(samples, stored, strict=True)
    )
    predicted = float(np.mean([float(w.std()) / math.sqrt(len(w)) for w in samples]))
    scatter = float(np.std([float(w.mean()) for w in samples], ddof=1))
    assert (round(whole, 3), round(predicted, 3)) == (1.698, 0.018)
    assert 0.5 < scatter / predicted < 2


def test_a_character_5_gram_written_with_strings_writes_88_to_96_percent_real_words(corpus):
    """Section 6.5's 5-gram control, written out with strings: the next character is drawn from
    the training works' counts after the last four characters, to the power 1 / 0.8 (the
    model's temperature), continuations in token order, NumPy's generator seeded 0 to 4.
    88% to 96% of the complete words are words of the training works. Five samples do not
    separate it from the model (85% to 94%); the chapter's 30 samples do: the 5-gram leads by
    5.0 +- 1.2 points, so it spells better than the model."""
    tok, train_text = corpus[0], corpus[1]
    follow = {}
    for i in range(len(train_text) - 4):
        ctx = follow.setdefault(train_text[i : i + 4], {})
        ctx[train_text[i + 4]] = ctx.get(train_text[i + 4], 0) + 1
    known = set(re.findall(r"[A-Za-z]+", train_text))
    order = {c: tok.encode(c).item() for c in set(train_text)}
    shares = []
    for seed in range(5):
        rng, text = np.random.default_rng(seed), "KING.\n"
        for _ in range(400):
            nxt = sorted(follow[text[-4:]].items(), key=lambda kv: order[kv[0]])
            p = np.array([n for _, n in nxt], dtype=np.float64) ** (1 / 0.8)
            text += nxt[rng.choice(len(nxt), p=p / p.sum())][0]
        body = text[6:]
        words = re.findall(r"[A-Za-z]+", body)
        words = words[:-1] if body[-1].isalpha() else words
        shares.append(np.mean([w in known for w in words]))
    assert (round(min(shares), 2), round(max(shares), 2)) == (0.88, 0.96)


def test_30_sampled_estimates_centre_on_the_whole_text(whole_loss, thirty_samples):
    """Appendix A.1: over seeds 1000-1029 the sampled estimate averages 1.700 (SD 0.021, range
    1.666 to 1.737), the whole text's value within 0.01 (the sampler is unbiased)."""
    others = np.array([float(w.mean()) for w in thirty_samples])
    assert (round(others.mean(), 3), round(others.std(ddof=1), 3)) == (1.7, 0.021)
    assert (round(others.min(), 3), round(others.max(), 3)) == (1.666, 1.737)
    assert abs(others.mean() - whole_loss) < 0.01


def test_positions_128_191_cost_more_than_64_127_on_other_draws(corpus, cpu_model):
    """Section 6.6: positions 128-191 cost more than 64-127 by over 0.1 nats, not only on the
    chapter's 64 windows (seed 11) but on three other draws (a reader's rerun found 0.15 to
    0.18; the point where a moving average first leaves the inside level varied from 132 to
    155, which is why the chapter quotes bands)."""
    val_ids, lm = corpus[4], cpu_model[0]
    for seed in (12, 13, 14):
        x, y = data.get_batch(val_ids, 64, 512, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            logits, _ = lm(x)
        per_pos = torch.nn.functional.cross_entropy(
            logits.transpose(1, 2), y, reduction="none"
        ).mean(0)
        assert float(per_pos[128:192].mean() - per_pos[64:128].mean()) > 0.1, seed


# ---------------------------------------------------------------- the model's diagram (6.1)


def test_the_model_diagram_is_read_from_the_model():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mini_transformer import plotting
    from mini_transformer.model import TransformerConfig

    def texts(model):
        fig = plotting.draw_decoder_lm(model)
        out = " ".join(t.get_text() for t in fig.axes[0].texts) + fig.axes[0].get_title()
        plt.close(fig)
        return out

    lm = TransformerLM(train.get_preset("cpu").model)
    drawn = texts(lm)
    assert "Embedding(84, 128)" in drawn and "Linear(128, 84)" in drawn and "tied" in drawn
    assert (
        "2 Pre-LN blocks" in drawn and "RoPE turns q, k" in drawn and "128 -> 512 -> 128" in drawn
    )
    cfg = TransformerConfig(
        vocab_size=10,
        block_size=8,
        d_model=16,
        n_heads=2,
        n_layers=3,
        norm_position="post",
        tie_weights=False,
        positional="learned",
    )
    post = texts(TransformerLM(cfg))
    assert "3 Post-LN blocks" in post and "Identity (Post-LN)" in post
    assert "tied" not in post and "learned positions" in post and "RoPE" not in post
    with pytest.raises(TypeError, match="TransformerLM"):
        plotting.draw_decoder_lm(torch.nn.Linear(2, 2))


def test_gpu_whole_text_loss_per_held_out_play():
    # Chapter 6, appendix A.2: the stored window losses of the gpu model, split by
    # the play each window of 256 starts in (plays joined in load_works order), recomputed here
    # from the corpus itself; the spread between plays, not between windows, sets the error.
    works = data.load_works()
    titles = [t for t in works if t in data.VAL_WORKS]
    starts = np.cumsum([0] + [len(works[t]) + len(data.WORK_SEPARATOR) for t in titles[:-1]])
    assert starts[-1] + len(works[titles[-1]]) == len(data.load_corpus("val"))
    losses = np.array(data.load_result("06_gpu_whole_text")["runs"]["256"]["window_losses"])
    play = np.searchsorted(starts, np.arange(len(losses)) * 256, side="right") - 1
    per_play = {t: losses[play == p].mean() for p, t in enumerate(titles)}
    assert {t: round(v, 3) for t, v in per_play.items()} == {
        "Hamlet": 1.343,
        "Macbeth": 1.39,
        "The Tempest": 1.476,
        "Twelfth Night": 1.374,
    }
    se_windows = losses.std(ddof=1) / math.sqrt(len(losses))
    se_plays = np.std(list(per_play.values()), ddof=1) / 2
    assert (round(se_windows, 3), round(se_plays, 3)) == (0.004, 0.029)
    assert round(se_plays / se_windows) == 7  # "seven times 0.004"


def test_vocabulary_is_read_from_all_works_and_the_training_works_hold_it(corpus):
    # from_corpus() reads the whole corpus, so the chapter's set(train_text) == set(tok.chars)
    # is a finding about the split, not true by construction
    tok, train_text, val_text, _, _ = corpus
    assert tok == data.CharTokenizer(data.load_corpus("all"))
    assert set(train_text) == set(tok.chars) and set(val_text) <= set(train_text)


# ---------------------------------------------------------------- controls of session 3


def _spaced_window_losses(lm, val_ids, pairs_off=None, zero=False):
    """Per-window losses on appendix A.4's 128 windows (every 30th of the held-out text's
    consecutive windows of T), with the rotation taken off the pairs in ``pairs_off``
    (unrotated, or set to zero) in every layer."""
    rope, d_head = lm.rotary, lm.config.d_head
    if pairs_off is not None:
        off = torch.zeros(d_head, dtype=torch.bool)
        for i in pairs_off:
            off[2 * i : 2 * i + 2] = True

        class Ablated(torch.nn.Module):
            def forward(self, t, offset=0):
                return torch.where(off, torch.zeros_like(t) if zero else t, rope(t, offset))

        for block in lm.blocks:
            block.attn.rotary = Ablated()
    T = lm.config.block_size
    windows = [val_ids[k * T : k * T + T + 1] for k in range(0, (len(val_ids) - 1) // T, 30)]
    out = []
    try:
        with torch.no_grad():
            for w in windows:  # one at a time: a different batching than the chapter's
                logits, _ = lm(w[None, :-1])
                out.append(torch.nn.functional.cross_entropy(logits[0], w[1:]))
    finally:
        for block in lm.blocks:
            block.attn.rotary = rope
    assert len(out) == 128
    return torch.stack(out).double()


def test_zeroing_the_fast_rope_pairs_costs_less_than_unrotating_them(corpus, cpu_model):
    """Appendix A.4's control: the 6 pairs with wavelength <= T, unrotated (+2.250) or zeroed
    (+1.436, out of q.k altogether). Unrotated pairs are inputs the model never saw: they do
    more damage than removing the pairs."""
    val_ids, lm = corpus[4], cpu_model[0]
    d_head = lm.config.d_head
    wavelength = 2 * math.pi * 10000.0 ** (np.arange(0, d_head, 2) / d_head)
    fast = [i for i, w in enumerate(wavelength) if w <= lm.config.block_size]
    base = _spaced_window_losses(lm, val_ids)
    unrotated = _spaced_window_losses(lm, val_ids, fast) - base
    zeroed = _spaced_window_losses(lm, val_ids, fast, zero=True) - base
    assert len(fast) == 6
    assert (round(float(unrotated.mean()), 3), round(float(zeroed.mean()), 3)) == (2.250, 1.436)
    diff = unrotated - zeroed  # paired: the same windows
    assert diff.mean() > 3 * diff.std() / math.sqrt(len(diff))


def test_exercise_7_check_fails_for_a_wrong_factor(corpus, cpu_model):
    """Exercise 7's solution resamples the cpu model's window losses: 4 times the windows
    halve the standard error (ratio within 0.05 of 0.5), a factor of 2 does not (about 0.71)."""
    tok, lm = corpus[0], cpu_model[0]
    g = torch.Generator().manual_seed(0)
    x, y = data.get_batch(tok.encode(data.load_corpus("val")), 512, 128, generator=g)
    with torch.no_grad():
        nll = torch.nn.functional.cross_entropy(lm(x)[0].transpose(1, 2), y, reduction="none")
    pool = nll.mean(1).double()

    def se_of(n):
        return float(pool[torch.randint(len(pool), (2000, n), generator=g)].mean(1).std())

    se_128 = se_of(128)
    assert abs(se_of(512) / se_128 - 0.5) < 0.05
    assert abs(se_of(256) / se_128 - 0.5) > 0.15


def test_exercise_4_flop_check_fails_without_the_attention_term():
    """Exercise 4's solution holds (6N + 12 L d T) per token to PyTorch's own count of the
    matrix products within 3%; 6N alone misses by about 7% and fails it."""
    from torch.utils.flop_counter import FlopCounterMode

    from mini_transformer.model import TransformerConfig

    torch.manual_seed(0)
    cfg = TransformerConfig(
        vocab_size=84,
        block_size=64,
        d_model=128,
        n_heads=4,
        n_layers=2,
        d_ff=512,
        positional="rope",
        fused_attention=False,
    )
    small = TransformerLM(cfg)
    idx = torch.randint(0, 84, (4, 65), generator=torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as counter:
        small(idx[:, :-1], idx[:, 1:])[1].backward()
    counted, n = counter.get_total_flops(), small.num_parameters()
    with_attention = (6 * n + 12 * 2 * 128 * 64) * 4 * 64
    assert abs(with_attention / counted - 1) < 0.03
    assert abs(6 * n * 4 * 64 / counted - 1) > 0.03


def test_the_fast_pair_costs_hold_on_the_whole_held_out_text(corpus, cpu_model, whole_loss):
    """Appendix A.4's ablation uses 128 evenly spaced windows. On all 3,833 windows of the
    held-out text the two costs of the 6 fast pairs are +2.260 (unrotated) and +1.444 (zeroed),
    within 0.03 of the spaced windows' +2.250 and +1.436, in the same order. (About a minute
    on one loaded core.)"""
    val_ids, lm = corpus[4], cpu_model[0]
    rope, d_head = lm.rotary, lm.config.d_head
    off = torch.zeros(d_head, dtype=torch.bool)
    off[:12] = True  # pairs 0-5, the fast ones (test above)

    def whole(zero=None):
        if zero is not None:

            class Ablated(torch.nn.Module):
                def forward(self, t, offset=0):
                    return torch.where(off, torch.zeros_like(t) if zero else t, rope(t, offset))

            for block in lm.blocks:
                block.attn.rotary = Ablated()
        try:
            return train.estimate_loss(lm, val_ids, n_batches=None, batch_size=64, seed=None)
        finally:
            for block in lm.blocks:
                block.attn.rotary = rope

    base = whole_loss  # all pairs rotated (batches of 16, not 64: float32 sums, far below 0.01)
    unrotated, zeroed = whole(zero=False) - base, whole(zero=True) - base
    assert (round(unrotated, 2), round(zeroed, 2)) == (2.26, 1.44)
    assert abs(unrotated - 2.250) < 0.03 and abs(zeroed - 1.436) < 0.03


# ------------------------------------------------ the Kneser-Ney n-gram of section 6.5


def _notebook_kneser_ney(train_ids, val_ids, per_character=False):
    """The chapter's own `kneser_ney_loss` (defined in a folded cell of section 6.4, which uses it
    for a bigram; section 6.5 at orders 5 and 6), read from its cell and bound to the given ids."""
    import json
    from pathlib import Path

    book = Path(__file__).resolve().parents[1] / "book" / "06_training.ipynb"
    cells = ["".join(c["source"]) for c in json.loads(book.read_text())["cells"]]
    (src,) = [s for s in cells if "def kneser_ney_loss" in s]
    src = src[src.index("def kneser_ney_loss") :]  # its own folded cell (section 6.4)
    tok = data.CharTokenizer.from_corpus()
    scope = {"np": np, "tok": tok, "train_ids": train_ids, "val_ids": val_ids}
    exec(src, scope)  # noqa: S102 - the chapter's code, run on a small case
    if per_character:
        return scope["kneser_ney_loss"]
    return lambda n: float(scope["kneser_ney_loss"](n).mean())  # per character -> mean


def _kneser_ney_reference(n, train, held, D=0.75, V=84):
    """Interpolated Kneser-Ney by its recursive definition, with Python dicts.

    Top order: raw counts of the training n-grams; order k < n: the number of distinct
    characters a such that a + w ends some training n-gram (continuation counts). Returns
    p(c | context) as a function and the mean negative log-probability of every held-out
    character after the first n - 1.
    """
    grams = [tuple(train[i : i + n]) for i in range(len(train) - n + 1)]
    counts = {n: {}}
    for g in grams:
        counts[n][g] = counts[n].get(g, 0) + 1
    suffixes = set(grams)
    for k in range(n - 1, 0, -1):
        counts[k] = {}
        for g in suffixes:
            counts[k][g[1:]] = counts[k].get(g[1:], 0) + 1
        suffixes = {g[1:] for g in suffixes}

    def p(c, h):  # h: the previous characters, a tuple of length k - 1
        k = len(h) + 1
        if k == 0 or k > n:
            return 1.0 / V if k == 0 else p(c, h[1:])
        lower = p(c, h[1:]) if h else 1.0 / V
        row = [counts[k].get(h + (x,), 0) for x in range(V)]
        total = sum(row)
        if total == 0:
            return lower
        types = sum(v > 0 for v in row)
        return (max(row[c] - D, 0) + D * types * lower) / total

    nll = [-math.log(p(held[t], tuple(held[t - n + 1 : t]))) for t in range(n - 1, len(held))]
    return p, sum(nll) / len(nll)


def test_kneser_ney_matches_its_definition_on_a_small_case(corpus):
    tr, va = corpus[3][:20_000], corpus[4][:2_000]
    ours = _notebook_kneser_ney(tr, va)
    for n in (2, 3, 5):
        p, ref = _kneser_ney_reference(n, tr.tolist(), va.tolist())
        assert abs(ours(n) - ref) < 1e-12 * ref
    rng = np.random.default_rng(0)  # a distribution: sums to 1 on seen and unseen contexts
    for h in [tuple(va[10:14].tolist()), tuple(rng.integers(0, 84, 4).tolist())]:
        assert abs(sum(p(c, h) for c in range(84)) - 1) < 1e-12


def test_kneser_ney_n_grams_on_the_whole_held_out_text(corpus, kn6_chars):
    """Section 6.5: 1.617 (order 5) and 1.563 (order 6); the cpu model's 1.698 loses to
    both, and the gpu model's 1.412 on windows of 128 beats the 6-gram by 0.15."""
    kn5, kn6 = _notebook_kneser_ney(corpus[3], corpus[4])(5), float(kn6_chars.mean())
    assert (round(kn5, 3), round(kn6, 3)) == (1.617, 1.563)
    gpu = data.load_result("06_gpu_whole_text")["runs"]["128"]["window_losses"]
    assert np.mean(gpu) < kn6 - 0.1 < kn5 - 0.1 < 1.698 - 0.1


def test_a_full_context_does_not_close_the_gap_to_the_6_gram():
    """Section 6.5's control (06_full_context, tools/ch6_controls.py; pins of committed data):
    4,096 held-out characters spread evenly over the whole windows, each predicted from its own
    128 previous characters. The cpu model scores 1.689 (1.706 in its restarting windows,
    +0.017 +- 0.004), the Kneser-Ney 6-gram 1.562 on the same characters (model minus 6-gram
    +0.127 +- 0.016): a full context helps a little, and the model still trails the 6-gram."""
    fc = data.load_result("06_full_context")
    m, d_ctx, d_kn = fc["means"], fc["restart_minus_full"], fc["full_minus_kn6"]
    assert fc["n_characters"] == 4096 and len(fc["chunk_means"]) == 4096 // fc["chunk"]
    assert tuple(round(m[k], 3) for k in ("full", "restart", "kn6")) == (1.689, 1.706, 1.562)
    assert (round(d_ctx["mean"], 3), round(d_ctx["se"], 3)) == (0.017, 0.004)
    assert (round(d_kn["mean"], 3), round(d_kn["se"], 3)) == (0.127, 0.016)
    assert d_ctx["mean"] > 3 * d_ctx["se"]  # a full context helps the model a little,
    assert d_kn["mean"] > 3 * d_kn["se"]  # but it still trails the 6-gram on the same characters
    assert abs(np.mean([c["full"] for c in fc["chunk_means"]]) - m["full"]) < 1e-9


def test_the_full_context_control_reruns_on_its_first_512_characters(corpus, cpu_model, kn6_chars):
    """The reproduction check of 06_full_context: the tool's own functions on its first chunk
    (512 of the 4,096 characters) give the stored chunk means (float32 logits: 1e-4 nats; the
    6-gram is float64: 1e-9), and the tool's Kneser-Ney is the chapter's, character for
    character. Scored once more here with a log-softmax on explicit windows (not the tool's
    batched cross-entropy) on the first 64 characters."""
    import ch6_controls as tool

    train_ids, val_ids, lm = corpus[3], corpus[4], cpu_model[0]
    T, stored = lm.config.block_size, data.load_result("06_full_context")
    targets = tool.spread_targets(len(val_ids), T)[: stored["chunk"]]
    assert int(targets[1] - targets[0]) == stored["spacing"]
    got = tool.full_context(lm, val_ids, targets)
    kn6 = tool.kneser_ney_loss(train_ids, val_ids, 6)
    assert np.array_equal(kn6, kn6_chars)
    first = stored["chunk_means"][0]
    assert abs(float(got["full"].mean()) - first["full"]) < 1e-4
    assert abs(float(got["restart"].mean()) - first["restart"]) < 1e-4
    assert abs(float(kn6[targets.numpy() - 5].mean()) - first["kn6"]) < 1e-9
    t = targets[:64]
    with torch.no_grad():
        x = torch.stack([val_ids[a : a + T] for a in (t - T).tolist()])
        logp = torch.log_softmax(lm(x)[0].double(), -1)[:, -1]
    assert torch.allclose(-logp[torch.arange(64), val_ids[t]], got["full"][:64], atol=1e-4)


# ---------------------------------------------------------------- clipping over 40 seeds (6.4)


def test_clipping_result_over_40_seeds_and_a_live_rerun_of_one(corpus):
    """Section 6.4's stored results (tools/clip_seeds.py): without minus with clipping, on the
    whole held-out text. Seeds 0-19 (exploratory): +0.062 +- 0.021, lower with clipping on 14;
    seeds 0-4 alone -0.04. Seeds 20-39 (the confirmation run afterwards, 06_clip_seeds_20_39):
    +0.045 +- 0.024. Pooled over 40: +0.054 +- 0.016 (3.4 SE). Unclipped at lr 6e-3 minus
    clipped at 1e-2, pooled: +0.005 +- 0.016. Seeds 40-79 (the last confirmation): +0.112 +-
    0.015, lower with clipping on 35; lower rate minus clipped +0.017 +- 0.013. All 80 (the set
    the chapter quotes): +0.083 +- 0.011; lower rate minus clipped +0.011 +- 0.010; unclipped
    0.01 minus 0.006 +0.072 +- 0.011. On seeds 20-79 (quoted on the path): lower rate minus
    clipped +0.012 +- 0.011, unclipped 0.01 minus 0.006 +0.077 +- 0.012. Seed 3's three runs,
    retrained here, give the stored losses (float32 training: within 2e-3 on another CPU's
    kernels)."""
    val_ids = corpus[4]
    runs = data.load_result("06_clip_seeds")["runs"]
    more = data.load_result("06_clip_seeds_20_39")
    assert sorted(map(int, runs)) == list(range(20)) and sorted(map(int, more["runs"])) == list(
        range(20, 40)
    )
    assert more["command"].startswith("tools/clip_seeds.py --first-seed 20")
    both = {int(k): v for res in (runs, more["runs"]) for k, v in res.items()}

    def diffs(a, b, seeds):
        return np.array(
            [both[s][a]["whole_text_loss"] - both[s][b]["whole_text_loss"] for s in seeds]
        )

    def mean_se(d):
        return round(d.mean(), 3), round(d.std(ddof=1) / math.sqrt(len(d)), 3)

    first = diffs("unclipped", "clipped", range(20))
    assert mean_se(first) + (int((first > 0).sum()),) == (0.062, 0.021, 14)
    assert round(first[:5].mean(), 2) == -0.04
    assert mean_se(diffs("unclipped", "clipped", range(20, 40))) == (0.045, 0.024)
    pooled = diffs("unclipped", "clipped", range(40))
    assert mean_se(pooled) == (0.054, 0.016)
    assert pooled.mean() / (pooled.std(ddof=1) / math.sqrt(40)) > 2.023  # t, 39 df, 5% two-sided
    # the reviewer's control: unclipped at peak rate 6e-3 minus clipped at 1e-2
    assert mean_se(diffs("unclipped_lower_lr", "clipped", range(20))) == (0.008, 0.023)
    assert mean_se(diffs("unclipped_lower_lr", "clipped", range(40))) == (0.005, 0.016)
    # the last confirmation, seeds 40-79 (06_clip_seeds_40_79), fixed after the 20-39 result
    last = data.load_result("06_clip_seeds_40_79")
    assert sorted(map(int, last["runs"])) == list(range(40, 80))
    assert last["command"].startswith("tools/clip_seeds.py --first-seed 40 --seeds 40")
    both.update({int(k): v for k, v in last["runs"].items()})
    third = diffs("unclipped", "clipped", range(40, 80))
    assert mean_se(third) + (int((third > 0).sum()),) == (0.112, 0.015, 35)
    assert mean_se(diffs("unclipped_lower_lr", "clipped", range(40, 80))) == (0.017, 0.013)
    # the size section 6.4 and the Summary quote: every stored seed pooled, and the confirmations
    assert mean_se(diffs("unclipped", "clipped", range(80))) == (0.083, 0.011)
    assert mean_se(diffs("unclipped", "clipped", range(20, 80))) == (0.090, 0.013)
    # the size's scatter (A.6): the three 20-seed means, and their SD / sqrt(3), twice the ±
    blocks20 = [diffs("unclipped", "clipped", range(a, a + 20)).mean() for a in (20, 40, 60)]
    assert [round(m, 3) for m in blocks20] == [0.045, 0.135, 0.089]
    assert round(np.std(blocks20, ddof=1) / math.sqrt(3), 3) == 0.026
    # the lower rate, on the same 80 seeds as the pooled size (appendix A.6)
    low = diffs("unclipped_lower_lr", "clipped", range(80))
    assert mean_se(low) == (0.011, 0.010)
    low_se = low.std(ddof=1) / math.sqrt(80)
    assert round(low.mean() - 1.990 * low_se, 3) == -0.009  # t, 79 df, 5% two-sided
    assert round(low.mean() + 1.990 * low_se, 3) == 0.032
    assert mean_se(diffs("unclipped", "unclipped_lower_lr", range(80))) == (0.072, 0.011)
    # the lower rate on the headline's seeds 20-79 (section 6.4 quotes these), t with 59 df
    low_conf = diffs("unclipped_lower_lr", "clipped", range(20, 80))
    assert mean_se(low_conf) == (0.012, 0.011)
    conf_se = low_conf.std(ddof=1) / math.sqrt(60)
    assert [round(low_conf.mean() + k * 2.001 * conf_se, 3) for k in (-1, 1)] == [-0.011, 0.035]
    assert mean_se(diffs("unclipped", "unclipped_lower_lr", range(20, 80))) == (0.077, 0.012)
    # every stored run, all three arms, ends between 2.773 and 3.325 (above a character bigram)
    every = [arm["whole_text_loss"] for run in both.values() for arm in run.values()]
    assert len(every) == 240 and (round(min(every), 3), round(max(every), 3)) == (2.773, 3.325)
    torch.set_num_threads(1)
    for name, clip, lr in (
        ("clipped", 1.0, None), ("unclipped", 0.0, None), ("unclipped_lower_lr", 0.0, 6e-3)
    ):  # fmt: skip
        cfg = train.get_preset(
            "tiny", device="cpu", progress=False, precision="fp32", seed=3, grad_clip=clip, lr=lr
        )
        built = []
        with tempfile.TemporaryDirectory() as tmp:
            train.train(cfg, tmp, argv=[], setup_hook=built.append)
        live = train.estimate_loss(built[0], val_ids, n_batches=None, batch_size=256, seed=None)
        assert abs(live - runs["3"][name]["whole_text_loss"]) < 2e-3, name


def test_clippings_paired_difference_is_below_the_clipped_runs_spread_between_seeds():
    """Moved from section 6.4's cell (the s86 expert's M2): the clipped runs' losses spread by
    0.114 nats between seeds 20-79, more than clipping's paired 0.090. The chapter no longer
    quotes the spread: the paired design takes it out of the difference."""
    runs = {}
    for name in ("06_clip_seeds_20_39", "06_clip_seeds_40_79"):
        for k, v in data.load_result(name)["runs"].items():
            runs[int(k)] = v
    seeds = range(20, 80)
    clipped = np.array([runs[s]["clipped"]["whole_text_loss"] for s in seeds])
    diff = np.array([runs[s]["unclipped"]["whole_text_loss"] for s in seeds]) - clipped
    assert (round(clipped.mean(), 3), round(clipped.std(ddof=1), 3)) == (3.027, 0.114)
    assert round(diff.mean(), 3) == 0.09
    assert diff.mean() < clipped.std(ddof=1)


def test_the_block_bar_has_2_degrees_of_freedom_and_does_not_reach_5_percent():
    """Appendix A.6's second dropdown, moved there from section 6.4 (the s104 expert's M1):
    0.090 over the block bar, 0.026, is 3.5 standard errors, but three 20-seed block means give a
    t-statistic on 2 degrees of freedom: two-sided p = 0.07, not below 5 %. The paired bar (59
    degrees of freedom) is clear."""
    scipy_stats = pytest.importorskip("scipy.stats")
    runs = {}
    for name in ("06_clip_seeds_20_39", "06_clip_seeds_40_79"):
        for k, v in data.load_result(name)["runs"].items():
            runs[int(k)] = v
    diff = np.array(
        [
            runs[s]["unclipped"]["whole_text_loss"] - runs[s]["clipped"]["whole_text_loss"]
            for s in range(20, 80)
        ]
    )
    blocks = diff.reshape(3, 20).mean(1)
    se_blocks = blocks.std(ddof=1) / math.sqrt(3)
    t_blocks = diff.mean() / se_blocks
    p_blocks = 2 * scipy_stats.t.sf(t_blocks, df=2)
    assert round(t_blocks, 1) == 3.5 and round(p_blocks, 2) == 0.07
    assert t_blocks < scipy_stats.t.ppf(0.975, df=2)  # 4.30: the block bar does not reach 5 %
    t_paired = diff.mean() / (diff.std(ddof=1) / math.sqrt(60))
    assert 2 * scipy_stats.t.sf(t_paired, df=59) < 1e-6  # the paired bar is clear


def test_hamlets_abbreviated_speakers_never_speak_in_the_training_works(corpus):
    """Appendix A.3 (the s104 expert's M2): Hamlet names its speakers in mixed case ("Hor."),
    which the chapter's capitals-only mask does not match; its main speakers, too, never speak
    in the training works."""
    _, train_text, val_text, _, _ = corpus
    caps = r"(?m)^[A-Z][A-Z' ]+\.$"
    hamlet = data.load_works()["Hamlet"]
    assert (
        len(re.findall(caps, hamlet))
        < 10
        < 100
        < len(re.findall(r"(?m)^(?:Ham|Hor|King|Pol)\.$", hamlet))
    )
    for name in ("Ham", "Hor", "King", "Pol", "Queen", "Laer", "Oph"):
        assert f"\n{name}.\n" in val_text and f"\n{name}.\n" not in train_text


def test_the_fourth_arm_clipped_at_the_lower_rate_and_a_live_rerun_of_one(corpus):
    """Section 6.4's fourth arm (06_clip_low_rate, ``tools/clip_seeds.py --fourth-arm``): the tiny
    run clipped at peak rate 6e-3 on seeds 20-79, paired with those seeds' three stored arms.
    Without minus with clipping at 6e-3: +0.095 +- 0.009, lower when clipped on 59 of 60 (seeds
    60-79 alone, which no one had run before: +0.105 +- 0.015, 20 of 20); clipped, 1e-2 minus
    6e-3: +0.083 +- 0.011, on 53 of 60; clipping's benefit at 1e-2 minus at 6e-3: -0.006 +-
    0.015. The four arms' means: 3.027, 3.116, 3.039, 2.944. Seeds 20 and 21 equal, to the digit,
    a reviewer's own run made before the file existed; seed 21, retrained here, gives the stored
    loss (float32 training: within 2e-3 on another CPU's kernels)."""
    val_ids = corpus[4]
    low = data.load_result("06_clip_low_rate")
    assert low["command"].startswith("tools/clip_seeds.py --fourth-arm --first-seed 20 --seeds 60")
    assert sorted(map(int, low["runs"])) == list(range(20, 80))
    assert all(set(r) == {"clipped_lower_lr"} for r in low["runs"].values())
    runs = {
        int(k): dict(v)
        for name in ("06_clip_seeds_20_39", "06_clip_seeds_40_79")
        for k, v in data.load_result(name)["runs"].items()
    }
    for k, v in low["runs"].items():
        runs[int(k)] |= v
    seeds = range(20, 80)

    def diffs(a, b, chosen=seeds):
        return np.array(
            [runs[s][a]["whole_text_loss"] - runs[s][b]["whole_text_loss"] for s in chosen]
        )

    def summary(d):  # mean, standard error, seeds where a is above b
        return round(d.mean(), 3), round(d.std(ddof=1) / math.sqrt(len(d)), 3), int((d > 0).sum())

    at_low = diffs("unclipped_lower_lr", "clipped_lower_lr")
    assert summary(at_low) == (0.095, 0.009, 59)
    unseen = diffs("unclipped_lower_lr", "clipped_lower_lr", range(60, 80))
    assert summary(unseen) == (0.105, 0.015, 20)
    assert summary(diffs("clipped", "clipped_lower_lr")) == (0.083, 0.011, 53)
    assert summary(diffs("unclipped", "unclipped_lower_lr"))[:2] == (0.077, 0.012)
    benefit = diffs("unclipped", "clipped") - at_low  # clipping's benefit at 1e-2 minus at 6e-3
    assert summary(benefit)[:2] == (-0.006, 0.015)
    arms = ("clipped", "unclipped", "unclipped_lower_lr", "clipped_lower_lr")
    means = {
        a: round(float(np.mean([runs[s][a]["whole_text_loss"] for s in seeds])), 3) for a in arms
    }
    assert means == {
        "clipped": 3.027, "unclipped": 3.116, "unclipped_lower_lr": 3.039, "clipped_lower_lr": 2.944
    }  # fmt: skip
    # the reviewer's run (tools/clip_seeds.tiny_run(seed, 1.0, val_ids, lr=6e-3)), to the digit
    assert runs[20]["clipped_lower_lr"]["whole_text_loss"] == 2.966358
    assert runs[21]["clipped_lower_lr"]["whole_text_loss"] == 2.86297
    torch.set_num_threads(1)
    cfg = train.get_preset(
        "tiny", device="cpu", progress=False, precision="fp32", seed=21, grad_clip=1.0, lr=6e-3
    )
    built = []
    with tempfile.TemporaryDirectory() as tmp:
        train.train(cfg, tmp, argv=[], setup_hook=built.append)
    live = train.estimate_loss(built[0], val_ids, n_batches=None, batch_size=256, seed=None)
    assert abs(live - runs[21]["clipped_lower_lr"]["whole_text_loss"]) < 2e-3


def test_clipping_at_600_steps_as_section_6_4_states_it():
    """Section 6.4's longer runs (06_clip_600, ``tools/clip_seeds.py --steps 600``): the tiny
    preset trained 600 steps (warm-up, peak rate 1e-2 and floor unchanged), clipped and
    unclipped, seeds 20-39, each scored on the whole held-out text. Without minus with clipping:
    +0.022 +- 0.012 (1.8 SE, median +0.007), lower when clipped on 11 of 20; the 40 runs average
    2.34, below the character bigram's 2.522. The same seeds at 60 steps: +0.045 +- 0.024, 13 of
    20; 60 steps minus 600, seed by seed: +0.023 +- 0.021. Seeds 20-35 equal, to the 3 decimals it
    printed, a reviewer's own runs made before this file (``steps=600, eval_interval=600``:
    evaluations do not touch training's random numbers)."""
    res = data.load_result("06_clip_600")
    assert res["command"].startswith("tools/clip_seeds.py --steps 600 --first-seed 20 --seeds 10")
    assert [p["command"].split("--out")[0].strip() for p in res["parts"]] == [
        f"tools/clip_seeds.py --steps 600 --first-seed {f} --seeds 10" for f in (20, 30)
    ]
    assert "steps 600" in res["preset"] and res["where_it_ran"]["threads"] == 1
    runs = {int(k): v for k, v in res["runs"].items()}
    assert sorted(runs) == list(range(20, 40)) and all(
        set(r) == {"clipped", "unclipped"} for r in runs.values()
    )

    def loss(arm, seeds=range(20, 40)):
        return np.array([runs[s][arm]["whole_text_loss"] for s in seeds])

    d = loss("unclipped") - loss("clipped")
    se = d.std(ddof=1) / math.sqrt(len(d))
    assert (round(d.mean(), 3), round(se, 3), int((d > 0).sum())) == (0.022, 0.012, 11)
    assert round(d.mean() / se, 1) == 1.8 and round(float(np.median(d)), 3) == 0.007
    assert round(float(np.concatenate([loss("clipped"), loss("unclipped")]).mean()), 2) == 2.34
    # the reviewer's runs (s47, clip_long.py), printed to 3 decimals: clipped, unclipped
    reviewer = {20: (2.357, 2.319), 21: (2.299, 2.325), 22: (2.325, 2.297), 26: (2.415, 2.529),
                30: (2.306, 2.446), 35: (2.284, 2.336)}  # fmt: skip
    for s, pair in reviewer.items():
        assert (
            round(runs[s]["clipped"]["whole_text_loss"], 3),
            round(runs[s]["unclipped"]["whole_text_loss"], 3),
        ) == pair, s
    # the same seeds at 60 steps, and the benefit at 60 steps minus at 600
    at60 = {int(k): v for k, v in data.load_result("06_clip_seeds_20_39")["runs"].items()}
    d60 = np.array(
        [
            at60[s]["unclipped"]["whole_text_loss"] - at60[s]["clipped"]["whole_text_loss"]
            for s in runs
        ]
    )
    gap = d60 - d
    assert (round(gap.mean(), 3), round(gap.std(ddof=1) / math.sqrt(20), 3)) == (0.023, 0.021)


def test_the_cpu_preset_on_four_more_seeds_as_section_6_5_states_it():
    """Section 6.5's "One run, one seed, and four more" (06_cpu_seeds, ``tools/cpu_seeds.py``):
    the cpu preset (bf16 autocast as the shipped run, 1,630 steps, 1 thread) on seeds 1-4, each
    final model rounded to float16 as shipped and scored on the whole held-out text at T = 128.
    With the shipped seed 0 (1.698) the five seeds score 1.692 to 1.701, all behind the untuned
    Kneser-Ney 5-gram (1.617) and so the 6-gram (1.563): by 0.076 to 0.084 and 0.130 to 0.138."""
    res = data.load_result("06_cpu_seeds")
    assert res["command"] == (
        "tools/cpu_seeds.py --first-seed 1 --seeds 4"
        " --out mini_transformer/results/06_cpu_seeds.json"
    )
    # wall_time_s is written only after the last seed
    assert res["commit"].startswith("eb4f841") and "wall_time_s" in res
    assert res["preset"].startswith("cpu, precision bf16") and "float16 weights" in res["preset"]
    assert res["where_it_ran"]["threads"] == 1 and res["where_it_ran"]["torch"] == "2.13.0+cpu"
    runs = {int(k): v for k, v in res["runs"].items()}
    assert sorted(runs) == [1, 2, 3, 4] and all(r["steps"] == 1630 for r in runs.values())
    assert {s: r["whole_text_loss"] for s, r in runs.items()} == {
        1: 1.698999,
        2: 1.692308,
        3: 1.700618,
        4: 1.695935,
    }
    assert {s: r["log_val_loss"] for s, r in runs.items()} == {
        1: 1.657706,
        2: 1.690912,
        3: 1.714506,
        4: 1.693914,
    }
    losses = np.array([1.6985] + [runs[s]["whole_text_loss"] for s in range(1, 5)])  # seed 0: 6.5
    kn5, kn6 = 1.6167, 1.5625  # section 6.5's n-grams (test_kneser_ney_n_grams_... pins them)
    assert (round(losses.min(), 3), round(losses.max(), 3)) == (1.692, 1.701)
    assert (round(losses.min() - kn5, 3), round(losses.max() - kn5, 3)) == (0.076, 0.084)
    assert (round(losses.min() - kn6, 3), round(losses.max() - kn6, 3)) == (0.130, 0.138)


def test_the_fifth_arm_unclipped_at_0_004_and_seed_41_rerun_at_head(corpus):
    """Section 6.4's fifth arm (06_clip_unclipped_004, ``tools/clip_seeds.py --unclipped-lr
    0.004``): unclipped tiny runs at peak rate 4e-3 on seeds 20-79, the s52 expert's control for
    'clipping at 6e-3 is not just a lower rate'. Mean 3.034 (unclipped at 6e-3: 3.039); unclipped
    4e-3 minus clipped 6e-3: +0.091 +- 0.007, lower when clipped on 58 of 60, 20-seed means
    0.087, 0.074, 0.111; unclipped 4e-3 minus unclipped 6e-3: -0.005 +- 0.010 (flat). Then seed
    41 (06_clip_seeds_40_79, run at commit e1f2447), both arms retrained at today's code: the
    stored losses (on the CPU that stored them to all six decimals; float32 kernels of other
    CPUs: within 2e-3), as seed 3 of the exploratory file does above; seed 25 of the 20-39 file
    (commit 88310f4): the next test."""
    val_ids = corpus[4]
    res = data.load_result("06_clip_unclipped_004")
    assert res["command"].startswith("tools/clip_seeds.py --unclipped-lr 0.004 --first-seed 20")
    assert sorted(map(int, res["runs"])) == list(range(20, 80))
    assert all(set(r) == {"unclipped_at_lr"} for r in res["runs"].values())
    runs = {}
    for name in ("06_clip_seeds_20_39", "06_clip_seeds_40_79", "06_clip_low_rate"):
        for k, v in data.load_result(name)["runs"].items():
            runs.setdefault(int(k), {}).update(v)
    for k, v in res["runs"].items():
        runs[int(k)].update(v)

    def diffs(a, b, seeds=range(20, 80)):
        return np.array(
            [runs[s][a]["whole_text_loss"] - runs[s][b]["whole_text_loss"] for s in seeds]
        )

    def summary(d):  # mean, standard error, seeds where a is above b
        return round(d.mean(), 3), round(d.std(ddof=1) / math.sqrt(len(d)), 3), int((d > 0).sum())

    mean4 = np.mean([runs[s]["unclipped_at_lr"]["whole_text_loss"] for s in range(20, 80)])
    assert round(float(mean4), 3) == 3.034
    assert summary(diffs("unclipped_at_lr", "clipped_lower_lr")) == (0.091, 0.007, 58)
    blocks = [
        diffs("unclipped_at_lr", "clipped_lower_lr", range(a, a + 20)).mean() for a in (20, 40, 60)
    ]
    assert [round(m, 3) for m in blocks] == [0.087, 0.074, 0.111]
    assert summary(diffs("unclipped_at_lr", "unclipped_lower_lr"))[:2] == (-0.005, 0.010)
    # seed 41, both arms, retrained at HEAD
    _retrained_seed_matches(val_ids, "06_clip_seeds_40_79", "e1f2447", 41)


def _retrained_seed_matches(val_ids, result, commit, seed):
    """Retrain one stored seed of a clipping file, both arms, at today's code: the whole-text
    loss within 2e-3 of the stored one (float32 kernels of other CPUs)."""
    stored = data.load_result(result)
    assert stored["commit"].startswith(commit)
    torch.set_num_threads(1)
    for name, clip in (("clipped", 1.0), ("unclipped", 0.0)):
        cfg = train.get_preset(
            "tiny", device="cpu", progress=False, precision="fp32", seed=seed, grad_clip=clip
        )
        built = []
        with tempfile.TemporaryDirectory() as tmp:
            train.train(cfg, tmp, argv=[], setup_hook=built.append)
        live = train.estimate_loss(built[0], val_ids, n_batches=None, batch_size=256, seed=None)
        assert abs(live - stored["runs"][str(seed)][name]["whole_text_loss"]) < 2e-3, name


def test_seed_25_of_the_first_confirmation_rerun_at_head(corpus):
    """Appendix A.6 says the 20-seed blocks' files come from three commits, and that retraining
    a seed of them at today's code gives the stored losses. Seeds 3 and 41 are retrained above;
    here seed 25 of 06_clip_seeds_20_39 (commit 88310f4), both arms, within 2e-3 (float32 kernels
    of other CPUs), so the first confirmation block is checked at HEAD too."""
    _retrained_seed_matches(corpus[4], "06_clip_seeds_20_39", "88310f4", 25)


def test_the_residual_scaling_makes_the_summed_writes_about_one_projections_variance(corpus):
    """Section 6.1's initialisation dropdown: scaling the 2L residual writes by 1/sqrt(2L) should
    cut the variance of their sum (the stream after the last block minus the embedding) by about
    1/(2L) = 0.25 for L = 2 if the writes are uncorrelated with equal variance. Measured on the
    seed-0 untrained ``cpu`` model against the same model with those weights multiplied back by
    sqrt(2L) (the unscaled initialisation), on 8 windows of 128 training characters."""
    torch.manual_seed(0)
    model = TransformerLM(train.get_preset("cpu").model).eval()
    L = model.config.n_layers
    g = torch.Generator().manual_seed(0)
    xs, _ = data.get_batch(corpus[3], 8, model.config.block_size, g)

    @torch.no_grad()
    def summed_writes_variance():
        emb = model.tok_emb(xs)
        x = emb
        for block in model.blocks:
            x = block(x)
        return float((x - emb).var())

    scaled = summed_writes_variance()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.out_proj.weight.mul_(math.sqrt(2 * L))
            block.ffn.linear2.weight.mul_(math.sqrt(2 * L))
    ratio = scaled / summed_writes_variance()
    assert 0.15 < ratio < 0.4, ratio  # predicted 1 / (2L) = 0.25


def test_the_cpu_recipe_was_the_lowest_of_15_runs_scored_on_the_whole_held_out_text():
    """Section 6.5 discloses that the held-out text chose the ``cpu`` recipe: the sweep in
    benchmarks/results/cpu_recipe_sweep.json scored 15 of its 18 runs (3 short precision checks
    were not scored) by the loss on the whole held-out text, and the lowest is the preset's
    recipe (run there in float32; the committed model in bf16)."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks/results/cpu_recipe_sweep.json"
    sweep = json.loads(path.read_text())
    assert "whole held-out text" in sweep["held_out_loss"]
    scored = [r for r in sweep["runs"] if r["held_out_loss"] is not None]
    assert len(sweep["runs"]) == 18 and len(scored) == 15
    best = min(scored, key=lambda r: r["held_out_loss"])
    preset = train.get_preset("cpu")
    assert best["model_config"] == preset.model.to_dict()
    for key in ("batch_size", "steps", "lr", "min_lr", "warmup_steps", "weight_decay", "beta1",
                "beta2", "grad_clip", "seed"):  # fmt: skip
        assert best["train_config"][key] == getattr(preset, key), key


def test_the_chosen_recipe_had_a_20_percent_larger_budget_than_the_other_t128_candidates():
    """Section 6.5's recipe dropdown: the sweep's winner (1,630 steps, 1.696) had 9.48e12
    training FLOPs, 20% more than the about 7.9e12 of every other scored candidate with T = 128,
    and beat the best of those by 0.014 nats. The dropdown's hidden cell prints them from the
    summary the package ships (tested below); here they are pinned on the full sweep."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks/results/cpu_recipe_sweep.json"
    scored = [r for r in json.loads(path.read_text())["runs"] if r["held_out_loss"] is not None]
    assert len(scored) == 15
    best = min(scored, key=lambda r: r["held_out_loss"])
    t128 = [r for r in scored if r["model_config"]["block_size"] == 128 and r is not best]
    assert best["train_config"]["steps"] == 1630 and round(best["held_out_loss"], 3) == 1.696
    assert f"{best['train_flops']:.2e}" == "9.48e+12"
    assert all(round(r["train_flops"] / 1e12, 1) == 7.9 for r in t128)  # about 7.9e12 each
    assert round(best["train_flops"] / max(r["train_flops"] for r in t128) - 1, 2) == 0.20
    runner_up = min(r["held_out_loss"] for r in t128)
    assert round(runner_up - best["held_out_loss"], 3) == 0.014
    # the only candidate above the T = 128 budget besides the winner is the T = 256 run
    assert [
        r["model_config"]["block_size"] for r in scored if r["train_flops"] > 8e12 and r is not best
    ] == [256]


def test_the_gpu_runs_gap_grew_at_nearly_every_evaluation():
    """Section 6.7's "the gap grew with the passes": not only from the first evaluation (0.075)
    to the last (0.274), but at 17 of the 19 steps between its 20 evaluations after step 0;
    the two dips are 0.003 and 0.0001 nats."""
    evals = [r for r in train.read_log("gpu") if r["event"] == "eval" and r["tokens_seen"] > 0]
    gaps = np.array([r["val_loss"] - r["train_loss"] for r in evals])
    assert len(gaps) == 20 and (np.diff(gaps) > 0).sum() == 17 and np.diff(gaps).min() > -0.005
    assert [round(gaps[0], 3), round(gaps[-1], 3)] == [0.075, 0.274]


# ------------------------------------ appendix A.3's memorising term, resolved (tools/gap_split)

GAP_SPLIT = "benchmarks/results/06_gap_split.json"


def _gap_split():
    import json
    from pathlib import Path

    return json.loads((Path(__file__).resolve().parents[1] / GAP_SPLIT).read_text())


def test_the_memorising_term_is_resolved_on_thousands_of_disjoint_windows():
    """Appendix A.3: on two disjoint draws of 4,096 windows per group (no two windows of a group
    share a character), processed training windows score 0.015 +- 0.004 and 0.018 +- 0.005 nats
    below never-processed ones (3.7 standard errors each); pooled over 8,192, 0.017 +- 0.003;
    with the 38 training works as the units, 0.018 +- 0.005, lower in 28 of them. The whole
    held-out text lies 0.133 above the never-processed windows. Each figure is recomputed
    here from the stored window losses, not only read."""
    res = _gap_split()
    assert res["command"].startswith("tools/gap_split.py --out " + GAP_SPLIT)
    assert res["where_it_ran"]["threads"] == 1 and res["wall_time_s"] > 0 and "commit" in res
    draws, pooled = res["draws"], res["pooled"]
    assert len(draws) == 2 and pooled["n_windows_per_group"] == 8192
    groups = ("never processed", "processed")

    def diff(a, b):
        a, b = np.asarray(a), np.asarray(b)
        se = math.hypot(a.std(ddof=1) / math.sqrt(len(a)), b.std(ddof=1) / math.sqrt(len(b)))
        return a.mean() - b.mean(), se

    for draw, (m_want, se_want) in zip(draws, ((-0.015, 0.004), (-0.018, 0.005)), strict=True):
        w = draw["window_losses"]
        assert all(len(w[k]) == len(draw["starts"][k]) == 4096 for k in groups)
        m, se = diff(w["processed"], w["never processed"])
        assert (round(m, 3), round(se, 3)) == (m_want, se_want)
        assert m < -3 * se and round(m / se, 1) == -3.7  # resolved in each draw on its own
        assert abs(draw["processed_minus_never"]["mean"] - m) < 1e-6
    both = {k: np.concatenate([d["window_losses"][k] for d in draws]) for k in groups}
    m, se = diff(both["processed"], both["never processed"])
    assert (round(m, 3), round(se, 3)) == (-0.017, 0.003) and m < -3 * se
    assert abs(pooled["processed_minus_never"]["mean"] - m) < 1e-6
    works = pooled["by_work"]
    assert (works["n_works"], works["works_lower_when_processed"]) == (38, 28)
    assert (round(works["mean"], 3), round(works["se"], 3)) == (-0.018, 0.005)
    assert works["mean"] < -3 * works["se"]  # with the works as the units too
    # the held-out side: the whole text of section 6.5 (1.698), 0.133 above never processed
    assert res["held_out"]["n_windows"] == 3833 and round(res["held_out"]["mean"], 3) == 1.698
    assert round(res["held_out"]["mean"] - both["never processed"].mean(), 3) == 0.133
    # section 6.7's "for the cpu model the second is most of it": the shift dwarfs memorising
    assert pooled["held_out_minus_never"]["mean"] > 5 * -m


def test_the_stored_windows_are_the_cpu_runs_and_the_models(corpus, cpu_model):
    """The stored starts lie where the committed run processed every character (or none), with
    no two windows of a group sharing a character: the run's 1,630 batches are redrawn here and
    held to data.get_batch's, step by step. 8 stored windows per group are rescored live
    (float32: 1e-4)."""
    train_ids, lm = corpus[3], cpu_model[0]
    res, log = _gap_split(), train.read_log("cpu")
    start, T = log[0], lm.config.block_size
    cfg = train.get_preset("cpu")
    processed = np.zeros(len(train_ids) + 1, dtype=bool)  # marked window by window
    for step in range(log[-1]["step"]):
        seed = _seed_for(start["seed"], 0, step)
        starts = torch.randint(
            len(train_ids) - T, (cfg.batch_size,), generator=torch.Generator().manual_seed(seed)
        )
        x, _ = data.get_batch(train_ids, cfg.batch_size, T, torch.Generator().manual_seed(seed))
        assert torch.equal(x, torch.stack([train_ids[a : a + T] for a in starts.tolist()]))
        for a in starts.tolist():
            processed[a : a + T] = True
    for k, want in (("never processed", False), ("processed", True)):
        starts = np.sort(np.concatenate([d["starts"][k] for d in res["draws"]]))
        assert len(starts) == 8192 and np.all(np.diff(starts) > T)  # no shared character
        assert all((processed[a : a + T + 1] == want).all() for a in starts.tolist())
        some = res["draws"][0]["starts"][k][:8]
        w = torch.stack([train_ids[a : a + T + 1] for a in some])
        with torch.no_grad():
            nll = torch.nn.functional.cross_entropy(
                lm(w[:, :-1])[0].transpose(1, 2), w[:, 1:], reduction="none"
            ).mean(1)
        stored = np.array(res["draws"][0]["window_losses"][k][:8])
        assert np.allclose(nll.double().numpy(), stored, rtol=1e-4)


def test_gap_split_on_a_tiny_input(corpus, cpu_model):
    """tools/gap_split.py's measurement on 6 windows per group and draw, and a short held-out
    text: the draws are disjoint, the windows in their pools, the differences what the stored
    losses give, the works' split adds up; too many windows is refused."""
    import gap_split

    works = {t: w for t, w in data.load_works().items() if t not in data.VAL_WORKS}
    train_ids, val_ids, lm = corpus[3], corpus[4][: 10 * 128 + 1], cpu_model[0]
    log = train.read_log("cpu")
    res = gap_split.split_gap(lm, train_ids, val_ids, log, 6, 2, seed=1, batch_size=4, works=works)
    seen = gap_split.times_processed(len(train_ids), log)
    assert res["held_out"]["n_windows"] == 10
    for k, want in (("never processed", 0), ("processed", 129)):
        starts = [a for d in res["draws"] for a in d["starts"][k]]
        assert len(set(starts)) == 12  # two disjoint draws of 6
        assert all(int((seen[a : a + 129] > 0).sum()) == want for a in starts)
    for d in res["draws"]:
        w = {k: np.array(v) for k, v in d["window_losses"].items()}
        m = w["processed"].mean() - w["never processed"].mean()
        assert abs(d["processed_minus_never"]["mean"] - m) < 1e-6
    assert 1 <= res["pooled"]["by_work"]["n_works"] <= 12
    with pytest.raises(ValueError, match="do not fit"):
        gap_split.split_gap(lm, train_ids, val_ids, log, 10**6, 1, seed=0, batch_size=4)


def test_gap_split_refuses_bad_input_and_a_committed_result(tmp_path, capsys, monkeypatch):
    """Exit 2 with the usage, before any work, for a bad count or a missing --out, and for the
    committed result without --overwrite (left as it was)."""
    from pathlib import Path

    import gap_split

    def no_work(*args, **kwargs):
        raise AssertionError("the tool started working")

    monkeypatch.setattr(gap_split, "split_gap", no_work)
    committed = Path(__file__).resolve().parents[1] / GAP_SPLIT
    before = committed.read_bytes()
    for argv, message in (
        (["--out", str(tmp_path / "a.json"), "--windows", "0"], "positive integer"),
        (["--windows", "8"], "--out"),
        (["--out", str(committed)], "--overwrite"),
    ):
        with pytest.raises(SystemExit) as exc:
            gap_split.main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and "usage:" in err and message in err, argv
    assert committed.read_bytes() == before


# ------------------------------- the summaries the package ships of them (tools/result_summary.py)

RECIPE_SWEEP = "benchmarks/results/cpu_recipe_sweep.json"


def _stored(path: str) -> dict:
    import json
    from pathlib import Path

    return json.loads((Path(__file__).resolve().parents[1] / path).read_text())


def _diff_as_stored(stored: dict, a, b) -> None:
    """``stored`` (mean, se, standard_errors) is mean(a) - mean(b) with the standard error of two
    independent samples' means (the window losses are stored to 6 decimals: 2e-6)."""
    a, b = np.asarray(a), np.asarray(b)
    se = math.hypot(a.std(ddof=1) / math.sqrt(len(a)), b.std(ddof=1) / math.sqrt(len(b)))
    m = a.mean() - b.mean()
    assert abs(stored["mean"] - m) < 2e-6 and abs(stored["se"] - se) < 2e-6
    assert abs(stored["standard_errors"] - m / se) < 0.006


def test_the_shipped_gap_split_summary_is_what_the_full_result_gives():
    """Appendix A.3's cell prints mini_transformer/results/06_gap_split.json, the package's
    summary of benchmarks/results/06_gap_split.json. Every number in it is recomputed here from
    the full result's window losses and starts (each draw's and the pooled group means and
    differences with their standard errors; the 38 training works as the units, each window in
    the work it starts in), not copied from the full result's own figures; the held-out side,
    whose window losses the full result does not keep, from its whole-text mean."""
    full, s = _gap_split(), data.load_result("06_gap_split")
    groups = ("never processed", "processed")
    header = ("command", "commit", "date", "where_it_ran", "checkpoint", "precision", "seed")
    assert s["full_result"] == GAP_SPLIT and all(s["full"][k] == full[k] for k in header)
    assert s["held_out"] == full["held_out"] and s["disjoint_windows"] == full["disjoint_windows"]
    held = full["held_out"]["mean"]
    assert len(s["draws"]) == len(full["draws"]) == 2
    for summary, draw in zip(s["draws"], full["draws"], strict=True):
        w = {k: np.asarray(draw["window_losses"][k]) for k in groups}
        assert (
            summary["n_windows_per_group"]
            == {k: len(w[k]) for k in groups}
            == {k: 4096 for k in groups}
        )
        assert all(abs(summary["means"][k] - w[k].mean()) < 1e-6 for k in groups)
        _diff_as_stored(summary["processed_minus_never"], w["processed"], w["never processed"])
        shift = held - w["never processed"].mean()
        assert abs(summary["held_out_minus_never"]["mean"] - shift) < 2e-6
    both = {k: np.concatenate([d["window_losses"][k] for d in full["draws"]]) for k in groups}
    pooled = s["pooled"]
    assert pooled["n_windows_per_group"] == 8192
    assert all(abs(pooled["means"][k] - both[k].mean()) < 1e-6 for k in groups)
    _diff_as_stored(pooled["processed_minus_never"], both["processed"], both["never processed"])
    shift = held - both["never processed"].mean()
    assert abs(pooled["held_out_minus_never"]["mean"] - shift) < 2e-6
    # the works as the units: the training works' bounds in the training text, independently
    works = data.load_works()
    titles = [t for t in works if t not in data.VAL_WORKS]
    bounds = np.cumsum([0] + [len(works[t]) + len(data.WORK_SEPARATOR) for t in titles])
    starts = {k: np.concatenate([d["starts"][k] for d in full["draws"]]) for k in groups}
    per_work = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        inside = {k: (starts[k] >= lo) & (starts[k] < hi) for k in groups}
        if all(inside[k].any() for k in groups):
            per_work.append(
                both["processed"][inside["processed"]].mean()
                - both["never processed"][inside["never processed"]].mean()
            )
    per_work = np.array(per_work)
    by_work = pooled["by_work"]
    assert by_work["n_works"] == len(per_work) == 38
    assert by_work["works_lower_when_processed"] == int((per_work < 0).sum()) == 28
    assert abs(by_work["mean"] - per_work.mean()) < 2e-6
    assert abs(by_work["se"] - per_work.std(ddof=1) / math.sqrt(len(per_work))) < 2e-6


def test_the_gap_split_tool_writes_the_shipped_summary_and_its_command_asks_for_it():
    """The summary is what tools/gap_split.summarise makes of the full result, field for field,
    and its stored command, parsed by tools/result_summary.py, names the full result and the
    shipped file."""
    import json

    import gap_split
    import result_summary

    full, s = _gap_split(), data.load_result("06_gap_split")
    assert json.loads(json.dumps(gap_split.summarise(full, GAP_SPLIT, s["command"]))) == s
    args = result_summary.parser().parse_args(s["command"].split()[1:])
    assert (args.kind, args.full, args.out) == (
        "gap-split",
        GAP_SPLIT,
        "mini_transformer/results/06_gap_split.json",
    )


def test_the_shipped_recipe_summary_is_what_the_full_sweep_gives(monkeypatch):
    """Section 6.5's recipe dropdown prints mini_transformer/results/06_cpu_recipe_sweep.json, the
    package's summary of benchmarks/results/cpu_recipe_sweep.json: its 15 scored runs, the chosen
    (lowest) one and the other 13 runs with T = 128 are recomputed here from the full sweep, and
    the dropdown's numbers (1.696, 9.48e12, about 7.9e12, 20%, 0.014) pinned on the summary."""
    import re

    import result_summary

    full, s = _stored(RECIPE_SWEEP), data.load_result("06_cpu_recipe_sweep")
    scored = [r for r in full["runs"] if r["held_out_loss"] is not None]
    assert s["full_result"] == RECIPE_SWEEP and s["n_runs"] == len(full["runs"]) == 18
    assert [r["name"] for r in s["runs"]] == [r["name"] for r in scored] and len(scored) == 15
    for row, r in zip(s["runs"], scored, strict=True):
        assert [row[k] for k in ("held_out_loss", "train_flops", "precision")] == [
            r["held_out_loss"],
            r["train_flops"],
            r["precision"],
        ]
        assert all(row[k] == r["train_config"][k] for k in ("steps", "batch_size", "lr", "min_lr"))
        assert all(row[k] == r["model_config"][k] for k in ("n_layers", "d_model", "block_size"))
    best = min(scored, key=lambda r: r["held_out_loss"])
    chosen, others = s["chosen"], s["other_runs_same_T"]
    assert (chosen["name"], chosen["held_out_loss"], chosen["train_flops"]) == (
        best["name"],
        best["held_out_loss"],
        best["train_flops"],
    )
    assert chosen["steps"] == best["train_config"]["steps"] == 1630
    assert chosen["where_it_ran"] == best["where_it_ran"] and chosen["command"] in full["commands"]
    same_t = [
        r
        for r in scored
        if r["model_config"]["block_size"] == best["model_config"]["block_size"] and r is not best
    ]
    flops = [r["train_flops"] for r in same_t]
    lowest = min(same_t, key=lambda r: r["held_out_loss"])
    assert (others["n"], others["block_size"]) == (len(same_t), 128) and len(same_t) == 13
    assert (others["train_flops_min"], others["train_flops_max"]) == (min(flops), max(flops))
    assert others["lowest"] == {"name": lowest["name"], "held_out_loss": lowest["held_out_loss"]}
    for key in ("held_out_loss", "device", "cpu_count", "torch", "note"):
        assert s["full"][key] == full[key], key
    assert s["full"]["n_commands"] == len(full["commands"])
    assert re.fullmatch(r"[0-9a-f]{40}", s["full"]["committed"]["commit"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", s["full"]["committed"]["date"])
    # the tool makes this summary of the full sweep (its git lookup replaced by the stored one)
    monkeypatch.setattr(result_summary, "committed", lambda path: s["full"]["committed"])
    assert result_summary.recipe_summary(full, RECIPE_SWEEP, s["command"]) == s
    # the numbers the dropdown quotes, as its hidden cell prints them
    assert (
        round(chosen["held_out_loss"], 3) == 1.696 and f"{chosen['train_flops']:.2e}" == "9.48e+12"
    )
    assert f"{others['train_flops_max']:.1e}" == "7.9e+12"
    assert f"{chosen['train_flops'] / others['train_flops_max'] - 1:.0%}" == "20%"
    assert f"{others['lowest']['held_out_loss'] - chosen['held_out_loss']:.3f}" == "0.014"


def test_the_summary_tools_refuse_to_overwrite_a_shipped_summary(tmp_path, capsys, monkeypatch):
    """Both ways of writing a summary check its file before any work (exit 2): the converter,
    and gap_split's --summary, which also refuses before the measurement starts."""
    import json
    from pathlib import Path

    import gap_split
    import result_summary

    root = Path(__file__).resolve().parents[1]
    shipped = root / "mini_transformer/results/06_gap_split.json"
    before = shipped.read_bytes()
    with pytest.raises(SystemExit) as exit_info:
        result_summary.main(["gap-split", str(root / GAP_SPLIT), "--out", str(shipped)])
    assert exit_info.value.code == 2 and "committed result" in capsys.readouterr().err

    def no_work(*args, **kwargs):
        raise AssertionError("the measurement started")

    monkeypatch.setattr(gap_split, "split_gap", no_work)
    argv = ["--out", str(tmp_path / "full.json"), "--summary", str(shipped)]
    with pytest.raises(SystemExit) as exit_info:
        gap_split.main(argv)
    assert exit_info.value.code == 2 and "--summary" in capsys.readouterr().err
    assert shipped.read_bytes() == before and not (tmp_path / "full.json").exists()
    # a fresh path works: the converter writes the shipped summary's content again
    out = tmp_path / "summary.json"
    result_summary.main(["gap-split", str(root / GAP_SPLIT), "--out", str(out)])
    written, stored = json.loads(out.read_text()), data.load_result("06_gap_split")
    assert {k: v for k, v in written.items() if k not in ("command", "full_result")} == {
        k: v for k, v in stored.items() if k not in ("command", "full_result")
    }


def test_the_warm_up_control_unclipped_with_15_warm_up_steps_and_seed_20_rerun(corpus):
    """Section 6.4's warm-up control (06_clip_warmup_15 and 06_clip_warmup_15_006,
    ``tools/clip_seeds.py --unclipped-lr R --warmup-steps 15``, R = 0.01 and 0.006): unclipped tiny
    runs whose rate climbs over 15 steps (preset: 5) to the same peak and floor, seeds 20-79, the
    s61 expert's control for 'clipping is a lower early rate in disguise'. Pins the chapter's three
    comparisons (mean, standard error, seeds where the first arm ends higher; 20-seed means):
    warm-up 15 minus warm-up 5 at 0.01 (both unclipped), warm-up 15 unclipped minus clipped at 0.01,
    and the same at 0.006. Then seed 20 of the 0.01 file retrained at today's code (float32 kernels
    of other CPUs: within 2e-3)."""
    runs = {}
    for name in ("06_clip_seeds_20_39", "06_clip_seeds_40_79", "06_clip_low_rate"):
        for k, v in data.load_result(name)["runs"].items():
            runs.setdefault(int(k), {}).update(v)
    for name, arm, lr in (
        ("06_clip_warmup_15", "warm15", "0.01"),
        ("06_clip_warmup_15_006", "warm15_006", "0.006"),
    ):
        res = data.load_result(name)
        assert res["command"].startswith(
            f"tools/clip_seeds.py --unclipped-lr {lr} --warmup-steps 15 --first-seed 20"
        )
        assert "warm-up 15 steps" in res["preset"] and "wall_time_s" in res
        assert sorted(map(int, res["runs"])) == list(range(20, 80))
        assert all(set(r) == {"unclipped_at_lr"} for r in res["runs"].values())
        for k, v in res["runs"].items():
            runs[int(k)][arm] = v["unclipped_at_lr"]

    def diffs(a, b, seeds=range(20, 80)):
        return np.array(
            [runs[s][a]["whole_text_loss"] - runs[s][b]["whole_text_loss"] for s in seeds]
        )

    def summary(d):  # mean, standard error, seeds where a is above b
        return round(d.mean(), 3), round(d.std(ddof=1) / math.sqrt(len(d)), 3), int((d > 0).sum())

    for (a, b), key in (
        (("warm15", "unclipped"), "w15_minus_unclipped"),
        (("warm15", "clipped"), "w15_minus_clipped"),
        (("warm15_006", "clipped_lower_lr"), "w15_006_minus_clipped_006"),
    ):
        pins = {
            "w15_minus_unclipped": ([-0.059, 0.014, 18], [-0.035, -0.092, -0.05]),
            "w15_minus_clipped": ([0.03, 0.015, 38], [0.01, 0.043, 0.039]),
            "w15_006_minus_clipped_006": (
                [0.074, 0.01, 51],
                [0.076, 0.079, 0.065],
            ),
        }[key]
        assert summary(diffs(a, b)) == tuple(pins[0]), key
        blocks = [diffs(a, b, range(s, s + 20)).mean() for s in (20, 40, 60)]
        assert [round(m, 3) for m in blocks] == pins[1], key
    means = [
        np.mean([runs[s][arm]["whole_text_loss"] for s in range(20, 80)])
        for arm in ("warm15", "warm15_006")
    ]
    assert [round(float(m), 3) for m in means] == [3.057, 3.017]
    # seed 20 at 0.01, warm-up 15, unclipped, retrained at HEAD
    torch.set_num_threads(1)
    cfg = train.get_preset(
        "tiny",
        device="cpu",
        progress=False,
        precision="fp32",
        seed=20,
        grad_clip=0.0,
        lr=0.01,
        warmup_steps=15,
    )
    built = []
    with tempfile.TemporaryDirectory() as tmp:
        train.train(cfg, tmp, argv=[], setup_hook=built.append)
    val_ids = corpus[4]
    live = train.estimate_loss(built[0].eval(), val_ids, n_batches=None, batch_size=256, seed=None)
    assert abs(live - runs[20]["warm15"]["whole_text_loss"]) < 2e-3


def test_the_mechanism_arms_early_clip_and_constant_scale():
    """Section 6.4's mechanism control (06_clip_mechanism, ``tools/clip_seeds.py
    --mechanism-arms``, seeds 20-79, the s75 expert's): unclipped tiny runs at the preset's rate
    with clipping only in steps 0-5 (early_clip), or every gradient times 0.2 and never clipped
    (constant_scale). Pins the chapter's three comparisons (mean, standard error, seeds where the
    first arm ends higher) and the command, parsed as the tool's."""
    res = data.load_result("06_clip_mechanism")
    assert res["command"] == (
        "tools/clip_seeds.py --mechanism-arms --first-seed 20 --seeds 60 "
        "--out mini_transformer/results/06_clip_mechanism.json"
    )
    assert "early_clip" in res["preset"] and "constant_scale" in res["preset"]
    assert sorted(map(int, res["runs"])) == list(range(20, 80))
    assert all(set(r) == {"early_clip", "constant_scale"} for r in res["runs"].values())
    runs = {}
    for name in ("06_clip_seeds_20_39", "06_clip_seeds_40_79", "06_clip_mechanism"):
        for k, v in data.load_result(name)["runs"].items():
            runs.setdefault(int(k), {}).update(v)

    def summary(a, b):  # mean, standard error, seeds where a is above b
        d = np.array([runs[s][a]["whole_text_loss"] - runs[s][b]["whole_text_loss"] for s in runs])
        return round(d.mean(), 3), round(d.std(ddof=1) / math.sqrt(len(d)), 3), int((d > 0).sum())

    assert len(runs) == 60
    assert summary("unclipped", "early_clip") == (0.035, 0.014, 42)
    assert summary("early_clip", "clipped") == (0.054, 0.01, 47)
    assert summary("constant_scale", "unclipped") == (-0.002, 0.005, 30)


# ------------------------------------------------ the stored controls of tools/ch6_controls.py

CONTROLS = {
    "full-context": "06_full_context",
    "more-samples": "06_more_samples",
    "sample-seeds": "06_sample_seeds",
    "rope-pairs": "06_rope_pairs",
}


@pytest.mark.parametrize("part", list(CONTROLS))
def test_the_controls_commands_ask_for_the_stored_results_with_their_provenance(part):
    """Each stored control: its command still parses with the tool and asks for this part and
    this file, the run completed, and it stores the provenance the tools store (a clean commit,
    date, wall time, machine, one thread, torch and Python versions)."""
    import shlex

    import ch6_controls as tool

    result = data.load_result(CONTROLS[part])
    argv = shlex.split(result["command"])
    assert argv[:2] == ["python", "tools/ch6_controls.py"] and result["complete"] is True
    args = tool.parser().parse_args(argv[2:])
    assert (args.part, args.out) == (part, f"mini_transformer/results/{CONTROLS[part]}.json")
    assert result["part"] == part and not args.overwrite
    assert len(result["commit"]) == 40 and "+" not in result["commit"] and result["date"]
    where = result["where_it_ran"]
    assert where["device_type"] == "cpu" and where["device"] and where["threads"] == 1
    assert where["torch"] and where["python"] and result["wall_time_s"] > 0


def test_the_controls_tool_refuses_bad_input_and_a_committed_result(tmp_path, capsys):
    """Command-line rules: a bad part, or an --out that exists without --overwrite, exits 2
    with the usage before any work."""
    import ch6_controls as tool

    for argv in (
        ["--part", "nope", "--out", str(tmp_path / "x.json")],
        ["--part", "rope-pairs", "--out", "mini_transformer/results/06_rope_pairs.json"],
    ):
        with pytest.raises(SystemExit) as exit_:
            tool.main(argv)
        assert exit_.value.code == 2 and "usage:" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_the_30_more_samples_as_section_6_5s_dropdown_states_them(corpus):
    """06_more_samples (pins of committed data): the model's 30 samples of 200 characters hold
    75% to 95% real words (87.7% on average); 30 texts of 200 characters drawn from the
    character frequencies, 13% to 35%: the ranges do not overlap. The shares are recounted here
    from the stored texts."""
    import ch6_controls as tool

    tok, train_text, _, train_ids, _ = corpus
    more = data.load_result("06_more_samples")
    known = set(re.findall(r"[A-Za-z]+", train_text))
    shares = [float(np.mean([w in known for w in tool.words_of(t)])) for t in more["texts"]]
    assert shares == more["real_word_share"] and len(shares) == more["n_samples"] == 30
    assert all(len(t) == more["n_new"] == 200 for t in more["texts"])
    assert (round(min(shares), 2), round(max(shares), 2), round(np.mean(shares), 3)) == (
        0.75,
        0.95,
        0.877,
    )
    counts = torch.bincount(train_ids, minlength=tok.vocab_size).double()
    base = []
    for seed in range(30):
        g = torch.Generator().manual_seed(seed)
        drawn = tok.decode(torch.multinomial(counts, 200, replacement=True, generator=g))
        base.append(np.mean([w in known for w in tool.words_of(drawn)]))
    assert (round(min(base), 2), round(max(base), 2)) == (0.13, 0.35)
    assert min(shares) > max(base)  # 30 samples each: the ranges do not overlap


def test_the_30_more_samples_rerun_for_their_first_20_characters(cpu_model):
    """The reproduction check of 06_more_samples: the tool's batched call, 20 new characters
    instead of 200 (each step draws from the same generator, so they are the first 20 of the
    stored samples). Sampling is discrete: a last-bit difference on another CPU could flip a
    rare draw, so 28 of the 30 prefixes must match, not all."""
    import ch6_controls as tool

    lm, stored = cpu_model[0], data.load_result("06_more_samples")
    tok = data.CharTokenizer.from_corpus()
    got = tool.more_samples(lm, tok, n_samples=30, n_new=20, seed=1)
    assert sum(a == b[:20] for a, b in zip(got, stored["texts"], strict=True)) >= 28


def test_the_30_sample_seeds_as_appendix_a1_states_them():
    """06_sample_seeds (pins of committed data): the 30 sampled estimates average 1.700 (SD
    0.021, range 1.666 to 1.737), within 0.01 of the whole text's 1.698 (unbiased); one sample's
    s / sqrt(128), averaged, is 0.018, and the scatter is within 0.7 to 1.4 times it (the SD of
    30 values is itself uncertain by about 13%)."""
    runs = data.load_result("06_sample_seeds")["runs"]
    assert [r["seed"] for r in runs] == list(range(1000, 1030))
    others = np.array([r["mean"] for r in runs])
    predicted = float(np.mean([r["se"] for r in runs]))
    assert (round(others.mean(), 3), round(others.std(ddof=1), 3)) == (1.7, 0.021)
    assert (round(others.min(), 3), round(others.max(), 3), round(predicted, 3)) == (
        1.666,
        1.737,
        0.018,
    )
    assert abs(others.mean() - 1.698) < 0.01
    assert 0.7 < others.std(ddof=1) / predicted < 1.4


def test_sample_seed_1000_reruns_as_stored(corpus, cpu_model):
    """The reproduction check of 06_sample_seeds: seed 1000 through the tool's function, its
    mean and s / sqrt(128) as stored (float32 window losses: 1e-5)."""
    import ch6_controls as tool

    (got,) = tool.sample_seeds(cpu_model[0], corpus[4], [1000])
    stored = data.load_result("06_sample_seeds")["runs"][0]
    assert got["seed"] == stored["seed"] == 1000
    assert abs(got["mean"] - stored["mean"]) < 1e-5 and abs(got["se"] - stored["se"]) < 1e-5


def test_the_rope_pair_ablation_as_appendix_a4_states_it():
    """06_rope_pairs (pins of committed data, the checks appendix A.4's cells made): unrotating
    the 6 fast pairs costs +2.250, zeroing them +1.436 (less, beyond 3 paired standard errors);
    the fast group costs more than the middle one (+0.217) beyond 3 standard errors and over 1.5
    times its pairs' single costs summed (+1.110); the two fastest pairs cost most alone,
    unrotated or zeroed; pair 6 is the third (+0.064 +- 0.003), and the 7 slowest zeroed cost
    +0.046 +- 0.003, each beyond 3 standard errors."""
    r = data.load_result("06_rope_pairs")
    pair_cost = [p["mean"] for p in r["single_pairs"]["unrotated"]]
    pair_zero = [p["mean"] for p in r["single_pairs"]["zeroed"]]
    rows = {(g["group"], g["zeroed"]): g for g in r["groups"]}
    fast, mid = rows["at least one turn", False], rows["45 degrees to one turn", False]
    fast_zeroed, slow_zeroed = rows["at least one turn", True], rows["less than 45 degrees", True]
    assert (round(fast["mean"], 3), round(fast_zeroed["mean"], 3)) == (2.25, 1.436)
    assert (round(mid["mean"], 3), round(sum(pair_cost[:6]), 3)) == (0.217, 1.11)
    gap = np.array(fast["window_changes"]) - np.array(fast_zeroed["window_changes"])
    assert gap.mean() > 3 * gap.std(ddof=1) / math.sqrt(len(gap))  # zeroing costs less
    assert fast["mean"] - mid["mean"] > 3 * math.hypot(fast["se"], mid["se"])
    assert fast["mean"] > 1.5 * sum(pair_cost[:6])  # the group's cost: far above the sum
    assert sorted(np.argsort(pair_cost)[::-1][:2].tolist()) == [0, 1]  # the two fastest
    assert sorted(np.argsort(pair_zero)[::-1][:2].tolist()) == [0, 1]  # zeroed alone too
    pair6 = r["single_pairs"]["unrotated"][6]
    assert int(np.argsort(pair_cost)[::-1][2]) == 6 and pair6["mean"] > 3 * pair6["se"]
    assert (round(pair6["mean"], 3), round(pair6["se"], 3)) == (0.064, 0.003)
    assert slow_zeroed["mean"] > 3 * slow_zeroed["se"]
    assert (round(slow_zeroed["mean"], 3), round(slow_zeroed["se"], 3)) == (0.046, 0.003)


def test_the_fast_rope_pairs_unrotated_rerun_as_stored(corpus, cpu_model):
    """The reproduction check of 06_rope_pairs: one grid point, the 6 fast pairs unrotated,
    through the tool's function on the same 128 windows; every window's change as stored
    (float32: 1e-4 nats), and the mean at the printed precision."""
    import ch6_controls as tool

    lm, val_ids = cpu_model[0], corpus[4]
    spaced = tool.spaced_windows(val_ids, lm.config.block_size)
    base = tool.spaced_losses(lm, spaced)
    fast = tool.pair_groups(lm.config.d_head, lm.config.block_size)["at least one turn"]
    change = tool.ablation_change(lm, spaced, base, ~torch.from_numpy(fast))
    rows = data.load_result("06_rope_pairs")["groups"]
    (row,) = [g for g in rows if g["group"] == "at least one turn" and not g["zeroed"]]
    assert float((change - torch.tensor(row["window_changes"])).abs().max()) < 1e-4
    assert round(float(change.mean()), 3) == round(row["mean"], 3) == 2.25


def test_best_clipped_against_best_unclipped_as_section_6_4_states_it():
    """Section 6.4's headline (the s123 expert's N1): over seeds 20-79, the arm with the lowest
    mean whole-text loss among the clipped arms (peak 6e-3) against the lowest among the five
    unclipped arms (peak 6e-3, 15-step warm-up). Unclipped minus clipped: +0.074 +- 0.010, lower
    when clipped on 51 of 60; 20-seed means +0.076, +0.079, +0.065 (no excess scatter: their
    SD / sqrt(3), 0.004, is below the paired error). Same settings at 6e-3: 20-seed means +0.093,
    +0.088, +0.105."""
    runs = {
        int(k): dict(v)
        for name in ("06_clip_seeds_20_39", "06_clip_seeds_40_79")
        for k, v in data.load_result(name)["runs"].items()
    }
    for name in ("06_clip_low_rate", "06_clip_unclipped_004"):
        for k, v in data.load_result(name)["runs"].items():
            runs[int(k)] |= v
    for name, arm in (
        ("06_clip_warmup_15", "unclipped_warmup15"),
        ("06_clip_warmup_15_006", "unclipped_warmup15_lower_lr"),
    ):
        for k, v in data.load_result(name)["runs"].items():
            runs[int(k)][arm] = v["unclipped_at_lr"]
    seeds = range(20, 80)
    arms = set(runs[20])
    assert len(arms) == 7 and all(set(runs[s]) == arms for s in seeds)
    mean = {a: np.mean([runs[s][a]["whole_text_loss"] for s in seeds]) for a in arms}
    best_c = min((a for a in arms if a.startswith("clipped")), key=mean.get)
    best_u = min((a for a in arms if a.startswith("unclipped")), key=mean.get)
    assert (best_c, best_u) == ("clipped_lower_lr", "unclipped_warmup15_lower_lr")

    def diffs(a, b):
        return np.array(
            [runs[s][a]["whole_text_loss"] - runs[s][b]["whole_text_loss"] for s in seeds]
        )

    d = diffs(best_u, best_c)
    se = d.std(ddof=1) / math.sqrt(len(d))
    assert (round(d.mean(), 3), round(se, 3), int((d > 0).sum())) == (0.074, 0.010, 51)
    blocks = [round(float(d[k : k + 20].mean()), 3) for k in (0, 20, 40)]
    assert blocks == [0.076, 0.079, 0.065]
    assert (
        np.std(blocks, ddof=1) / math.sqrt(3) < se
    )  # the blocks scatter less than the paired error
    same = diffs("unclipped_lower_lr", "clipped_lower_lr")
    assert [round(float(same[k : k + 20].mean()), 3) for k in (0, 20, 40)] == [0.093, 0.088, 0.105]
