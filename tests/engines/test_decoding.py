"""Decoding parts without the model: logit filters, search strategies, ranker, DTW, options."""

from __future__ import annotations

import numpy as np
import pytest

from transcriber.engines.decoding.filters import ApplyTimestampRules, SuppressBlank, SuppressTokens, log_softmax
from transcriber.engines.decoding.options import DecodingOptions
from transcriber.engines.decoding.search import BeamSearchDecoder, GreedyDecoder, MaximumLikelihoodRanker
from transcriber.engines.decoding.task import compression_ratio
from transcriber.model import loader
from transcriber.engines.timing import WordTiming, dtw, median_filter, snap_to_sound, start_at_onsets
from transcriber.model.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tok():
    _, folder = loader._package_folder("tiny.en")
    return load_tokenizer(folder, multilingual=False)


def _logits(tok, favourite: int) -> np.ndarray:
    logits = np.zeros((1, tok.timestamp_begin + 1501), dtype=np.float32)
    logits[0, favourite] = 10.0
    return logits


def test_first_token_is_a_timestamp_not_after_max_initial(tok):
    begin = 3
    rules = ApplyTimestampRules(tok, sample_begin=begin, max_initial_timestamp_index=50)
    logits = _logits(tok, tok.encode(" Hello")[0])
    rules.apply(logits, np.zeros((1, begin), dtype=np.int64))
    allowed = np.flatnonzero(np.isfinite(logits[0]))
    assert allowed.min() == tok.timestamp_begin and allowed.max() == tok.timestamp_begin + 50


def test_timestamps_pair_up_and_never_go_back(tok):
    ts = tok.timestamp_begin
    text = tok.encode(" Hello")[0]
    rules = ApplyTimestampRules(tok, sample_begin=1, max_initial_timestamp_index=None)
    # after "<|0.40|> Hello <|1.00|>" (an open pair): text may not follow; the closing
    # timestamp may repeat 1.00 or go later, but not earlier
    logits = _logits(tok, tok.eot)
    rules.apply(logits, np.array([[tok.sot, ts + 20, text, ts + 50]]))
    allowed = np.flatnonzero(np.isfinite(logits[0]))
    assert tok.eot in allowed and text not in allowed
    assert allowed[allowed >= ts].min() == ts + 50
    # after a closed pair "<|1.00|><|1.00|>": text must come, no timestamp
    logits = _logits(tok, text)
    rules.apply(logits, np.array([[tok.sot, ts + 20, text, ts + 50, ts + 50]]))
    assert np.isfinite(logits[0, text]) and not np.isfinite(logits[0, ts:]).any()
    # after text, the next timestamp must be later than the last one
    logits = _logits(tok, text)
    rules.apply(logits, np.array([[tok.sot, ts + 20, text]]))
    finite_ts = np.flatnonzero(np.isfinite(logits[0, ts:]))
    assert finite_ts.min() == 21
    assert not np.isfinite(logits[0, tok.no_timestamps])


def test_timestamp_forced_when_timestamps_are_likelier_than_any_text(tok):
    ts = tok.timestamp_begin
    rules = ApplyTimestampRules(tok, sample_begin=1, max_initial_timestamp_index=None)
    logits = np.full((1, ts + 1501), -5.0, dtype=np.float32)
    logits[0, ts + 100: ts + 200] = 2.0  # no single timestamp wins, their sum does
    logits[0, tok.encode(" a")[0]] = 3.0
    rules.apply(logits, np.array([[tok.sot, ts + 20, tok.encode(" b")[0]]]))
    assert not np.isfinite(logits[0, :ts]).any()


def test_suppress_blank_and_tokens(tok):
    logits = np.zeros((2, 51864), dtype=np.float32)
    SuppressBlank(tok, sample_begin=2).apply(logits, np.zeros((2, 2), dtype=np.int64))
    assert np.isneginf(logits[:, tok.encode(" ")[0]]).all() and np.isneginf(logits[:, tok.eot]).all()
    SuppressTokens([5, 7]).apply(logits, np.zeros((2, 3), dtype=np.int64))
    assert np.isneginf(logits[:, [5, 7]]).all() and np.isfinite(logits[:, 6]).all()


