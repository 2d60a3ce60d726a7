"""The AlignAtt policy and the streaming buffer's pieces on synthetic data: no model."""

import numpy as np
import pytest

from transcriber.engines.decoding.ending import Ending
from transcriber.engines.streaming.options import StreamingOptions
from transcriber.engines.streaming.policy import (
    LAST_CHUNK_THRESHOLD, AttentionTracker, decide, most_attended_frame, token_scores)
from transcriber.engines.streaming.words import (MAX_TAIL, RUN_ON_TOKENS, SHIFT, CommittedWord, cut_frame,
                                                 punctuated_context, word_frames)


TOL = 6  # a standardised peak saturates over the frames where the newest token dominates


def near(frame, expected):
    return abs(frame - expected) <= TOL


def diagonal_attention(frames, n_frames=100, heads=3, width=2.0, sink=0.0, rng=None):
    """(heads, len(frames), n_frames) softmax-like rows peaking at ``frames``, with an optional
    'sink' every row also attends to (frame 0), as Whisper's heads do."""
    x = np.arange(n_frames)
    rows = np.exp(-0.5 * ((x[None, :] - np.asarray(frames)[:, None]) / width) ** 2)
    rows[:, 0] += sink
    if rng is not None:
        rows = rows + 0.05 * rng.random(rows.shape)
    rows = rows / rows.sum(axis=-1, keepdims=True)
    return np.repeat(rows[None], heads, axis=0)


def test_most_attended_frame_follows_the_newest_row():
    att = diagonal_attention([5, 20, 40, 61])
    assert near(most_attended_frame(att), 61)
    assert near(most_attended_frame(att[:, :3]), 40)


def test_normalising_across_tokens_removes_a_shared_sink():
    # every row puts most weight on frame 0; the newest token's own peak must still win
    att = diagonal_attention([10, 30, 50, 70], sink=5.0)
    assert att[0, -1].argmax() == 0  # raw argmax is the sink
    assert near(most_attended_frame(att), 70)


def test_median_filter_ignores_a_one_frame_spike():
    att = diagonal_attention([10, 30, 50], width=3.0)
    att[:, -1, 90] += 0.5  # a single-frame spike in every head
    att = att / att.sum(axis=-1, keepdims=True)
    assert near(most_attended_frame(att), 50)


def test_mean_over_heads_outvotes_one_stray_head():
    att = diagonal_attention([10, 30, 50], heads=5)
    att[0, -1] = diagonal_attention([10, 30, 90], heads=1)[0, -1]
    assert near(most_attended_frame(att), 50)


def test_restricting_to_real_frames_renormalises():
    att = diagonal_attention([10, 30, 95], n_frames=100)
    assert near(most_attended_frame(att), 95)
    assert most_attended_frame(att, n_positions=60) < 60
    assert token_scores(att, n_positions=60).shape == (60,)


def test_a_single_row_scores_zero():
    assert np.all(token_scores(diagonal_attention([7])) == 0)


def test_tracker_matches_the_full_computation():
    rng = np.random.default_rng(0)
    frames = [3, 9, 15, 22, 30, 41, 47, 58]
    att = diagonal_attention(frames, rng=rng)  # (H, T, S)
    tracker = AttentionTracker(att[None, :, :2])
    for t in range(2, len(frames)):
        tracker.push(att[None, :, t])
        assert tracker.frame(0) == most_attended_frame(att[:, : t + 1])


def test_tracker_select_reorders_beams():
    a = diagonal_attention([5, 10, 15])
    b = diagonal_attention([5, 10, 80])
    tracker = AttentionTracker(np.stack([a, b]))
    assert near(tracker.frame(0), 15) and near(tracker.frame(1), 80)
    tracker.select(np.array([1, 1]))
    assert near(tracker.frame(0), 80)


@pytest.mark.parametrize("frame,expected", [(60, Ending.CONTINUE), (74, Ending.CONTINUE),
                                            (75, Ending.STOP), (99, Ending.STOP)])
