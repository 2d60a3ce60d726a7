"""A podcast of known timeline, built from the evaluation recordings, and its scorecard.

    podcast = build_podcast(data_dir, FULL)            # readings between music and silence
    podcast.write_wav(path)                            # 16 kHz mono, 16 bit
    card = score(podcast, words)                       # words: the system's timed words

The layout names recordings of ``../shared/data`` (``manifest.jsonl``) and the pieces between
them: ``Music(start, seconds)`` (a slice of the Brahms recording, or of ``file``), ``Silence(seconds, level)``
(digital silence, or white noise ``level`` dBFS). The builder knows where every piece lies, so
the scorecard can say, per system:

- ``wer``: pooled over the speech, every word compared with the references in order;
- ``words_in_nonspeech``: words whose middle lies inside music or silence, further than
  ``EDGE_TOLERANCE`` from any speech (a reading's own leading and trailing pauses count as speech);
- ``cue_intrusion``: how far cues (``transcriber.subtitles.cues``) reach into music or silence past that
  tolerance, worst case, seconds; ``cues_in_nonspeech``: cues lying wholly in it;
- ``lost_at_boundaries``: reference words deleted among the ``BOUNDARY_WORDS`` first words of a
  reading after music and the last ones before music;
- ``sentence_ends``: sentence-ending marks (``.?!``) written, against the references' count, over
  the readings whose reference is punctuated;
- ``worst_reading_wer``: the highest WER of one reading (speech lost after music shows here).
"""

from __future__ import annotations

import json
import re
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from evalkit.scoring import normalize
from transcriber.media.audio import load_audio
from transcriber.constants import SAMPLE_RATE
from transcriber.subtitles.cues import transcript_cues
from transcriber.engines.engine import words_to_transcript
from transcriber.transcript.types import Word

MUSIC_FILE = "audio/no_speech/music_brahms_hungarian_dance5.flac"
EDGE_TOLERANCE = 0.5  # seconds: word or cue timing this close to speech is timing, not invention
BOUNDARY_WORDS = 8
_SENTENCE_END = re.compile(r"[.?!](?=[\"')\]]*(\s|$))")


@dataclass(frozen=True)
class Music:
    start: float  # seconds into the recording
    seconds: float
    file: str = MUSIC_FILE  # a no_speech recording of the manifest (music or other sound)


@dataclass(frozen=True)
class Silence:
    seconds: float
    level_db: Optional[float] = None  # None: digital silence; else white noise at this dBFS (RMS)


Piece = Union[str, Music, Silence]  # a str is a recording's file name (as in the manifest, no folder)

# About 6.5 minutes: the long LJSpeech reading between music, then LibriVox readings and the
# "one two three" that once made streaming write "3 3 3" over the music after it.
FULL: tuple[Piece, ...] = (
    Music(0.0, 15.0), Silence(1.0), "ljspeech_LJ001-0001_0032_concat.flac", Silence(2.0),
    Music(15.0, 20.0), "librivox_sas01_0880.flac", "librivox_sas01_0890.flac", Silence(1.0, -60.0),
    "librivox_sas01_0930.flac", "sr_one_two_three.flac", Music(5.0, 30.0), Silence(3.0),
    "ljspeech_LJ002-0020.flac", "ljspeech_LJ002-0035.flac", "osr_us_000_0034_harvard.flac",
    Silence(4.0, -55.0), "jfk.flac", Music(30.0, 15.0),
)
# About 21 minutes, 46% of it not speech, as a podcast has it: music beds between the readings
# (four recordings, some slices twice), a room's noise, short pauses, white noise at -55/-60 dBFS.
# The voice-activity detector's file (bench/peers/podcast.py --layout long): long stretches of
# digital silence would measure nothing, one-shot's gate skips those already. The speech: the
# long LJSpeech reading and three LibriSpeech test-other files of two readers each (0.5 s pauses
# between their utterances), a LibriVox reading and jfk.flac.
_NS = "audio/no_speech/"
_JAZZ, _SUGAR_A, _SUGAR_B, _ROOM = (_NS + name for name in ("music_vibe_ace_jazz.flac", "music_sugar_plum_fairy_a.flac",
                                                            "music_sugar_plum_fairy_b.flac", "noise_readalongs_a.flac"))