def test_greedy_takes_argmax_and_stays_at_eot():
    eot = 9
    decoder = GreedyDecoder(0.0, eot)
    sums = np.zeros(2)
    logits = np.log(np.array([[0.1] * 9 + [0.1], [0.0] * 3 + [0.9] + [0.1 / 6] * 6]) + 1e-12)
    logits[0, 4] = 5.0
    tokens, done, sources = decoder.update(np.array([[1], [eot]]), logits.astype(np.float32), sums)
    assert tokens[:, -1].tolist() == [4, eot] and not done and sources is None
    assert sums[1] == 0.0 and sums[0] == pytest.approx(log_softmax(logits)[0, 4], rel=1e-5)


def test_beam_search_finds_the_better_path_greedy_misses():
    # step 1: "a" (0.6) beats "b" (0.4); step 2: after "a" everything is flat, after "b" the
    # end is certain, so "b <eot>" (0.4) beats any "a x <eot>" (0.6 * 0.1 * ...)
    eot, a, b = 3, 1, 2
    vocab = 4

    def step(tokens):
        rows = []
        for row in tokens:
            last = row[-1]
            if last == 0:
                p = [1e-9, 0.6, 0.4, 1e-9]
            elif last == a:
                p = [0.3, 0.3, 0.3, 0.1]
            elif last == b:
                p = [1e-9, 1e-9, 1e-9, 1.0]
            else:
                p = [0.25] * vocab
            rows.append(np.log(np.array(p)))
        return np.array(rows, dtype=np.float32)

    decoder = BeamSearchDecoder(beam_size=2, eot=eot)
    tokens, sums = np.array([[0], [0]]), np.zeros(2)  # the prompt, once per beam
    for _ in range(5):
        tokens, done, sources = decoder.update(tokens, step(tokens), sums)
        assert len(sources) == 2
        if done:
            break
    candidates = decoder.finalize(tokens, sums)
    best = MaximumLikelihoodRanker(None).rank([len(c.tokens) for c in candidates],
                                              [c.sum_logprob for c in candidates])
    assert candidates[best].tokens[:3] == (0, b, eot)
    assert len(candidates[best].token_logprobs) == 2


def test_ranker_length_penalty():
    # a longer sequence with a slightly lower total wins under length normalisation
    assert MaximumLikelihoodRanker(None).rank([2, 10], [-2.0, -3.0]) == 1
    assert MaximumLikelihoodRanker(1.0).rank([2, 10], [-2.0, -6.0]) == 0


def test_dtw_follows_a_monotonic_path():
    cost = np.ones((4, 12))
    for i, j in enumerate([1, 4, 7, 10]):
        cost[i, j] = 0.0
    rows, cols = dtw(cost)
    assert rows[0] == 0 and cols[0] == 0 and rows[-1] == 3 and cols[-1] == 11
    assert (np.diff(rows) >= 0).all() and (np.diff(cols) >= 0).all()
    firsts = {r: cols[np.argmax(rows == r)] for r in range(4)}
    assert firsts[1] <= 4 and firsts[2] <= 7 and firsts[3] <= 10


def _dtw_cell_by_cell(cost):
    """The textbook recurrence, one cell at a time (argmin's order on ties: diagonal, above,
    left), and its way back."""
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            acc[i, j] = cost[i - 1, j - 1] + min(acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1])
    i, j, path = n, m, []
    while i > 0 and j > 0:
        path.append((i - 1, j - 1))
        step = int(np.argmin([acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1]]))
        i, j = (i - 1, j - 1) if step == 0 else (i - 1, j) if step == 1 else (i, j - 1)
    return np.array(path[::-1])


