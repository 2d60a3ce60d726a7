"""The guard's view of a window's audio (transcriber/engines/decoding/guard.py): which 20 ms frames are
voiced, which runs of them are stretches to read again, and where a window's end cuts one."""

import numpy as np

from transcriber.engines.decoding import guard


def levels(*parts):
    """20 ms frame levels (dBFS) from (seconds, level) parts."""
    return np.concatenate([np.full(round(s / guard.FRAME_S), db, dtype=np.float64) for s, db in parts])


def test_noise_at_the_silence_threshold_is_not_voiced():
    """White noise at -50 dBFS (the silence threshold) varies by under a dB frame to frame: it
    made the whole window one stretch. Over its floor by ABOVE_FLOOR_DB only the line is."""
    rng = np.random.default_rng(0)
    noise = -50 + rng.normal(0, 0.4, 1500)
    noise[1000:1100] = -20  # a 2 s line at 20-22 s
    loud = guard.voiced(noise)
    assert loud[1000:1100].all() and loud.sum() == 100
    assert guard.stretches(loud) == [(1000, 1100)]


def test_words_with_half_second_pauses_are_one_stretch():
    """" one, two, three" said with 0.5 s between its words (0.5-0.7 s each): one stretch of
    2.7 s, not three under MIN_STRETCH_S that the guard would never read again."""
    line = levels((0.5, -20), (0.5, -80), (0.7, -20), (0.5, -80), (0.5, -20))
    assert guard.stretches(guard.voiced(np.concatenate([levels((5, -80)), line, levels((5, -80))]))) == \
        [(250, 250 + 135)]


def test_a_run_the_windows_end_cuts_is_where_the_walk_goes_on():
    window = levels((29.66, -80), (0.34, -20))  # a line's first 0.34 s at the window's end
    assert abs(guard.cut_by_the_end(window) - (29.66 - guard.PAD_S)) < 1e-9
    assert guard.cut_by_the_end(window, after=29.8) is None  # a word of the window reached it
    assert guard.cut_by_the_end(levels((10, -80), (20, -20))) is None  # one voice since its first half
    assert guard.cut_by_the_end(levels((29.0, -20), (1.0, -80))) is None  # nothing at the end