def test_threshold(frame, expected):
    # 100 frames of audio, threshold 25: a token looking at frame >= 75 may be cut off
    assert decide(frame, 100, 50, frame_threshold=25, rewind_threshold=200) is expected


def test_last_chunk_uses_the_small_threshold():
    assert decide(90, 100, 50, frame_threshold=25, rewind_threshold=200) is Ending.STOP
    assert decide(90, 100, 50, frame_threshold=25, rewind_threshold=200, is_last=True) is Ending.CONTINUE
    edge = 100 - LAST_CHUNK_THRESHOLD
    assert decide(edge, 100, 50, frame_threshold=25, rewind_threshold=200, is_last=True) is Ending.STOP


def test_rewind_on_a_jump_back():
    kw = dict(frame_threshold=25, rewind_threshold=30)
    assert decide(60, 200, 100, **kw) is Ending.REWIND  # 40 frames back
    assert decide(75, 200, 100, **kw) is Ending.CONTINUE  # 25 back: within tolerance
    assert decide(60, 200, None, **kw) is Ending.CONTINUE  # nothing kept yet
    assert decide(60, 200, 100, after_special=True, **kw) is Ending.CONTINUE
    assert decide(60, 200, 100, is_last=True, **kw) is Ending.CONTINUE


def test_a_mark_after_a_kept_word_is_not_judged():
    """A mark has no sound: kept after a word wherever it attends (the end of the audio, or
    back where the word was), and the token after it is judged as any other."""
    kw = dict(frame_threshold=25, rewind_threshold=30)
    assert decide(95, 100, 70, **kw) is Ending.STOP
    assert decide(95, 100, 70, mark=True, **kw) is Ending.CONTINUE  # at the end of the audio
    assert decide(10, 100, 70, mark=True, **kw) is Ending.CONTINUE  # far back: no rewind
    assert decide(95, 100, None, mark=True, after_special=True, **kw) is Ending.STOP  # no word before it


def test_synthetic_pass_stops_before_the_token_at_the_end():
    """Replay a whole decoding pass the way the session does: tokens attending ever later."""
    token_frames = [4, 12, 20, 31, 44, 52, 63, 71, 80, 92]
    n_frames = 100
    att = diagonal_attention([0] + token_frames, n_frames=n_frames)
    tracker = AttentionTracker(att[None, :, :2])  # prompt rows: sot, then the first token's row
    kept, last = [], None
    for t, expected in enumerate(token_frames):
        frame = tracker.frame(0)
        assert near(frame, expected)
        d = decide(frame, n_frames, last, frame_threshold=25, rewind_threshold=200)
        if d is not Ending.CONTINUE:
            break
        kept.append(frame)
        last = frame
        if t + 2 < att.shape[1]:
            tracker.push(att[None, :, t + 2])
    assert len(kept) == 8  # the tokens at 80 and 92 lie within 25 frames of the end
    assert kept == sorted(kept)


def test_word_frames():
    # frames are shifted back to onsets; a word ends where the next token starts ...
    assert word_frames([30, 32], 40, 100) == (30 + SHIFT, 40 + SHIFT)
    # ... but not long after its own last token (a pause follows)
    assert word_frames([30, 32], 90, 100) == (30 + SHIFT, 32 + SHIFT + MAX_TAIL)
    start, end = word_frames([30], None, 100)
    assert end > start
    assert word_frames([2], 3, 100)[0] == 0  # inside the buffer
    assert word_frames([120], None, 100) == (99, 100)


