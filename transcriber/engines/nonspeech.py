"""What Whisper writes over music and noise, and how it is told apart from speech.

Trained on captions, Whisper names sounds ("Applause", "Music") and, over music, invents words
it is barely sure of. So a segment (one-shot) or word (streaming) is dropped when it is only a
sound tag, or when the model is far less sure of it than of any speech measured; a streaming
pass's words are judged together as a one-shot segment is (their mean, punctuation aside). Text
after a pause is a guess when the model both thought the audio likely held no speech and is
unsure of the text (``GUESS_CORNERS``); a streaming pass those scores doubt is read again as
one-shot would read it. Room noise never gets this far: the no-speech probability skips it first.

A reading the model is unsure of is also judged by which way its audio runs: speech played
backwards (one voice: its pitch, formants and rhythm, no words) reads as speech to the model by
every score it gives, but it swells slowly and stops short, where speech starts sharply and
fades (``runs_backwards``, ``BACKWARDS_BELOW``).

``GATE`` (a ``NonSpeechGate``) is the one object both modes ask, before and after decoding:

- silence: audio none of whose 20 ms frames reaches ``silence_db`` (RMS, dBFS) is not decoded at
  all: 20 dB under the quietest speech measured, so only digital silence and near-silence count
  (room noise is left to the no-speech probability).
- repetition: text that repeats a word or an n-gram past what speech does (``repeats``) is a
  loop, as one-shot's compression-ratio check finds per window. Streaming judges each pass with
  the words committed before it, so a loop spread over many passes (a word or two a pass) is
  caught too.

Every bound here was set on measurements; docs/decoding.md, "The non-speech rules:
measurements", holds each one's figures, recordings and bench.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from transcriber.transcript.types import Segment, Word

# Caption words for sounds, as Whisper writes them bare once their brackets are suppressed.
SOUND_TAGS = frozenset({"applause", "music", "laughter", "laughing", "laughs", "cheering", "cheers",
                        "silence", "noise", "inaudible", "blank_audio", "no speech"})
# A one-shot segment whose words' mean probability is under this is a guess, and so is a streaming
# pass whose words' mean (punctuation aside) is: speech's was never measured below 0.36.
# Measured: docs/decoding.md#the-non-speech-rules-measurements (python -m bench.peers dev-set; recall).
MIN_SEGMENT_PROBABILITY = 0.3
MIN_WORD_PROBABILITY = 0.08  # streaming: a word under this is a guess (speech's: over 0.1; measured: as above)
# A short text after a pause (ISOLATION seconds without speech) holding a word the model is
# barely sure of is Whisper's stock caption (" Thank you." at the end of music), not speech.
# Measured: docs/decoding.md#the-non-speech-rules-measurements (python -m bench.peers recall).
ISOLATED_MAX_WORDS = 3
ISOLATED_MIN_PROBABILITY = 0.15
ISOLATION = 2.0
# After a sound caption (" Applause": refused) Whisper goes on as the captioned videos it learned
# from do (" Thank you."), so within ISOLATION seconds of a caption, no speech between, a short
# text needs every word as sure as a pass of speech as a whole (MIN_SEGMENT_PROBABILITY).
# Measured: docs/decoding.md#the-non-speech-rules-measurements
# (python -m bench.peers recall; podcast --model base).
# Text after a pause (or at the start) is a guess when its (no-speech probability, mean token log
# probability) is beyond a corner: openai/whisper's rule (0.6, -1.0) made stricter where no speech
# leads in. One-shot drops it; a streaming pass's scores do not tell speech from sounds, so such a
# pass is read again as one-shot (``OneShotReading.refuses_doubted``, streaming/rereading.py).
# Measured: docs/decoding.md#the-non-speech-rules-measurements
# (python -m bench.peers nonspeech-set; dev-set; podcast).
GUESS_CORNERS = ((0.5, -0.5), (0.4, -1.0))
# A streaming pass beyond this corner is read again too, though not a guess by GUESS_CORNERS: a
# stream can begin so over babble, while speech's passes after pauses stay outside it (but for the
# noisiest pass of a radio recording, which the re-reading keeps).
# Measured: docs/decoding.md#the-non-speech-rules-measurements
# (python -m bench.peers nonspeech-set --seconds 20 --seed 2).
RECHECK_CORNER = (0.25, -1.0)
# The stream's first words (nothing committed before them: no context made them likely) are read
# again whatever their no-speech probability once their tokens average under -1.5 (0.22 a token):
# speech's first passes score -1.30 at the least, and reading more of them again costs speech.
# Measured: docs/decoding.md#the-non-speech-rules-measurements
# (python -m bench.peers nonspeech-set --model base --seconds 30 --seed 1).
FIRST_WORDS_CORNER = (0.0, -1.5)
# A one-shot window whose no-speech probability is over the threshold ends the temperature fallback
# at once, looping or not; its text compressing past this, twice one-shot's 2.4 (which only starts
# the fallback), is a loop the model heard in a sound: speech said again and again compresses less.
# Measured: docs/decoding.md#the-non-speech-rules-measurements
# (python -m bench.peers nonspeech-set --seconds 30 --seed 1).
HEARD_LOOP_RATIO = 4.8
# Speech starts sharply (a plosive, a vowel's attack) and fades slowly (a room's echo after it), so
# a mel band's steepest rises are steeper than its steepest falls; played backwards it swells and
# stops short. A reading the model is unsure of (``is_doubtful``), over enough audio to tell
# (MIN_JUDGED_FRAMES), whose ``time_asymmetry`` is under this runs backwards.
# Measured: docs/decoding.md#the-non-speech-rules-measurements (python -m bench.streaming time-asymmetry).
BACKWARDS_BELOW = -0.02
DOUBTFUL_LOGPROB = -0.4  # unsure: a voice played backwards reads under it (measured: as above)
DOUBTFUL_NO_SPEECH = 0.6  # or no speech likely (openai/whisper's threshold), whatever the text scores
MIN_JUDGED_FRAMES = 250  # 10 ms mel frames: 2.5 s
_CHANGE_FRAMES = 2  # a level's change is measured over 20 ms (an onset takes 10-30 ms)
_JUDGED_RANGE = 1.0  # normalised log-mel units (4 decades: 40 dB): cells this far below the loudest are left out
_TAIL = 0.01  # the steepest 1 % of rises and of falls

_NOT_LETTERS = re.compile(r"[^\w ]+")
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
# Sounds Whisper spells out over calls, hums and song: "Oh oh", "WOO. WOO.", "Mmm". Text made only
# of them is a sound, not speech. The cost: a line that is only "Oh." or "Hmm." is not subtitled
# (inside speech, streaming keeps them: see speech_words).
# Measured: docs/decoding.md#the-non-speech-rules-measurements.
_VOCABLE = re.compile(r"(o+h*|w+h?o+[ah]*|a+h+|u+h+|u+m+|h*m+|h+m+|l+a+|n+a+|d+a+|h+a+|o+o+[hw]*)")


def is_sound_tag(text: str) -> bool:
    """" Applause.", "[MUSIC]", "(laughter)", "[Music playing in background]": a caption of a
    sound, not speech (a known tag, or any text wholly in brackets: Whisper brackets no speech)."""
    return (" ".join(_NOT_LETTERS.sub(" ", text).lower().split()) in SOUND_TAGS
            or bool(_BRACKETED.fullmatch(text.strip())))


# Text in brackets is a caption, and a caption that never closes is one to the end of the text:
# Whisper brackets no speech. Measured: docs/decoding.md#the-non-speech-rules-measurements
# (python -m bench.peers recall).
_BRACKETED = re.compile(r"[\[(].*[\])][.!?,]*", re.DOTALL)
_OPEN, _CLOSE = "[(", "])"


def caption_open(text: str) -> bool:
    """``text`` ends inside a bracketed caption (an opened "[" or "(" not closed)."""
    return outside_captions([text])[1]


def outside_captions(texts: Sequence[str], inside: bool = False) -> tuple[list[bool], bool]:
    """Whether each of ``texts`` (words, in order) lies outside bracketed captions (a word
    holding a bracket is inside), ``inside``: a caption opened before the first; and whether
    one is still open after the last."""
    out = []
    for text in texts:
        marks = [c for c in text if c in _OPEN or c in _CLOSE]
        out.append(not inside and not marks)
        for c in marks:
            inside = c in _OPEN
    return out, inside


def is_vocables(text: str) -> bool:
    """" Oh oh!", " WOO. WOO.", " Mmm": only sounds spelled out (``_VOCABLE``), no word."""
    words = _NOT_LETTERS.sub(" ", text).lower().split()
    return bool(words) and all(_VOCABLE.fullmatch(w) for w in words)


def has_words(text: str) -> bool:
    """``text`` holds a word (letters or digits), not only marks (" ...", " -") or nothing."""
    return bool(_WORD.search(text))


def is_isolated_guess(words: Sequence[Word], after_caption: bool = False) -> bool:
    """Words that, after a pause, are a caption rather than speech (``ISOLATED_*``); right
    after a sound caption, unless every word is as sure as a pass of speech is (``ISOLATION``)."""
    floor = MIN_SEGMENT_PROBABILITY if after_caption else ISOLATED_MIN_PROBABILITY
    return 0 < len(words) <= ISOLATED_MAX_WORDS and min(w.probability for w in words) < floor


def is_unlikely_start(no_speech_prob: Optional[float], avg_logprob: Optional[float]) -> bool:
    """Text after a pause that is a guess: its no-speech probability and mean token log
    probability beyond one of ``GUESS_CORNERS`` (False when either is not known)."""
    return _beyond(GUESS_CORNERS, no_speech_prob, avg_logprob)


def needs_rereading(no_speech_prob: Optional[float], avg_logprob: Optional[float], first: bool = False) -> bool:
    """A streaming pass after a pause whose scores doubt it enough to read its audio again as
    one-shot: ``is_unlikely_start``, or beyond ``RECHECK_CORNER``; the stream's ``first`` words
    (nothing committed before them) beyond ``FIRST_WORDS_CORNER`` too."""
    corners = (*GUESS_CORNERS, RECHECK_CORNER) + ((FIRST_WORDS_CORNER,) if first else ())
    return _beyond(corners, no_speech_prob, avg_logprob)


# A voiced stretch that got no word, read again alone (the guard: decoding/guard.py), has no
# context to make its text likely, as the stream's first words: beyond this corner its reading is
# a guess (a stock " Thank you." over music); short lines of speech read alone score well inside it.
# Measured: docs/decoding.md#the-non-speech-rules-measurements
# (python -m bench.peers recall --json run.json; reread-corner run.json).
REREAD_CORNER = (0.2, -0.6)


def is_reread_guess(no_speech_prob: Optional[float], avg_logprob: Optional[float], temperature: float) -> bool:
    """A stretch read again alone (the guard) whose reading is a guess: sampled (temperature
    over 0), a guess by ``is_unlikely_start``, or beyond ``REREAD_CORNER``."""
    return temperature > 0 or _beyond((*GUESS_CORNERS, REREAD_CORNER), no_speech_prob, avg_logprob)


def _beyond(corners, no_speech_prob: Optional[float], avg_logprob: Optional[float]) -> bool:
    """The scores are past one of ``corners`` (no-speech over, log probability under); False
    when either is not known."""
    return (no_speech_prob is not None and avg_logprob is not None
            and any(no_speech_prob > ns and avg_logprob < lp for ns, lp in corners))


def is_guessed_again(said: str, reread: str, no_speech_prob: float, avg_logprob: float, temperature: float,
                     same_audio: bool = False) -> bool:
    """A second decoding of a doubted pass's audio (one-shot's, ``reread``) that is a guess
    and does not begin with what the pass said (``reads_again``): by its own scores
    (``is_unlikely_start``), because its greedy text failed and the fallback sampled one
    (temperature over 0), or because the pass decoded the very same input (``same_audio``: the
    stream's last pass, padded to 30 s as one-shot pads) and greedy decoding read it otherwise.
    Two readings of the same audio that disagree, one of them drawn at random, are a guess at a
    sound (an example: docs/decoding.md#the-non-speech-rules-measurements, RECHECK_CORNER)."""
    return ((is_unlikely_start(no_speech_prob, avg_logprob) or temperature > 0 or same_audio)
            and not reads_again(said, reread))


def is_heard_loop(compression_ratio: float) -> bool:
    """A window's text, decoded where the model thought there was likely no speech, repeats
    far past what speech does (``HEARD_LOOP_RATIO``)."""
    return compression_ratio > HEARD_LOOP_RATIO


def reads_again(said: str, reread: str) -> bool:
    """A second decoding of the same audio (``reread``) begins with what the first wrote
    (``said``), letters and digits only, case aside: the model heard words, not a sound it
    guesses at anew each time."""
    first, second = _letters(said), _letters(reread)
    return bool(first) and second.startswith(first)


def _letters(text: str) -> str:
    return re.sub(r"[\W_]+", "", text).lower()


def time_asymmetry(mel: np.ndarray) -> Optional[float]:
    """How much steeper the steepest rises of the bands' levels are than their steepest falls:
    (q99 + q01) / (q99 - q01) of every mel band's change over ``_CHANGE_FRAMES``, where one of
    the two frames is within ``_JUDGED_RANGE`` of the loudest cell; -1 to 1, positive for speech
    played forwards. mel: (F, n_mels) Whisper's normalised log-mel. None without change to measure."""
    mel = np.asarray(mel, dtype=np.float64)
    change = mel[_CHANGE_FRAMES:] - mel[:-_CHANGE_FRAMES]
    judged = change[np.maximum(mel[_CHANGE_FRAMES:], mel[:-_CHANGE_FRAMES]) > mel.max(initial=0.0) - _JUDGED_RANGE]
    if not judged.size:
        return None
    fall, rise = np.quantile(judged, [_TAIL, 1 - _TAIL])
    return float((rise + fall) / (rise - fall)) if rise > fall else None


def is_doubtful(no_speech_prob: float, avg_logprob: Optional[float]) -> bool:
    """The model is unsure of a reading: its mean token log probability is under
    ``DOUBTFUL_LOGPROB``, or it thought the audio likely held no speech (``DOUBTFUL_NO_SPEECH``)."""
    return no_speech_prob > DOUBTFUL_NO_SPEECH or (avg_logprob is not None and avg_logprob < DOUBTFUL_LOGPROB)


def leans_backwards(mel: np.ndarray) -> bool:
    """The audio of ``mel`` (F, n_mels; Whisper's normalised log-mel) swells and stops as speech
    played backwards does (``time_asymmetry`` under ``BACKWARDS_BELOW``), however little of it
    there is: under ``MIN_JUDGED_FRAMES`` too little to refuse it, enough to wait for more."""
    asymmetry = time_asymmetry(mel)
    return asymmetry is not None and asymmetry < BACKWARDS_BELOW


def runs_backwards(mel: np.ndarray) -> bool:
    """``leans_backwards``, over enough audio to tell (``MIN_JUDGED_FRAMES``)."""
    return len(mel) >= MIN_JUDGED_FRAMES and leans_backwards(mel)


def is_speech_segment(segment: Segment) -> bool:
    """Keep a one-shot segment: it has words, is not a sound tag or vocables, and is not a guess."""
    if not segment.words or is_sound_tag(segment.text) or is_vocables(segment.text):
        return False
    return sum(w.probability for w in segment.words) / len(segment.words) >= MIN_SEGMENT_PROBABILITY


def speech_segments(segments: Sequence[Segment], last_speech: float) -> list[Segment]:
    """The segments of one one-shot window that are speech (``is_speech_segment``): sound tags,
    guesses and vocables dropped, and after ``ISOLATION`` seconds without speech (or before any:
    ``last_speech`` 0), short guesses and unlikely text over likely no speech
    (``is_unlikely_start``, from the window's decode)."""
    kept = []
    for seg in segments:
        after_pause = seg.start - last_speech >= ISOLATION or last_speech <= 0
        isolated = after_pause and (is_isolated_guess(seg.words)
                                    or is_unlikely_start(seg.no_speech_prob, seg.avg_logprob))
        if is_speech_segment(seg) and not isolated:
            kept.append(seg)
            last_speech = seg.end
    return kept


def is_speech_word(word: Word) -> bool:
    """Keep a streamed word: not a sound tag, and not a guess."""
    return not is_sound_tag(word.text) and word.probability >= MIN_WORD_PROBABILITY


def speech_words(words: Sequence[Word], after_speech: bool = False, after_caption: bool = False) -> list[Word]:
    """The words of one streaming pass that are speech: sound tags and guesses dropped, and all
    of them when the pass as a whole is a guess (mean probability of its words, punctuation
    aside, under ``MIN_SEGMENT_PROBABILITY``), or only vocables (``is_vocables``) or an isolated
    guess (``is_isolated_guess``) unless it goes on from speech (``after_speech``: "Oh," then
    "I see" in the next pass); ``after_caption``: the pass begins just after a sound caption
    (``is_isolated_guess``). (A pass ``is_unlikely_start`` doubts is judged by the session:
    see ``GUESS_CORNERS``.)"""
    kept = [w for w in words if is_speech_word(w)]
    if not after_speech and (is_vocables("".join(w.text for w in kept)) or is_isolated_guess(kept, after_caption)):
        return []
    judged = [w.probability for w in kept if _NOT_LETTERS.sub("", w.text).strip()] or [1.0]
    return kept if sum(judged) / len(judged) >= MIN_SEGMENT_PROBABILITY else []


FRAME = 320  # samples: 20 ms at 16 kHz


@dataclass(frozen=True)
class NonSpeechGate:
    """What both modes treat as not speech (see the module docstring)."""

    silence_db: float = -50.0  # no 20 ms frame this loud (RMS, dBFS): silence
    max_unigram_run: int = 3  # a word more often than this in a row is a loop ("no, no, no" is speech)
    max_ngram_run: int = 2  # an n-gram (2 <= n <= max_n) repeated more often than this in a row
    max_n: int = 4
    compression_ratio: float = 2.4  # one-shot's threshold, for text of min_compressed_chars or more
    min_compressed_chars: int = 60

    def __post_init__(self):
        if not -120 < self.silence_db < 0:
            raise ValueError(f"silence_db must be in (-120, 0) dBFS, not {self.silence_db}")
        if self.max_unigram_run < 1 or self.max_ngram_run < 1 or self.max_n < 1:
            raise ValueError("repetition limits must be >= 1")

    def loud_frames(self, samples: np.ndarray) -> np.ndarray:
        """(n // FRAME,) bool: which whole 20 ms frames of ``samples`` (n,) reach ``silence_db``."""
        return self.frame_levels(samples) >= self.silence_db

    @staticmethod
    def frame_levels(samples: np.ndarray) -> np.ndarray:
        """(n // FRAME,) the RMS level (dBFS) of each whole 20 ms frame of ``samples`` (n,)."""
        n = len(samples) // FRAME
        frames = np.asarray(samples[: n * FRAME], dtype=np.float64).reshape(n, FRAME)
        return 10 * np.log10(np.maximum(np.mean(frames * frames, axis=1), 1e-20))

    def _tail_is_loud(self, samples: np.ndarray) -> bool:
        """The samples after the last whole 20 ms frame (if any) reach ``silence_db``."""
        tail = np.asarray(samples[len(samples) // FRAME * FRAME:], dtype=np.float64)
        return bool(len(tail)) and np.mean(tail * tail) >= 10 ** (self.silence_db / 10)

    def is_silent(self, samples: np.ndarray) -> bool:
        """No 20 ms frame of ``samples`` (a tail under 20 ms counts as one) is loud."""
        return not self.loud_frames(samples).any() and not self._tail_is_loud(samples)

    def last_loud(self, samples: np.ndarray) -> Optional[int]:
        """The sample just after the last loud 20 ms frame of ``samples``; None if silent."""
        loud = np.flatnonzero(self.loud_frames(samples))
        if len(loud):
            return int(loud[-1] + 1) * FRAME
        return len(samples) if self._tail_is_loud(samples) else None

    def repeats(self, text: str, new_words: int) -> bool:
        """The last ``new_words`` words of ``text`` extend a run of one word past
        ``max_unigram_run``, or of an n-gram past ``max_ngram_run``; or ``text`` compresses like
        a loop (zlib ratio over ``compression_ratio``, on long enough text)."""
        words = [w.lower() for w in _WORD.findall(text)]
        for n in range(1, self.max_n + 1):
            limit = self.max_unigram_run if n == 1 else self.max_ngram_run
            for end in range(max(n * (limit + 1), len(words) - new_words + 1), len(words) + 1):
                gram = words[end - n:end]
                runs = 1
                while end - n * (runs + 1) >= 0 and words[end - n * (runs + 1): end - n * runs] == gram:
                    runs += 1
                if runs > limit:
                    return True
        data = text.strip().encode("utf-8")
        return len(data) >= self.min_compressed_chars and len(data) / len(zlib.compress(data)) > self.compression_ratio

    has_words = staticmethod(has_words)
    is_speech_segment = staticmethod(is_speech_segment)
    is_isolated_guess = staticmethod(is_isolated_guess)
    is_unlikely_start = staticmethod(is_unlikely_start)
    needs_rereading = staticmethod(needs_rereading)
    is_guessed_again = staticmethod(is_guessed_again)
    is_heard_loop = staticmethod(is_heard_loop)
    reads_again = staticmethod(reads_again)
    is_doubtful = staticmethod(is_doubtful)
    is_reread_guess = staticmethod(is_reread_guess)
    runs_backwards = staticmethod(runs_backwards)
    leans_backwards = staticmethod(leans_backwards)
    speech_words = staticmethod(speech_words)
    speech_segments = staticmethod(speech_segments)


GATE = NonSpeechGate()


@dataclass(frozen=True)
class NoSpeechRule:
    """openai/whisper's no-speech rule, for both modes: a window (or pass) is silence when its
    no-speech probability (at <|startoftranscript|>) is over ``threshold`` and its text is
    unlikely too (mean token log probability at most ``logprob_threshold``; None: the
    probability alone decides), or when that probability is over ``certain`` whatever the text.
    Built from the mode's options (``TranscribeOptions.no_speech``, ``StreamingOptions.no_speech``)."""

    threshold: Optional[float] = 0.6
    logprob_threshold: Optional[float] = -1.0
    certain: Optional[float] = None

    @property
    def undecoded_above(self) -> Optional[float]:
        """Over this probability the text cannot save the audio, so it need not be decoded
        (``decode_loop`` then ends at once with ``Ending.NO_SPEECH``); None: always decode."""
        return self.threshold if self.logprob_threshold is None else self.certain

    def is_likely(self, no_speech_prob: float) -> bool:
        """The no-speech probability alone is over ``threshold`` (one-shot's fallback ends there)."""
        return self.threshold is not None and no_speech_prob > self.threshold

    def is_silence(self, no_speech_prob: float, avg_logprob: Optional[float]) -> bool:
        """The verdict on decoded audio. ``avg_logprob`` None: no text to judge (a streaming
        pass that stopped before its first token waits for more audio), so not silence unless
        the probability alone decides."""
        if not self.is_likely(no_speech_prob):
            return False
        if self.certain is not None and no_speech_prob > self.certain:
            return True
        if self.logprob_threshold is None:
            return True
        return avg_logprob is not None and avg_logprob <= self.logprob_threshold