@pytest.mark.parametrize("shape", [(1, 1), (1, 6), (6, 1), (3, 7), (17, 90), (40, 300)])
def test_dtw_is_the_cell_by_cell_recurrence(shape):
    """The diagonal sweep takes the path of the cell-by-cell recurrence, ties included."""
    rng = np.random.default_rng(shape[0] * 1000 + shape[1])
    for cost in (rng.standard_normal(shape), np.round(rng.standard_normal(shape)), np.zeros(shape)):
        rows, cols = dtw(cost)
        np.testing.assert_array_equal(np.stack([rows, cols], axis=1), _dtw_cell_by_cell(cost))


def test_median_filter_matches_numpy_median():
    x = np.random.default_rng(0).normal(size=(3, 5, 40))
    padded = np.pad(x, [(0, 0), (0, 0), (3, 3)], mode="reflect")
    expected = np.median(np.lib.stride_tricks.sliding_window_view(padded, 7, axis=-1), axis=-1)
    np.testing.assert_array_equal(median_filter(x, 7), expected)


def test_compression_ratio_flags_repetition():
    assert compression_ratio("the cat " * 40) > 2.4 > compression_ratio("A gold ring will please most any girl.")


@pytest.mark.parametrize("kwargs, message", [
    ({"task": "summarise"}, "task"),
    ({"beam_size": 0}, "beam_size"),
    ({"temperature": -1}, "temperature"),
    ({"best_of": 3}, "best_of"),
    ({"patience": 2.0}, "patience"),
    ({"length_penalty": 3}, "length_penalty"),
])
def test_decoding_options_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DecodingOptions(**kwargs)


def test_the_loop_step_ends_a_window_by_its_budget_text_context_or_end_of_text():
    from transcriber.engines.decoding.ending import Ending
    from transcriber.engines.decoding.loop import Decode

    eot, vocab = 5, 8
    logits = lambda best: np.where(np.arange(vocab) == best, 5.0, 0.0)[None].astype(np.float32)  # noqa: E731
    decode = Decode([1, 2], GreedyDecoder(0.0, eot), [SuppressTokens([3])], 1, max_new=2, n_ctx=10)
    assert decode.choose(logits(3)) is None  # suppressed: the next best is taken
    assert decode.tokens.tolist() == [[1, 2, 0]]
    assert decode.choose(logits(4)) is None
    ended = decode.choose(logits(4))
    assert ended.reason is Ending.BUDGET and ended.candidates[0].tokens == (1, 2, 0, 4, eot)
    done = Decode([1], GreedyDecoder(0.0, eot), [], 1, max_new=9, n_ctx=10).choose(logits(eot))
    assert done.reason is Ending.EOT and done.candidates[0].tokens[:2] == (1, eot)
    full = Decode([1, 2], GreedyDecoder(0.0, eot), [], 1, max_new=9, n_ctx=3).choose(logits(4))
    assert full.reason is Ending.LENGTH


def _timed(*spans):
    return [WordTiming(text, [], start, end, 0.9) for text, start, end in spans]


def test_words_snap_to_the_sound_around_them():
    """20 ms frames from 10.0 s: sound from 10.2 to 11.0 s, silence after it (the podcast's
    " and" stretched over the pause and " Roman." placed wholly inside it)."""
    loud = np.zeros(100, dtype=bool)
    loud[10:50] = True
    words = _timed((" gothic", 10.1, 10.5), (" and", 10.5, 11.9), (" Roman.", 11.9, 11.9))
    snap_to_sound(words, loud, 10.0, 0.3, floor=9.0)
    assert [(w.word, round(w.start, 2), round(w.end, 2)) for w in words] == [
        (" gothic", 10.2, 10.5), (" and", 10.5, 10.7), (" Roman.", 10.7, 11.0)]


