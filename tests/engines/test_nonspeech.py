"""The rules that keep sound captions and guesses over music out of the transcript."""

from transcriber.engines.nonspeech import is_sound_tag, is_speech_segment, is_speech_word, speech_words
from transcriber.transcript.types import Segment, Word


def word(text, p):
    return Word(0.0, 0.5, text, p)


def test_sound_tags_in_any_dress():
    for text in (" Applause", " APPLAUSE.", "[Music]", " (laughter)", " *Cheering*", "[BLANK_AUDIO]"):
        assert is_sound_tag(text), text
    for text in (" Music is my life.", " Applause for the speaker", " Harrison", ""):
        assert not is_sound_tag(text), text
    # any text wholly in brackets is a caption: Whisper brackets no speech
    for text in (" [♪ Music playing in background ♪]", " (door closes)", " [SOUND]."):
        assert is_sound_tag(text), text
    assert not is_sound_tag(" He said (quietly) no.") and not is_sound_tag(" [Music] Hello")


def test_the_words_of_a_bracketed_caption_are_not_speech_across_passes():
    """base over a celesta, streaming: " [♪ Music playing in background, playing in background,"
    in one pass, " playing", " in", " background," in the next ones (the caption never closed)."""
    from transcriber.engines.nonspeech import caption_open, outside_captions

    pass_one = [" [♪", " Music", " playing", " in", " background,"]
    assert outside_captions(pass_one) == ([False] * 5, True)
    assert caption_open("".join(pass_one)) and not caption_open(" [Music] so")
    assert outside_captions([" playing", " in"], inside=True) == ([False, False], True)
    assert outside_captions([" music]", " Ask", " not"], inside=True) == ([False, True, True], False)
    assert outside_captions([" Ask", " (softly)", " not"]) == ([True, False, True], False)


def test_segments_and_words_that_are_kept():
    speech = Segment(0.0, 1.0, " Ask not", (word(" Ask", 0.9), word(" not", 0.7)))
    guess = Segment(0.0, 1.0, " Harrison", (word(" Harrison", 0.00001),))
    tag = Segment(0.0, 1.0, " Applause", (word(" Applause", 0.51),))
    assert is_speech_segment(speech)
    assert not is_speech_segment(guess) and not is_speech_segment(tag)
    assert not is_speech_segment(Segment(0.0, 1.0, " text without words"))
    assert is_speech_word(word(" country", 0.12))
    assert not is_speech_word(word(" End", 0.038)) and not is_speech_word(word(" APPLAUSE", 0.73))


def test_a_streaming_pass_is_judged_as_a_whole():
    # the Brahms' third pass at a 10 s buffer: each word alone could be speech, together a guess
    music = [word(" of", 0.094), word(" the", 0.398), word(" end.", 0.309)]
    assert speech_words(music) == []
    # speech's least sure passes measured on the dev set: kept; a lone comma is not judged
    assert speech_words([word(" A", 0.357)]) == [word(" A", 0.357)]
    assert speech_words([word(",", 0.286)]) == [word(",", 0.286)]
    mixed = [word(" open", 0.556), word(" my", 0.249), word(" shoulder", 0.509)]
    assert speech_words(mixed) == mixed
    # a tag or a single guess inside a sure pass goes alone
    assert speech_words([word(" Ask", 0.9), word(" APPLAUSE", 0.73), word(" not", 0.7)]) == \
        [word(" Ask", 0.9), word(" not", 0.7)]
    assert speech_words([word(" Ask", 0.9), word(" End", 0.03)]) == [word(" Ask", 0.9)]


def test_repetition_past_what_speech_does():
    from transcriber.engines.nonspeech import GATE

    assert GATE.repeats(" one two three 3 3 3 3", 4)  # a word more than 3 times in a row
    assert GATE.repeats(" I said, for the year, for the year, for the year", 9)  # a 3-gram 3 times
    assert not GATE.repeats(" no, no, no, I said", 4) and not GATE.repeats(" one two three", 3)
    # only a run that the new words extend counts: the loop in the prompt is judged once
    assert not GATE.repeats(" 3 3 3 3 and then she left", 4)