LONG: tuple[Piece, ...] = (
    Music(0.0, 30.0), Silence(2.0), "ljspeech_LJ001-0001_0032_concat.flac", Silence(2.0), Music(0.0, 60.0, _JAZZ),
    Silence(3.0, -60.0), "ls_testother_367-130732_533-1066.flac", Music(0.0, 60.0, _SUGAR_A), Music(10.0, 35.0),
    Silence(2.0), "ls_testother_1688-142285_1998-15444.flac", Music(0.0, 45.0, _ROOM), Music(20.0, 40.0, _JAZZ),
    Silence(4.0, -55.0), "ls_testother_2609-156975_3005-163389.flac", Music(0.0, 59.8, _SUGAR_B), Music(20.0, 25.0),
    Silence(30.0, -55.0), Music(0.0, 45.0), Silence(3.0), "librivox_sas01_0880.flac", Music(5.0, 55.0, _SUGAR_A),
    Music(10.0, 45.0, _SUGAR_B), Silence(2.0), "jfk.flac", Music(0.0, 45.0, _JAZZ), Silence(5.0, -60.0),
)
# About 2 minutes, for the test suite: every kind of boundary once.
SHORT: tuple[Piece, ...] = (
    Music(0.0, 10.0), "librivox_sas01_0880.flac", "sr_one_two_three.flac", Music(5.0, 20.0),
    Silence(2.0), "osr_us_000_0034_harvard.flac", Silence(3.0, -60.0), "ljspeech_LJ002-0035.flac",
    Music(30.0, 12.0),
)


@dataclass(frozen=True)
class Region:
    start: float
    end: float
    kind: str  # "speech", "music", "silence"
    name: str = ""
    reference: str = ""  # the reading's reference text (speech only)


@dataclass(frozen=True)
class Podcast:
    samples: np.ndarray  # (n,) float32, 16 kHz
    regions: tuple[Region, ...]

    @property
    def duration(self) -> float:
        return len(self.samples) / SAMPLE_RATE

    @property
    def speech(self) -> list[Region]:
        return [r for r in self.regions if r.kind == "speech"]

    def write_wav(self, path: Path) -> Path:
        pcm = np.clip(np.round(self.samples * 32767), -32768, 32767).astype("<i2")
        with wave.open(str(path), "wb") as f:
            f.setnchannels(1)
            f.setsampwidth(2)
            f.setframerate(SAMPLE_RATE)
            f.writeframes(pcm.tobytes())
        return path


def build_podcast(data_dir: Path, layout: Sequence[Piece] = FULL, seed: int = 0) -> Podcast:
    """The pieces of ``layout`` joined end to end (recordings as they are, music faded in and
    out over 0.2 s so no edge clicks)."""
    data_dir = Path(data_dir)
    entries = {Path(e["file"]).name: e for e in map(json.loads, (data_dir / "manifest.jsonl").read_text().splitlines())
               if e}
    rng = np.random.default_rng(seed)
    parts, regions, t = [], [], 0.0
    for piece in layout:
        if isinstance(piece, str):
            entry = entries[piece]
            samples = load_audio(data_dir / entry["file"])
            region = ("speech", piece, entry["text"])
        elif isinstance(piece, Music):
            samples = _faded(load_audio(data_dir / piece.file, start=piece.start, duration=piece.seconds))
            label = "music" if piece.file == MUSIC_FILE else Path(piece.file).stem
            region = ("music", f"{label} {piece.start:g}+{piece.seconds:g} s", "")
        else:
            n = round(piece.seconds * SAMPLE_RATE)
            samples = np.zeros(n, np.float32) if piece.level_db is None else \
                (rng.standard_normal(n) * 10 ** (piece.level_db / 20)).astype(np.float32)
            region = ("silence", f"silence {piece.seconds:g} s", "")
        end = t + len(samples) / SAMPLE_RATE
        regions.append(Region(t, end, *region))
        parts.append(samples.astype(np.float32))
        t = end
    return Podcast(np.concatenate(parts), tuple(regions))


def _faded(samples: np.ndarray, seconds: float = 0.2) -> np.ndarray:
    n = min(len(samples) // 2, round(seconds * SAMPLE_RATE))
    ramp = np.linspace(0.0, 1.0, n, dtype=np.float32)
    out = samples.copy()
    out[:n] *= ramp
    out[len(out) - n:] *= ramp[::-1]
    return out


# --- scoring ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReadingScore:
    name: str
    errors: int
    ref_words: int
    lost_at_boundaries: int  # deletions among the words next to music
    sentence_ends: tuple[int, int]  # (written, in the reference); (0, 0) if unpunctuated


@dataclass(frozen=True)
class Scorecard:
    readings: tuple[ReadingScore, ...]
    words_in_nonspeech: tuple[Word, ...]
    cues_in_nonspeech: int
    cue_intrusion: float  # seconds, worst cue
    past_end: int  # words ending after the media

    @property
    def wer(self) -> float:
        return sum(r.errors for r in self.readings) / max(1, sum(r.ref_words for r in self.readings))

    @property
    def worst_reading_wer(self) -> float:
        return max(r.errors / max(1, r.ref_words) for r in self.readings)

    @property
    def lost_at_boundaries(self) -> int:
        return sum(r.lost_at_boundaries for r in self.readings)

    @property
    def sentence_ends(self) -> tuple[int, int]:
        return (sum(r.sentence_ends[0] for r in self.readings), sum(r.sentence_ends[1] for r in self.readings))


def nonspeech_blocks(podcast: Podcast) -> list[tuple[float, float]]:
    """Runs of music and silence, less ``EDGE_TOLERANCE`` on each side that touches speech."""
    blocks: list[list[float]] = []
    previous = None
    for r in podcast.regions:
        if r.kind != "speech":
            if previous is not None and previous.kind != "speech":
                blocks[-1][1] = r.end
            else:
                blocks.append([r.start, r.end])
        previous = r
    shrink = [(a + (EDGE_TOLERANCE if a > 0 else 0.0),
               b - (EDGE_TOLERANCE if b < podcast.duration - 1e-6 else 0.0)) for a, b in blocks]
    return [(a, b) for a, b in shrink if b > a]


def _overlap(a: float, b: float, blocks) -> float:
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in blocks)