def test_a_word_in_silence_nearer_the_sound_after_it_moves_to_its_onset():
    """A first word that DTW started 1 s early, wholly in the pause before its speech (the
    short podcast's LJ002-0035 once went back into the reading before the pause); silence alone
    changes nothing."""
    loud = np.zeros(100, dtype=bool)
    loud[:5] = loud[60:] = True  # sound until 10.1 s, then from 11.2 s
    words = _timed((" Well,", 10.8, 11.0), (" then", 11.1, 11.5))
    snap_to_sound(words, loud, 10.0, 0.3, floor=0.0)
    assert [(w.word, round(w.start, 2), round(w.end, 2)) for w in words] == [(" Well,", 11.2, 11.2),
                                                                            (" then", 11.2, 11.5)]
    silent = _timed((" a", 1.0, 2.0))
    snap_to_sound(silent, np.zeros(100, dtype=bool), 0.0, 0.3, floor=0.0)
    assert (silent[0].start, silent[0].end) == (1.0, 2.0)


def test_a_word_in_a_pause_goes_with_the_word_it_is_nearer_not_the_nearer_sound():
    """The podcast on the avx2 path (tiny.en, one segment over the music between two readings):
    DTW stretched " and" to 10.5-11.7 s and put " Roman." at 11.7-13.22 s, in the pause before
    the music but for the music's first frame (sound from 13.2 s), nearer the music's onset than
    the speech's end (10.8); the next word, " He", comes after the music. " Roman." goes back to
    the speech it ends, not into the music. And a word that DTW put in a pause nearer the speech
    before it by sound, but nearer the word after it (stretched back over the pause), goes
    forward with that word."""
    loud = np.zeros(200, dtype=bool)
    loud[10:40] = loud[160:] = True  # speech 10.2-10.8 s, the music from 13.2 s
    words = _timed((" gothic", 10.1, 10.5), (" and", 10.5, 11.7), (" Roman.", 11.7, 13.22), (" He", 13.5, 13.9))
    snap_to_sound(words, loud, 10.0, 0.3, floor=9.0)
    assert [(w.word, round(w.start, 2), round(w.end, 2)) for w in words] == [
        (" gothic", 10.2, 10.5), (" and", 10.5, 10.5), (" Roman.", 10.5, 10.8), (" He", 13.5, 13.9)]
    after = _timed((" Roman.", 10.5, 10.8), (" He", 11.6, 12.0), (" was", 12.1, 13.5))
    snap_to_sound(after, loud, 10.0, 0.3, floor=9.0)
    assert [(w.word, round(w.start, 2), round(w.end, 2)) for w in after] == [
        (" Roman.", 10.5, 10.8), (" He", 13.2, 13.2), (" was", 13.2, 13.5)]


def test_time_offsets_are_the_models_own_else_tiny_ens():
    from transcriber.engines.timing import ONSET_LEAD, TIME_OFFSETS, time_offsets

    assert time_offsets("tiny.en") == TIME_OFFSETS["tiny.en"] == time_offsets("my-converted-folder")
    assert time_offsets("tiny.en").onset_lead == ONSET_LEAD
    assert time_offsets("base").onset_lead == 0.0 and time_offsets("base").stream_delay > 0


def test_word_starts_move_to_the_voices_onset():
    """20 ms frames from 10.0 s: room noise at -60 dBFS, the voice (-30) from 10.26 to 10.6 s
    and from 10.8 s. The first word, started where the window does, moves to the onset; a word
    inside the voice starts ``lead`` earlier (the word before it ends there); one whose earlier
    start falls in the pause moves forward to the next onset; a word wholly in the quiet (its
    voice no nearer than its end) keeps its start, as do all words without a voice at all."""
    levels = np.full(100, -60.0)
    levels[13:30] = levels[40:] = -30.0
    times = [(10.0, 10.4), (10.4, 10.7), (10.7, 10.9)]
    assert [(round(a, 2), round(b, 2)) for a, b in start_at_onsets(times, levels, 10.0, 0.02, lead=0.08)] == [
        (10.26, 10.32), (10.32, 10.7), (10.8, 10.9)]
    assert start_at_onsets([(10.0, 10.1)], levels, 10.0, 0.02, lead=0.0) == [(10.0, 10.1)]
    assert start_at_onsets(times, np.full(100, -60.0), 10.0, 0.02, lead=0.0) == times
