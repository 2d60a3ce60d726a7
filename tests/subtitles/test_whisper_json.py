"""The JSON output reads as openai-whisper's: ``transcribe()``'s result dict, as its ``WriteJSON``
writes it and its readers load it (whisper.utils' writers: ``result["segments"]``, each segment's
``start``/``end``/``text``, ``words`` with ``word``/``start``/``end``; the clients of
whisper-asr-webservice validate segments as ``id: int, seek: int, start/end: float, text: str,
tokens: list[int], temperature/avg_logprob/compression_ratio/no_speech_prob: float, words``,
words as ``word: str, start/end/probability: float``). Ours (language, duration, model,
emitted_at) sit beside them. JSON written before whisper's fields, and job checkpoints stored
before them, still load.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from transcriber.app.store.sqlite_store import segments_from_json
from transcriber.transcript.transforms import assemble
from transcriber.engines.modes import make_engine
from transcriber.transcript.types import Segment, Transcript, Word, words_segment
from transcriber.subtitles.formats import write_json

from tests.conftest import JFK

SEGMENT = {"id": int, "seek": int, "start": float, "end": float, "text": str, "tokens": list,
           "temperature": float, "avg_logprob": float, "compression_ratio": float, "no_speech_prob": float,
           "words": list}
WORD = {"word": str, "start": float, "end": float, "probability": float}


def load_as_whisper(text: str) -> dict:
    """What a reader of whisper's JSON does with the file: every key it reads there, of the
    type whisper writes (a float is never an int, an id never a bool), and the text it prints."""
    result = json.loads(text)
    assert isinstance(result["text"], str) and isinstance(result["segments"], list)
    assert isinstance(result["language"], str)
    for n, seg in enumerate(result["segments"]):
        for key, kind in SEGMENT.items():
            assert type(seg[key]) is kind, (key, seg[key])
        assert seg["id"] == n and seg["seek"] >= 0 and seg["start"] <= seg["end"]
        assert all(type(t) is int and t >= 0 for t in seg["tokens"])
        for word in seg["words"]:
            for key, kind in WORD.items():
                assert type(word[key]) is kind, (key, word[key])
            assert seg["start"] <= word["start"] <= word["end"] <= seg["end"]
    assert result["text"] == "".join(seg["text"] for seg in result["segments"])  # as whisper joins them
    return result


def test_a_transcript_is_written_with_whispers_fields():
    words = (Word(0.5, 0.8, " Hello", 0.75, tokens=(15496,)), Word(0.8, 1.2, " world.", 0.5, tokens=(995, 13)))
    seg = Segment(0.5, 1.2, " Hello world.", words, avg_logprob=-0.3, no_speech_prob=0.01, compression_ratio=0.8,
                  temperature=0.2, tokens=(50364, 15496, 995, 13, 50424), seek=3000)
    data = load_as_whisper(write_json(Transcript("en", 2.0, (seg,), model="tiny.en")))
    assert data["text"] == " Hello world."
    assert data["segments"][0] == {"id": 0, "seek": 3000, "start": 0.5, "end": 1.2, "text": " Hello world.",
                                   "tokens": [50364, 15496, 995, 13, 50424], "temperature": 0.2,
                                   "avg_logprob": -0.3, "compression_ratio": 0.8, "no_speech_prob": 0.01,
                                   "words": [w.to_dict() for w in words]}
    assert Transcript.from_dict(data).segments[0] == seg  # what the file says comes back


def test_a_json_written_before_whispers_fields_still_loads():
    old = {"language": "en", "duration": 2.0, "model": "tiny.en", "segments": [
        {"start": 0.5, "end": 1.2, "text": " Hello world.",
         "words": [{"word": " Hello", "start": 0.5, "end": 0.8, "probability": 0.75},
                   {"word": " world.", "start": 0.8, "end": 1.2, "probability": 0.5}]}]}
    transcript = Transcript.from_dict(old)
    assert transcript.text == "Hello world." and len(transcript.words) == 2
    load_as_whisper(write_json(transcript))  # and is written again as whisper's


def test_streamed_words_make_a_segment_with_whispers_fields():
    words = (Word(1.0, 1.3, " Hi", 0.5, tokens=(15902,), logprob=-0.7, no_speech_prob=0.1),
             Word(1.3, 1.9, " there.", 0.9, tokens=(612, 13), logprob=-0.2, no_speech_prob=0.3))
    seg = words_segment(words)
    assert seg.tokens == (15902, 612, 13) and seg.seek == 100 and seg.temperature == 0.0
    assert seg.avg_logprob == pytest.approx(-0.9 / 3) and seg.no_speech_prob == 0.3
    assert seg.compression_ratio > 0
    load_as_whisper(write_json(Transcript("en", 2.0, (seg,))))


def old_checkpoint(segments) -> str:
    """Segments as the job store kept them before whisper's fields: no ``tokens``/``seek`` in a
    segment, no ``tokens``/``logprob``/``no_speech_prob`` in a word."""
    out = []
    for seg in segments:
        d = {k: v for k, v in asdict(seg).items() if k not in ("tokens", "seek")}
        d["words"] = [{k: v for k, v in w.items() if k not in ("tokens", "logprob", "no_speech_prob")}
                      for w in d["words"]]
        out.append(d)
    return json.dumps(out)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["oneshot", "stream"])
def test_a_real_transcript_loads_as_whispers(model, mode):
    engine = make_engine(mode, model)
    steps = list(engine.steps(JFK))
    transcript = assemble([s for step in steps for s in step.segments], steps[-1].language, 11.0, model.name)
    data = load_as_whisper(write_json(transcript))
    assert "not what your country can do for you" in data["text"]
    tokenizer = engine.context.tokenizer("en")
    for seg in data["segments"]:
        text_tokens = [t for t in seg["tokens"] if t < tokenizer.eot]
        assert tokenizer.decode(text_tokens) == seg["text"]  # the tokens are the segment's
        assert -3.0 < seg["avg_logprob"] <= 0 and 0 <= seg["no_speech_prob"] <= 1
        assert 0.5 < seg["compression_ratio"] < 2.4 and seg["temperature"] in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    if mode == "stream":  # no timestamp tokens: streaming decodes without them; greedy, no fallback
        assert all(t < tokenizer.eot for seg in data["segments"] for t in seg["tokens"])
        assert {seg["temperature"] for seg in data["segments"]} == {0.0}
    else:  # whisper's: the window's timestamp tokens around the text
        assert all(seg["tokens"][0] >= tokenizer.timestamp_begin for seg in data["segments"])


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["oneshot", "stream"])
def test_a_job_checkpointed_before_whispers_fields_resumes_to_a_whisper_json(model, data_dir, mode):
    """The first checkpoint's segments as an old store kept them, the rest decoded after a
    resume from its state: the JSON is whisper's, its words those of an uninterrupted run."""
    source = data_dir / "audio/long_en/osr_us_000_0034_harvard.flac"
    engine = make_engine(mode, model)
    steps = list(engine.steps(source))
    cut = next(i for i, s in enumerate(steps) if s.segments and i < len(steps) - 1)
    stored = segments_from_json(old_checkpoint([s for step in steps[:cut + 1] for s in step.segments]))
    resumed = list(engine.steps(source, json.loads(json.dumps(steps[cut].state))))
    transcript = assemble(stored + [s for step in resumed for s in step.segments], "en", 35.548, model.name)
    load_as_whisper(write_json(transcript))
    whole = assemble([s for step in steps for s in step.segments], "en", 35.548, model.name)
    assert [(w.text, w.start, w.end) for w in transcript.words] == [(w.text, w.start, w.end) for w in whole.words]
    assert all(not seg.tokens for seg in transcript.segments[:len(stored)])  # what the old store had