def test_vocables_and_isolated_guesses():
    from transcriber.engines.nonspeech import is_isolated_guess, is_vocables

    for text in (" Oh oh!", " WOO. WOO.", " Mmm", " Wooh! WOH, WOO OOH!", " Hmm."):
        assert is_vocables(text), text
    for text in (" Oh, I see", " No", " Whom"):
        assert not is_vocables(text), text
    assert speech_words([word(" Oh", 0.44), word(" oh", 0.59)]) == []
    assert speech_words([word(" Oh,", 0.9)], after_speech=True) == [word(" Oh,", 0.9)]
    assert is_isolated_guess([word(" Thank", 0.12), word(" you.", 0.84)])
    assert not is_isolated_guess([word(" Thank", 0.9), word(" you.", 0.84)])
    assert speech_words([word(" Thank", 0.12), word(" you.", 0.84)]) == []


def test_silence_gate_threshold():
    import numpy as np

    from transcriber.engines.nonspeech import GATE

    rng = np.random.default_rng(0)
    assert GATE.is_silent(np.zeros(16000)) and GATE.is_silent(rng.standard_normal(16000) * 10 ** (-60 / 20))
    assert not GATE.is_silent(rng.standard_normal(16000) * 10 ** (-40 / 20))  # room noise level
    tail = np.concatenate([np.full(3200, 0.1), np.zeros(16000)])
    assert GATE.last_loud(tail) == 3200 and GATE.last_loud(np.zeros(1000)) is None


def test_the_no_speech_rule_is_one_object_both_modes_build_from_their_options():
    from transcriber.engines.nonspeech import NoSpeechRule
    from transcriber.engines.oneshot import TranscribeOptions
    from transcriber.engines.streaming.options import StreamingOptions

    rule = NoSpeechRule(threshold=0.6, logprob_threshold=-1.0, certain=0.9)
    assert TranscribeOptions().no_speech == rule == StreamingOptions().no_speech
    assert not rule.is_silence(0.5, -5.0)  # speech is likely: the text is kept, however unlikely
    assert rule.is_silence(0.7, -1.5) and not rule.is_silence(0.7, -0.5)  # likely silence: the text decides
    assert rule.is_silence(0.95, -0.1)  # near-certain silence, whatever the text
    assert not rule.is_silence(0.7, None)  # no text to judge yet
    assert rule.undecoded_above == 0.9  # only near-certain silence is not decoded
    alone = NoSpeechRule(threshold=0.6, logprob_threshold=None)
    assert alone.is_silence(0.7, -0.1) and alone.undecoded_above == 0.6
    assert not NoSpeechRule(threshold=None).is_silence(1.0, -9.0)


def test_unlikely_text_after_a_pause_is_a_guess():
    from transcriber.engines.nonspeech import is_unlikely_start

    # one-shot's " Thank you." over plucked music; streaming's first pass over reversed babble
    assert is_unlikely_start(0.735, -0.987) and is_unlikely_start(0.59, -1.13)
    assert is_unlikely_start(0.48, -1.76)  # streaming over 30 s of clicks
    # speech: the Apollo radio's noisiest windows, and a sure text over a high no-speech
    assert not is_unlikely_start(0.5, -0.62) and not is_unlikely_start(0.47, -0.86)
    assert not is_unlikely_start(0.23, -0.93)
    assert not is_unlikely_start(0.87, -0.27)
    assert not is_unlikely_start(None, -2.0) and not is_unlikely_start(0.9, None)