def test_cut_frame_keeps_the_buffer_under_its_limit():
    words = [CommittedWord([1], 100, 140, " One."), CommittedWord([2], 300, 340, " Two"),
             CommittedWord([3], 600, 640, " three.")]
    # 3000 frames max, buffer 0..3050: cut before the first word that lets it fit
    assert cut_frame(words, 0, 3050, 3000, None) == (90, 0)
    assert cut_frame(words, 60, 3100, 3000, None) == (290, 1)
    assert cut_frame(words, 0, 2000, 3000, None) == (None, 0)
    # past the trim length: cut before the word after the last sentence end
    assert cut_frame(words, 0, 2000, 3000, 1500) == (290, 1)
    # no sentence end: as late as keeps half the trim length
    assert cut_frame(words[1:], 0, 2000, 3000, 1500) == (590, 1)
    assert cut_frame(words[1:], 0, 1000, 3000, 900) == (290, 0)
    # nothing committed late enough: cut at the limit, every committed word leaves
    assert cut_frame(words, 0, 3700, 3000, None) == (700, 3)
    # a keep length instead of half the trim length: the cut may fall later
    assert cut_frame(words[1:], 0, 1000, 3000, 900, keep_frames=300) == (590, 1)
    assert cut_frame(words[1:], 0, 1000, 3000, 900, keep_frames=700) == (290, 0)


def test_a_run_on_prompt_is_cut_back_to_its_last_sentence_end():
    from transcriber.model import loader
    from transcriber.model.tokenizer import load_tokenizer

    tok = load_tokenizer(loader._package_folder("tiny.en")[1], multilingual=False)
    done = tok.encode(" It was modern. For although the Chinese took impressions")
    run_on = tok.encode(" from wood blocks engraved in relief for centuries before the wood cutters of the")
    assert len(run_on) >= RUN_ON_TOKENS
    assert tok.decode(punctuated_context(tok, done + run_on)) == " It was modern."
    # a prompt that stays punctuated, or is short, or never had a sentence end, is kept whole
    commas = tok.encode(" from wood blocks, engraved in relief, for centuries before")
    for kept in (done + commas, run_on[:RUN_ON_TOKENS - 1], run_on, []):
        assert punctuated_context(tok, kept) == kept
    # marks of other scripts, whose characters take several tokens
    zh = tok.encode("他来了。我们在这里等了很久很久很久很久很久很久很久很久")
    assert tok.decode(punctuated_context(tok, zh)) == "他来了。"


def test_options_are_checked():
    with pytest.raises(ValueError, match="chunk_seconds"):
        StreamingOptions(chunk_seconds=0)
    with pytest.raises(ValueError, match="audio_max_len"):
        StreamingOptions(audio_max_len=40)
    with pytest.raises(ValueError, match="beam_size"):
        StreamingOptions(beam_size=0)
    with pytest.raises(ValueError, match="task"):
        StreamingOptions(task="summarise")
    with pytest.raises(ValueError, match="audio_keep_len"):
        StreamingOptions(audio_trim_len=4.0, audio_keep_len=5.0)  # keeps more than it trims to
    assert StreamingOptions(audio_trim_len=10.0, audio_keep_len=5.0).audio_keep_len == 5.0
    with pytest.raises(ValueError, match="audio_trim_len must be None, 'auto' or > 0"):
        StreamingOptions(audio_trim_len="short")
    # "auto" (the default): the window measured best for English transcribed, and for the rest
    assert StreamingOptions().window(english=True) == (8.0, 5.0)
    assert StreamingOptions().window(english=False) == (15.0, None)
    assert StreamingOptions(audio_keep_len=6.0).window(english=False) == (15.0, 6.0)
    assert StreamingOptions(audio_trim_len=12.0).window(english=True) == (12.0, None)
    assert StreamingOptions.from_dict(StreamingOptions().to_dict()).audio_trim_len == "auto"
    assert StreamingOptions.from_dict(StreamingOptions(beam_size=3).to_dict()).beam_size == 3
    with pytest.raises(ValueError, match="no_speech_certain"):
        StreamingOptions(no_speech_certain=1.5)
    # openai/whisper's no-speech rule: decode unless near-certain silence, then judge the text;
    # without a log-probability threshold the no-speech probability alone decides
    assert StreamingOptions().no_speech.undecoded_above == 0.9
    assert StreamingOptions(logprob_threshold=None).no_speech.undecoded_above == 0.6
