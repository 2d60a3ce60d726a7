"""One-shot transcription with the real tiny.en model on the real recordings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import srt
import webvtt

import transcriber
from transcriber.subtitles.cues import CueOptions
from evalkit.scoring import normalize, wer, word_start_errors
from transcriber.subtitles.files import write_outputs

from tests.conftest import JFK, JFK_TEXT, PRESS_YARD, audio_path, ffmpeg, scored_entries

pytestmark = pytest.mark.slow


def test_pooled_wer_within_target(oneshot_transcripts):
    """The bound follows the dev set: 7% until the data grew by three LibriSpeech test-other
    chapters and a 9-minute reading (2026-12-06); over the 23 files now, 9.27% measured (the
    same on the code before issue 48's changes), and on the long_en files faster-whisper int8
    on the same weights 9.70% against our 9.57% (bench/peers/recall.py)."""
    entries = scored_entries()
    refs = [e["text"] for e in entries]
    hyps = [oneshot_transcripts[e["file"]].text for e in entries]
    score = wer(refs, hyps)
    print(f"one-shot greedy WER over {len(entries)} files: {score:.2%}")
    assert score <= 0.10


def test_word_starts_match_forced_alignments(oneshot_transcripts, data_dir):
    """Median word start error against the forced alignments: <= 0.12 s (the subtitle issue's
    bound, inside the foundation's 0.15; faster-whisper on the same weights: 0.105 s)."""
    errors = []
    for e in scored_entries():
        if not e.get("word_alignment"):
            continue
        reference = json.loads((data_dir / e["word_alignment"]).read_text())["words"]
        words = oneshot_transcripts[e["file"]].words
        errors += word_start_errors([(w["word"], w["start"]) for w in reference], [(w.text, w.start) for w in words])
    errors.sort()
    upper_median = errors[len(errors) // 2]
    print(f"word start error over {len(errors)} words: upper median {upper_median:.3f} s")
    assert len(errors) >= 20
    assert upper_median <= 0.12


def test_word_times_ordered_and_inside_audio(oneshot_transcripts):
    for transcript in oneshot_transcripts.values():
        words = transcript.words
        assert words
        for a, b in zip(words, words[1:]):
            assert a.start <= a.end <= b.start + 1e-9
        assert words[0].start >= 0 and words[-1].end <= transcript.duration + 1e-9


def test_outputs_parse_back_with_the_same_words(oneshot_transcripts, tmp_path):
    transcript = oneshot_transcripts["audio/long_en/osr_us_000_0034_harvard.flac"]
    written = write_outputs(transcript, tmp_path / "harvard", ["json", "srt", "vtt"], CueOptions())
    assert [p.name for p in written] == ["harvard.json", "harvard.srt", "harvard.vtt"]
    expected = [w.text.strip() for w in transcript.words]

    data = json.loads((tmp_path / "harvard.json").read_text())
    assert set(data) >= {"language", "duration", "model", "segments"}
    json_words = [w for s in data["segments"] for w in s["words"]]
    assert [w["word"].strip() for w in json_words] == expected
    starts = [w["start"] for w in json_words]
    assert starts == sorted(starts) and all(0 <= w["start"] <= w["end"] <= data["duration"] for w in json_words)

    subs = list(srt.parse((tmp_path / "harvard.srt").read_text(encoding="utf-8")))
    assert " ".join(s.content.replace("\n", " ") for s in subs).split() == expected
    assert all(a.end <= b.start for a, b in zip(subs, subs[1:]))

    captions = webvtt.read(str(tmp_path / "harvard.vtt"))
    assert " ".join(c.text.replace("\n", " ") for c in captions).split() == expected


@pytest.mark.parametrize("name", ["digital_silence.flac", "librivox_background_noise.flac",
                                  "music_brahms_hungarian_dance5.flac"])
def test_no_speech_gives_no_words(model, name):
    transcript = transcriber.transcribe(audio_path(name), model)
    assert transcript.words == []
    assert transcript.text == ""


def test_closing_music_after_the_last_words_stays_silent(model, data_dir, tmp_path):
    """A reading, a pause, jfk.flac, then 15 s of the Brahms to the end (the full podcast's
    close). The last window's " Thank you." was refused by the gate, and the seconds after it,
    decoded again on their own, wrote " Thank you." once more and kept it: the walk now ends
    with a last window whose every segment was refused."""
    from evalkit import podcast

    layout = ("osr_us_000_0034_harvard.flac", podcast.Silence(4.0, -55.0), "jfk.flac", podcast.Music(30.0, 15.0))
    cast = podcast.build_podcast(data_dir, layout)
    card = podcast.score(cast, transcriber.transcribe(cast.write_wav(tmp_path / "close.wav"), model=model).words)
    assert [w.text for w in card.words_in_nonspeech] == [] and card.cues_in_nonspeech == 0
    assert card.lost_at_boundaries == 0 and card.wer < 0.05, card.readings


def test_the_full_podcast_in_the_default_mode(model, data_dir, tmp_path):
    """The whole podcast (6.3 min: nine readings between music, silence and near-silence), as
    `transcribe podcast.wav` writes it: no word in music or silence, no cue reaching half a
    second into them (a " Roman." once sat 0.7 s into a pause, a " you" in the closing music),
    nothing lost at the edges, the sentence ends kept (28 of the references' 26 measured)."""
    from evalkit import podcast

    cast = podcast.build_podcast(data_dir, podcast.FULL)
    card = podcast.score(cast, transcriber.transcribe(cast.write_wav(tmp_path / "podcast.wav"), model=model).words)
    assert [w.text for w in card.words_in_nonspeech] == [] and card.cues_in_nonspeech == 0
    assert card.cue_intrusion < 0.5 and card.past_end == 0
    assert card.lost_at_boundaries == 0 and card.wer < 0.05, card.readings
    written, reference = card.sentence_ends
    assert written >= reference - 1, card.readings


def test_containers_give_the_same_words(model, tmp_path):
    source = JFK
    video = tmp_path / "jfk video.mp4"
    ffmpeg("-f", "lavfi", "-i", "color=c=black:s=64x64:r=5", "-i", str(source), "-shortest",
           "-c:v", "libx264", "-c:a", "aac", "-b:a", "128k", str(video))
    mp3 = tmp_path / "jfk.mp3"
    ffmpeg("-i", str(source), "-b:a", "128k", str(mp3))
    reference = [normalize(w.text) for w in transcriber.transcribe(source, model).words]
    assert len(reference) >= 20
    for derived in (video, mp3):
        words = [normalize(w.text) for w in transcriber.transcribe(derived, model).words]
        assert words == reference, derived.name


def test_beam_search_transcribes(model):
    greedy = transcriber.transcribe(JFK, model)
    beam = transcriber.transcribe(JFK, model, beam_size=5)
    assert wer([JFK_TEXT], [beam.text]) <= 0.05
    assert beam.words and beam.words[-1].end <= beam.duration
    assert normalize(beam.text) == normalize(greedy.text)


def test_the_shipped_examples_transcribe(model):
    """examples/ travels with the code: without ../shared/data (a lone clone) this still proves
    that the model transcribes."""
    assert wer([JFK_TEXT], [transcriber.transcribe(JFK, model).text]) <= 0.05
    transcript = transcriber.transcribe(PRESS_YARD, model)
    assert normalize(transcript.text) == "eight the press yard"
    assert 0 <= transcript.words[0].start < transcript.words[-1].end <= transcript.duration


@pytest.fixture(scope="module")
def four_jfks(tmp_path_factory) -> Path:
    """44 s: two one-shot windows."""
    path = tmp_path_factory.mktemp("long") / "four jfks.flac"
    ffmpeg("-i", str(JFK), "-filter_complex", "[0:a][0:a][0:a][0:a]concat=n=4:v=0:a=1", str(path))
    return path


def test_greedy_batch_gives_each_window_its_own_tokens(model, four_jfks):
    """Windows of different audio lengths and prompts, one joining after the others have
    started: each row's tokens are exactly those of DecodingTask.run on it alone."""
    from transcriber.media.audio import load_audio
    from transcriber.engines.context import WhisperContext
    from transcriber.engines.decoding.side_by_side import WindowsSideBySide
    from transcriber.engines.decoding.options import DecodingOptions
    from transcriber.engines.decoding.task import DecodingTask

    context = WhisperContext(model)
    tok = context.tokenizer()
    windows = [load_audio(JFK), load_audio(PRESS_YARD), load_audio(four_jfks)[: 30 * 16000]]
    prompts = [[], tok.encode(" The press yard."), tok.encode(" A longer text that went before, as the prompt.")]
    rows = []
    for samples, prompt in zip(windows, prompts):
        base, _ = context.encode_window(samples)
        rows.append((DecodingTask(model, tok, DecodingOptions(prompt=tuple(prompt) or None), model.info.suppress_ids),
                     base))
    alone = [task.run(base, "en") for task, base in rows]
    batch, together = WindowsSideBySide(model), {}
    batch.add(0, *rows[0])
    batch.add(1, *rows[1])
    for _ in range(3):
        together.update(batch.step())
    batch.add(2, *rows[2])  # joins while the others are mid-window
    while batch:
        together.update(batch.step())
    for i, result in enumerate(alone):
        assert together[i].tokens == result.tokens and together[i].text == result.text
        assert together[i].avg_logprob == pytest.approx(result.avg_logprob, abs=1e-4)
        assert together[i].no_speech_prob == pytest.approx(result.no_speech_prob, abs=1e-4)
    assert "country" in together[0].text and together[2].text.count("country") >= 2


def test_files_side_by_side_give_their_own_words(model, four_jfks, tmp_path):
    """engine.side_by_side(2) over four files (one of them broken, one of two windows): each good
    file gets the words steps() gives it alone, the broken one its error, the rest go on."""
    from transcriber import AudioError, OneShotEngine

    broken = tmp_path / "broken.flac"
    broken.write_bytes(JFK.read_bytes()[:30_000])
    engine = OneShotEngine(model)
    files = [four_jfks, JFK, broken, PRESS_YARD]
    alone = {f: [w.text for s in engine.steps(f) for w in s.words] for f in files if f != broken}
    batch, waiting = engine.side_by_side(2), list(files)
    got, ended, errors = {f: [] for f in files}, [], {}
    for _ in range(2):
        batch.add(waiting[0], waiting.pop(0))
    for key, event in batch.events():
        if isinstance(event, Exception):
            errors[key] = event
        elif event is not None:
            got[key] += [w.text for w in event.words]
            continue
        ended.append(key)
        if waiting:
            batch.add(waiting[0], waiting.pop(0))
    assert sorted(map(str, ended)) == sorted(map(str, files)) and list(errors) == [broken]
    assert isinstance(errors[broken], AudioError)
    for f, words in alone.items():
        assert got[f] == words, f
    assert len(batch) == 0


def test_a_dropped_file_says_nothing_more(model, four_jfks):
    engine = transcriber.OneShotEngine(model)
    batch = engine.side_by_side(2)
    batch.add("long", four_jfks)
    batch.add("jfk", JFK)
    seen = []
    for key, event in batch.events():
        seen.append(key)
        if key == "long":
            batch.drop("long")  # after its first window
    assert seen.count("long") == 1 and seen.count("jfk") == 2 and len(batch) == 0  # jfk: a step, its end


def test_the_base_model_keeps_timestamps_over_a_long_reading(base_model):
    """Each window is prompted with the segments before it, their timestamps included, as
    openai-whisper and faster-whisper prompt. Prompted with their text alone, base stopped
    writing timestamps after the first windows of the 222 s LJSpeech reading: 30 s segments cut
    at every window's end, a phrase said twice across one ("beautiful letters should be") and
    one invented at another ("the book was published in the 18th century"); WER 6.8%, now 4.0%
    (faster-whisper int8 on the same weights: 3.8%)."""
    path = audio_path("ljspeech_LJ001-0001_0032_concat.flac")
    reference = next(e["text"] for e in scored_entries() if e["file"].endswith(path.name))
    t = transcriber.transcribe(path, model=base_model, language="en")
    assert max(s.end - s.start for s in t.segments) < 15, [(s.start, s.end) for s in t.segments]
    assert "18th century" not in t.text and wer([reference], [t.text]) < 0.05


def test_a_word_cut_by_the_window_end_is_heard_whole_in_the_next_window(model):
    """tiny.en ended its second window of the LJSpeech reading with " opera," at 29.98 s, the
    word " operations" cut by the window's end, and began the next with " orations". A full
    window's last word that ends at the window's end now goes to the next window, which starts
    where the word starts."""
    path = audio_path("ljspeech_LJ001-0001_0032_concat.flac")
    words = [w.text.strip() for w in transcriber.transcribe(path, model=model, language="en").words]
    assert "operations" in words and "orations" not in words, words
    assert all(a != b for a, b in zip(words, words[1:]) if len(a) > 3), words  # no word said twice across a window