def test_a_doubted_pass_is_read_again_and_a_guess_that_disagrees_is_refused():
    from transcriber.engines.nonspeech import is_guessed_again, needs_rereading

    assert needs_rereading(0.29, -1.17)  # the stream's first pass over babble (20 s, seed 2)
    assert needs_rereading(0.45, -1.37)  # a guess by the corners too (the radio's, kept when read again)
    # speech: the Apollo radio's other passes after pauses, a sure pass, nothing to judge
    assert not needs_rereading(0.36, -0.96) and not needs_rereading(0.11, -1.94)
    assert not needs_rereading(0.25, -2.0) and not needs_rereading(None, -2.0)
    said = " I'm not there for all of you"
    # one-shot over the same babble: another text, drawn at temperature 0.4
    assert is_guessed_again(said, " So I'm never going to be able to hear what's going on.", 0.38, -0.99, 0.4)
    assert not is_guessed_again(said, " So I'm never going to be able to hear what's going on.", 0.38, -0.99, 0.0)
    assert not is_guessed_again(said, " I'm not there for all of you guys.", 0.38, -0.99, 0.4)  # read again
    assert is_guessed_again(" Hans Jak", " Hello there.", 0.55, -1.2, 0.0)  # a guess by its scores


def test_the_streams_first_words_are_read_again_when_far_less_likely():
    from transcriber.engines.nonspeech import needs_rereading

    # base's first pass over babble (30 s, seed 1), with nothing committed before it
    assert needs_rereading(0.10, -1.87, first=True) and not needs_rereading(0.10, -1.87)
    # the Apollo radio: its first pass, and " guys and" after a pause (committed words before it)
    assert not needs_rereading(0.36, -0.96, first=True) and not needs_rereading(0.11, -1.94)
    assert not needs_rereading(None, -2.0, first=True)


def test_a_short_text_just_after_a_sound_caption_must_be_sure():
    # base over the end of the Brahms: " Applause" (refused), then " Thank you." 0.06 s after it
    thanks = [word(" Thank", 0.152), word(" you.", 0.938)]
    assert speech_words(thanks) == thanks  # over the isolated-guess floor by 0.002
    assert speech_words(thanks, after_caption=True) == []
    sure = [word(" In", 0.66), word(" 1813.", 0.9)]
    assert speech_words(sure, after_caption=True) == sure
    longer = [word(" Thank", 0.152), word(" you", 0.9), word(" all", 0.8), word(" for", 0.9), word(" coming.", 0.9)]
    assert speech_words(longer, after_caption=True) == longer  # not a caption's size


def test_a_last_pass_read_otherwise_from_the_same_audio_is_a_guess():
    from transcriber.engines.nonspeech import is_guessed_again

    said, reread = " Yes, I'm going to stop.", " If so, thank you. Yes, thank you. Wow. Thank you. Thank you."
    # base over babble (15 s, seed 0): greedy both times, from the very same padded window
    assert is_guessed_again(said, reread, 0.30, -0.73, 0.0, same_audio=True)
    assert not is_guessed_again(said, reread, 0.30, -0.73, 0.0)  # from other audio: kept
    assert not is_guessed_again(" in 1813.", " In 1813,", 0.01, -0.51, 0.0, same_audio=True)  # read again


def test_a_loop_heard_in_a_sound_is_far_past_what_repeated_speech_compresses_to():
    from transcriber.engines.nonspeech import HEARD_LOOP_RATIO, is_heard_loop

    # tiny.en over applause-like bursts and an engine: one sentence 13 and 6 times; base over a Chinese
    # phrase said 7 times with pauses (3.9): speech, kept
    assert is_heard_loop(10.74) and is_heard_loop(5.63) and not is_heard_loop(3.89)
    assert HEARD_LOOP_RATIO > 2.4  # one-shot's compression threshold only starts the fallback


def test_a_reading_has_words_when_it_holds_letters_or_digits():
    from transcriber.engines.nonspeech import has_words

    for text in (" 1, 2, 3.", " Oh.", "扎自己", " it's"):
        assert has_words(text), text
    for text in (" ...", "", " - ", " ===", " ♪"):
        assert not has_words(text), text


def test_a_second_reading_that_begins_with_the_first_is_heard_words():
    from transcriber.engines.nonspeech import reads_again

    # base translating German: the stream's first pass, then its buffer as a one-shot window
    assert reads_again(" Hans Jak", " Hans Jakob Christi")
    assert reads_again("扎自己", "扎自己的脚。")
    assert not reads_again(" I'm not going to stop there.", " I don't know.")
    assert not reads_again("", " anything") and not reads_again(" ...", " The...")