def _nearest_reading(t: float, speech: Sequence[Region]) -> int:
    return int(np.argmin([max(r.start - t, 0.0, t - r.end) for r in speech]))


def score(podcast: Podcast, words: Sequence[Word]) -> Scorecard:
    """The scorecard of a system's timed words over ``podcast`` (see the module docstring), as
    the writers lay them out (``transcript.transforms.assemble``: a mark alone joins the word before it)."""
    speech, blocks = podcast.speech, nonspeech_blocks(podcast)
    transcript = words_to_transcript(list(words), duration=podcast.duration)
    past_end = sum(1 for w in words if w.end > podcast.duration + 0.05)
    words = transcript.words  # as the writers see them: marks joined to their words
    inside = tuple(w for w in words if _overlap((w.start + w.end) / 2, (w.start + w.end) / 2 + 1e-9, blocks) > 0)
    by_reading: list[list[Word]] = [[] for _ in speech]
    for w in words:
        by_reading[_nearest_reading((w.start + w.end) / 2, speech)].append(w)
    index = {id(r): i for i, r in enumerate(podcast.regions)}
    readings = []
    for reading, hyp in zip(speech, by_reading):
        i = index[id(reading)]
        after_music = i > 0 and podcast.regions[i - 1].kind == "music"
        before_music = i + 1 < len(podcast.regions) and podcast.regions[i + 1].kind == "music"
        readings.append(_score_reading(reading, "".join(w.text for w in hyp), after_music, before_music))
    cues = transcript_cues(transcript)
    overlaps = [_overlap(c.start, c.end, blocks) for c in cues]
    wholly = sum(1 for c, o in zip(cues, overlaps) if o >= 0.9 * (c.end - c.start) and c.end > c.start)
    return Scorecard(tuple(readings), inside, wholly, max(overlaps, default=0.0), past_end)


def _score_reading(reading: Region, text: str, after_music: bool, before_music: bool) -> ReadingScore:
    ref, hyp = normalize(reading.reference).split(), normalize(text).split()
    errors, deleted = align(ref, hyp)
    edge = set()
    if after_music:
        edge |= set(range(min(BOUNDARY_WORDS, len(ref))))
    if before_music:
        edge |= set(range(max(0, len(ref) - BOUNDARY_WORDS), len(ref)))
    punctuated = bool(_SENTENCE_END.search(reading.reference))
    ends = (len(_SENTENCE_END.findall(text)), len(_SENTENCE_END.findall(reading.reference))) if punctuated else (0, 0)
    return ReadingScore(reading.name, errors, len(ref), len(edge & deleted), ends)


def align(ref: Sequence[str], hyp: Sequence[str]) -> tuple[int, set[int]]:
    """Word edit distance and the positions of the reference words it deletes."""
    n, m = len(ref), len(hyp)
    d = np.zeros((n + 1, m + 1), np.int32)
    d[:, 0] = np.arange(n + 1)
    d[0, :] = np.arange(m + 1)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            d[i, j] = min(d[i - 1, j] + 1, d[i, j - 1] + 1, d[i - 1, j - 1] + (ref[i - 1] != hyp[j - 1]))
    deleted, i, j = set(), n, m
    while i > 0 or j > 0:
        if i > 0 and j > 0 and d[i, j] == d[i - 1, j - 1] + (ref[i - 1] != hyp[j - 1]):
            i, j = i - 1, j - 1
        elif i > 0 and d[i, j] == d[i - 1, j] + 1:
            deleted.add(i - 1)
            i -= 1
        else:
            j -= 1
    return int(d[n, m]), deleted
