"""Streaming (AlignAtt) with the real tiny.en model on the real recordings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from transcriber.media.audio import load_audio, probe
from transcriber.subtitles.cues import CueOptions
from evalkit.scoring import wer, word_start_errors
from transcriber import StreamingEngine, stream, words_to_transcript
from transcriber.engines.streaming import StreamingOptions, StreamingSession
from transcriber.engines.streaming.words import commit_count
from transcriber.model.tokenizer import load_tokenizer
from transcriber.transcript.types import Word
from transcriber.subtitles.files import write_outputs

from tests.conftest import JFK, JFK_TEXT, audio_path, scored_entries

ROOT = Path(__file__).resolve().parents[2]
HARVARD = "osr_us_000_0034_harvard.flac"


@pytest.fixture(scope="session")
def streamed(model, data_dir):
    """Default streaming (1 s chunks) of every scored recording: {file: [Word]}."""
    return {e["file"]: list(stream(data_dir / e["file"], model)) for e in scored_entries()}


def text(words) -> str:
    return "".join(w.text for w in words)


def checkpoints(path, model, options=StreamingOptions(), every=5.0):
    """Words of an uninterrupted run, and (words so far, state) every ``every`` seconds of
    audio, as the job runner would keep them (through JSON)."""
    words, saved, last = [], [], 0.0
    for step in StreamingEngine(model, options).steps(path):
        words += step.words
        if step.position - last >= every:
            saved.append((len(words), json.loads(json.dumps(step.state))))
            last = step.position
    return words, saved


# -- accuracy and timing over the scored recordings ----------------------------------------------

@pytest.mark.slow
def test_wer_close_to_one_shot(streamed, oneshot_transcripts):
    """Bound 7.5% until the dev set grew (2026-12-06, see test_oneshot's pooled WER): over its 23
    files now, streaming 10.42% against one-shot's 9.27%; closeness to one-shot is the rule."""
    entries = scored_entries()
    refs = [e["text"] for e in entries]
    stream_wer = wer(refs, [text(streamed[e["file"]]) for e in entries])
    oneshot_wer = wer(refs, [oneshot_transcripts[e["file"]].text for e in entries])
    print(f"WER over {len(entries)} files: streaming {stream_wer:.2%}, one-shot {oneshot_wer:.2%}")
    assert stream_wer <= 0.11
    assert stream_wer <= oneshot_wer + 0.015


@pytest.mark.slow
def test_words_come_out_soon_after_they_are_spoken(streamed):
    lags = [w.emitted_at - w.end for words in streamed.values() for w in words]
    print(f"lag over {len(lags)} words: mean {np.mean(lags):.2f} s, p90 {np.percentile(lags, 90):.2f} s")
    assert np.mean(lags) <= 2.0
    assert min(lags) >= -1e-6  # never committed before it was heard


@pytest.mark.slow
def test_a_streams_first_words_come_out_after_two_seconds(streamed):
    """The first pass waits for 2 s of audio (issue 20: a followed recording's first words on
    disk within 4 s), no longer 4 s: measured 1.4 s mean, 1.7 s at most, after the first word's
    end (2.8 / 3.6 s with the 4 s first pass)."""
    firsts = [words[0].emitted_at - words[0].end for words in streamed.values() if words]
    assert max(firsts) <= 2.5, firsts


@pytest.mark.slow
def test_word_times_ordered_and_inside_audio(streamed, data_dir):
    for file, words in streamed.items():
        assert words, file
        duration = probe(data_dir / file)
        for a, b in zip(words, words[1:]):
            assert a.start <= a.end <= b.start + 1e-9, (file, a, b)
            assert a.emitted_at <= b.emitted_at
        assert words[0].start >= 0 and words[-1].end <= duration + 1e-6


@pytest.mark.slow
def test_word_starts_match_forced_alignments(streamed, data_dir):
    errors = []
    for e in scored_entries():
        if e.get("word_alignment"):
            reference = json.loads((data_dir / e["word_alignment"]).read_text())["words"]
            errors += word_start_errors([(w["word"], w["start"]) for w in reference],
                                        [(w.text, w.start) for w in streamed[e["file"]]])
    assert len(errors) >= 20
    assert np.median(errors) <= 0.15


# -- resuming ------------------------------------------------------------------------------------

def test_resume_from_a_checkpoint_gives_the_same_words(model):
    path = audio_path(HARVARD)  # 35 s: the buffer is trimmed, text moves into the prompt
    words, saved = checkpoints(path, model)
    assert len(saved) >= 4
    count, state = saved[len(saved) // 2]
    assert 0 < count < len(words)
    resumed = list(stream(path, model, state=state))
    assert words[:count] + resumed == words


def test_resume_in_a_fresh_process_gives_the_same_words(model, tmp_path):
    path = JFK
    words, saved = checkpoints(path, model)
    count, state = saved[0]  # after ~5 s, mid-sentence
    assert 0 < count < len(words)
    (tmp_path / "state.json").write_text(json.dumps(state))
    script = (
        "import json, sys\n"
        "import transcriber\n"
        "state = json.load(open(sys.argv[2]))\n"
        "words = transcriber.stream(sys.argv[1], 'tiny.en', state=state)\n"
        "print(json.dumps([w.to_dict() for w in words]))\n")
    out = subprocess.run([sys.executable, "-c", script, str(path), str(tmp_path / "state.json")],
                         cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    resumed = [Word.from_dict(d) for d in json.loads(out.stdout.strip().splitlines()[-1])]
    expected = [Word.from_dict(w.to_dict()) for w in words[count:]]  # same rounding
    assert resumed == expected


def test_state_is_plain_data(model):
    session = StreamingSession(model)
    audio = load_audio(JFK)
    for i in range(0, 16000 * 4, 16000):
        session.insert_audio(audio[i:i + 16000])
        session.process()
    state = session.state()
    arrays = {}

    def check(value, path="state"):
        if isinstance(value, np.ndarray):
            arrays[path] = value.shape
        elif isinstance(value, dict):
            for k, v in value.items():
                assert isinstance(k, str)
                check(v, f"{path}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                check(v, f"{path}.{i}")
        else:
            json.dumps(value)

    check(state)
    assert arrays  # the mel frames travel as arrays
    assert state["audio_offset"] == 16000 * 4
    with pytest.raises(ValueError, match="model"):
        StreamingSession.restore(model, StreamingOptions(), {**state, "model": "other"})


# -- sessions used directly ----------------------------------------------------------------------

def test_commit_holds_back_incomplete_words_and_characters(model):
    tok = load_tokenizer(model.info.folder, multilingual=False)
    ids = tok.encode(" hello wor")
    texts, groups = tok.split_to_word_tokens(ids)
    assert commit_count(tok, texts, groups, tok.encode("ld")[0], False) == 1  # "wor" + "ld"
    assert commit_count(tok, texts, groups, tok.encode(" there")[0], False) == 2  # a new word
    assert commit_count(tok, texts, groups, None, False) == 1  # unknown: wait
    assert commit_count(tok, texts, groups, None, True) == 2  # the end: everything
    ids = tok.encode(" hello \U0001F600")  # the emoji is two byte-level tokens
    texts, groups = tok.split_to_word_tokens(ids[:-1])  # cut inside the character
    assert "\ufffd" in texts[-1]
    assert commit_count(tok, texts, groups, tok.encode(" x")[0], False) == 1
    # a pass that ends (end of text) inside a character before the end of the stream: the next
    # pass completes it; only the stream's final pass commits a broken character
    assert commit_count(tok, texts, groups, None, True) == 1
    assert commit_count(tok, texts, groups, None, True, final=True) == 2


@pytest.mark.parametrize("name", ["digital_silence.flac", "librivox_background_noise.flac",
                                  "music_brahms_hungarian_dance5.flac"])
def test_no_speech_gives_no_words(model, name):
    assert list(stream(audio_path(name), model)) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["music_sugar_plum_fairy_a.flac", "music_sugar_plum_fairy_b.flac"])
def test_base_writes_no_caption_words_and_no_last_you_over_a_celesta(base_model, name):
    """base streamed " [♪ Music playing in background, playing in background," over one (the
    caption's words written as speech) and a last pass's " you" over the other's end."""
    assert list(stream(audio_path(name), base_model)) == []


def test_live_use_with_uneven_chunks(model):
    """Chunks of any size: words grow, every one is committed once, finish() flushes the rest."""
    audio = load_audio(JFK)
    session = StreamingSession(model)
    rng = np.random.default_rng(0)
    words, i = [], 0
    while i < len(audio):
        n = int(rng.integers(4000, 30000))
        session.insert_audio(audio[i:i + n])
        i += n
        new = session.process()
        assert all(abs(w.emitted_at - min(i, len(audio)) / 16000) < 1e-6 for w in new)
        words += new
    words += session.finish()
    assert session.finish() == []
    # odd cuts cost tiny.en a word or two, but nothing is repeated or lost
    assert wer(JFK_TEXT, text(words)) <= 0.2
    with pytest.raises(RuntimeError):
        session.insert_audio(audio[:100])


def test_the_last_shorter_chunk_is_decoded_once(model, monkeypatch):
    """A file's last chunk, shorter than the others, gets no pass of its own: finish() decodes
    it (one encoder pass over that audio, not two); the words are all there."""
    passes = []
    process = StreamingSession.process
    monkeypatch.setattr(StreamingSession, "process", lambda self: passes.append(self.time) or process(self))
    path = audio_path(HARVARD)  # 35.55 s: 35 chunks of 1 s and one of 0.55 s
    steps = list(StreamingEngine(model, StreamingOptions(chunk_seconds=1.0)).steps(path))
    assert passes == [float(t) for t in range(1, 36)]
    assert steps[-2].position == pytest.approx(probe(path), abs=0.01) and steps[-2].words == ()
    assert steps[-1].words  # finish() commits the last words
    entry = next(e for e in scored_entries() if e["file"].endswith(HARVARD))
    assert wer(entry["text"], text(w for s in steps for w in s.words)) <= 0.1


def test_beam_search(model):
    words = list(stream(JFK, model, options=StreamingOptions(beam_size=3)))
    assert wer(JFK_TEXT, text(words)) <= 0.1


def test_prompts_and_audio_window(model):
    """A static prompt stays, a short audio window slides: text still comes out whole."""
    options = StreamingOptions(audio_max_len=6.0, audio_trim_len=None, static_init_prompt="Harvard sentences.",
                               initial_prompt="A list of sentences.")
    words = list(stream(audio_path(HARVARD), model, options=options))
    entry = next(e for e in scored_entries() if e["file"].endswith(HARVARD))
    assert wer(entry["text"], text(words)) <= 0.15


@pytest.mark.slow
def test_words_become_a_transcript_the_writers_accept(streamed, tmp_path):
    path = audio_path(HARVARD)
    words = streamed["audio/long_en/" + HARVARD]
    transcript = words_to_transcript(words, language="en", duration=probe(path), model="tiny.en")
    assert transcript.words == words  # already ordered and inside the audio: nothing to tidy
    assert len(transcript.segments) >= 8  # ten sentences, split at their ends
    assert all(s.text.rstrip().endswith((".", "!", "?")) for s in transcript.segments[:-1])
    write_outputs(transcript, tmp_path / "harvard", ["json", "srt", "vtt", "txt"], CueOptions())
    timeline = json.loads((tmp_path / "harvard.json").read_text())
    first = timeline["segments"][0]["words"][0]
    assert "emitted_at" in first
