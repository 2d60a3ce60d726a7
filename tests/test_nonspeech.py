"""The rules that keep sound captions and guesses over music out of the transcript."""

from transcriber.nonspeech import is_sound_tag, is_speech_segment, is_speech_word, speech_words
from transcriber.types import Segment, Word


def word(text, p):
    return Word(0.0, 0.5, text, p)


def test_sound_tags_in_any_dress():
    for text in (" Applause", " APPLAUSE.", "[Music]", " (laughter)", " *Cheering*", "[BLANK_AUDIO]"):
        assert is_sound_tag(text), text
    for text in (" Music is my life.", " Applause for the speaker", " Harrison", ""):
        assert not is_sound_tag(text), text


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
