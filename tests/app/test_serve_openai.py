"""``transcribe serve`` speaking OpenAI's audio API to the real ``openai`` Python client, and
whisper-asr-webservice's ``/asr`` with each of its parameters: honoured, or refused by name.

A real service process (uvicorn), the real tiny.en model (base for translation), real media.
"""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest
import sqlite_utils
import srt

from tests.app.test_serve import pcm16, service, words
from tests.conftest import JFK, audio_path

openai = pytest.importorskip("openai", reason="the test extra (openai) is not installed")
requests = pytest.importorskip("requests")

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def api_folder(tmp_path_factory):
    """The folder of ``api``'s service: its job database (jobs.db) and spool."""
    return tmp_path_factory.mktemp("openai")


@pytest.fixture(scope="module")
def api(api_folder):
    """A service with a token, and an OpenAI client of it (the token as its API key)."""
    with service(api_folder, "--token", TOKEN) as url:
        yield url, openai.OpenAI(api_key=TOKEN, base_url=url + "/v1", max_retries=0, timeout=600)


def transcribe(client, **kwargs):
    with open(JFK, "rb") as f:
        return client.audio.transcriptions.create(model=kwargs.pop("model", "whisper-1"), file=f, **kwargs)


def test_every_response_format_says_the_same_words(api):
    _, client = api
    plain = transcribe(client, response_format="json").text
    assert "ask not what your country can do for you" in plain.lower()
    expected = words(plain)
    assert words(transcribe(client, response_format="text")) == expected
    cues = list(srt.parse(transcribe(client, response_format="srt")))
    assert words(" ".join(c.content for c in cues)) == expected and cues[0].start.total_seconds() < 1.5
    vtt = transcribe(client, response_format="vtt")
    assert vtt.startswith("WEBVTT") and words(" ".join(line for line in vtt.splitlines()[1:]
                                                      if "-->" not in line)) == expected
    verbose = transcribe(client, response_format="verbose_json")
    assert verbose.language == "english" and verbose.duration == pytest.approx(11.0, abs=0.1)
    assert words(verbose.text) == expected and words(" ".join(s.text for s in verbose.segments)) == expected


def test_timestamp_granularities_word_and_segment(api):
    _, client = api
    both = transcribe(client, response_format="verbose_json", timestamp_granularities=["word", "segment"])
    assert [w.word for w in both.words][:4] == ["And", "so", "my", "fellow"]
    starts = [w.start for w in both.words]
    assert starts == sorted(starts) and all(w.start <= w.end <= both.duration for w in both.words)
    assert both.segments and all(s.start <= s.end for s in both.segments)
    only_words = transcribe(client, response_format="verbose_json", timestamp_granularities=["word"])
    assert only_words.words and not only_words.segments
    only_segments = transcribe(client, response_format="verbose_json", timestamp_granularities=["segment"])
    assert only_segments.segments and not only_segments.words


def test_the_models_are_the_installed_ones(api):
    _, client = api
    names = [m.id for m in client.models.list()]
    assert names[:2] == ["whisper-1", "tiny.en"] and "base" in names


def test_translate_on_base(api):
    """Russian speech, translated to English by the multilingual base model."""
    _, client = api
    path = audio_path("ru_deepspeech_smoke.flac")
    with open(path, "rb") as f:
        heard = client.audio.transcriptions.create(model="base", file=f, language="ru")
    assert re.search("[а-я]", heard.text.lower())  # the Russian, in Cyrillic
    with open(path, "rb") as f:
        english = client.audio.translations.create(model="base", file=f, response_format="verbose_json")
    assert english.language == "english" and english.text.strip()
    assert not re.search("[а-я]", english.text.lower()) and re.search("[a-z]{3}", english.text.lower())


def test_an_english_only_model_cannot_translate(api):
    _, client = api
    with open(JFK, "rb") as f, pytest.raises(openai.BadRequestError) as caught:
        client.audio.translations.create(model="whisper-1", file=f)
    assert caught.value.body["param"] == "model" and "English" in caught.value.body["message"]


def test_a_wrong_token_is_a_401_in_openai_shape(api):
    url, _ = api
    wrong = openai.OpenAI(api_key="not-the-token", base_url=url + "/v1", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        transcribe(wrong)
    assert caught.value.status_code == 401
    assert set(caught.value.body) == {"message", "type", "param", "code"}
    assert caught.value.body["code"] == "invalid_api_key"


@pytest.mark.parametrize("kwargs, param", [
    ({"extra_body": {"diarize": "true"}}, "diarize"),
    ({"chunking_strategy": {"type": "server_vad", "threshold": 0.4}}, "chunking_strategy"),
    ({"extra_body": {"chunking_strategy": "semantic"}}, "chunking_strategy"),
    ({"include": ["logprobs"]}, "include[]"),
    ({"temperature": 3.0}, "temperature"),
    ({"language": "xx"}, "language"),
    ({"response_format": "json", "timestamp_granularities": ["word"]}, "timestamp_granularities[]"),
])
def test_a_parameter_not_taken_is_a_400_naming_it(api, kwargs, param):
    _, client = api
    with pytest.raises(openai.BadRequestError) as caught:
        transcribe(client, **kwargs)
    assert caught.value.status_code == 400 and caught.value.body["param"] == param


def test_a_model_not_installed_is_a_404_naming_it(api):
    _, client = api
    with pytest.raises(openai.NotFoundError) as caught:
        transcribe(client, model="large-v3")
    assert caught.value.body["param"] == "model"


def test_a_web_page_cannot_post_to_the_openai_routes(api):
    """A page the user's browser shows, posting cross-site: refused before the body is read."""
    url, _ = api
    r = requests.post(url + "/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF")},
                      data={"model": "whisper-1"}, headers={"Origin": "http://evil.example",
                                                            "Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 403 and r.json()["error"]["type"] == "invalid_request_error"
    r = requests.get(url + "/v1/models", headers={"Host": "evil.example", "Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 421


# -- /asr: every whisper-asr-webservice parameter honoured or refused by name; /status ---------------

def asr(url: str, **params):
    return requests.post(url + "/asr", params={"token": TOKEN, **params},
                         files={"audio_file": ("jfk.pcm", pcm16(JFK))}, timeout=600)


@pytest.mark.parametrize("params, param, status", [
    ({"min_speakers": "2"}, "min_speakers", 400),  # a count without diarize=true
    ({"max_speakers": "3"}, "max_speakers", 400),
    ({"diarize": "true", "min_speakers": "3", "max_speakers": "2"}, "min_speakers", 422),  # a bad value
    ({"beam_size": "5"}, "beam_size", 400),
])
def test_asr_refuses_what_it_does_not_do_by_name(api, params, param, status):
    url, _ = api
    r = asr(url, encode="false", output="srt", **params)
    assert r.status_code == status and param in r.json()["error"]


def test_asr_word_timestamps_decide_whether_the_json_lists_words(api):
    url, _ = api
    plain = asr(url, encode="false", output="json", language="en")
    assert plain.status_code == 200 and all("words" not in s for s in json.loads(plain.text)["segments"])
    timed = asr(url, encode="false", output="json", language="en", word_timestamps="true")
    segments = json.loads(timed.text)["segments"]
    assert segments and all(s["words"] for s in segments)
    assert [s["text"] for s in segments] == [s["text"] for s in json.loads(plain.text)["segments"]]
    assert asr(url, encode="false", output="srt", vad_filter="false", diarize="false").status_code == 200


def test_asr_vad_filter_decodes_only_the_speech_at_the_files_times(api, api_folder):
    """vad_filter=true runs the detector: the job is stored with vad (a job of its own, the option
    in its fingerprint), and jfk.flac after 8 s of silence keeps its words 8 s in."""
    url, _ = api
    upload = bytes(2 * 8 * 16000) + pcm16(JFK)
    r = requests.post(url + "/asr", params={"token": TOKEN, "encode": "false", "output": "json", "language": "en",
                                            "vad_filter": "true", "word_timestamps": "true"},
                      files={"audio_file": ("late.pcm", upload)}, timeout=600)
    assert r.status_code == 200, r.text
    timed = [w for s in json.loads(r.text)["segments"] for w in s["words"]]
    assert "country" in " ".join(w["word"] for w in timed).lower()
    assert 7.5 <= timed[0]["start"] < 9.5 and timed[-1]["end"] <= 8 + 11.1
    specs = [json.loads(row["spec"]) for row in sqlite_utils.Database(api_folder / "jobs.db")["jobs"].rows]
    assert any(spec["options"].get("vad") is True for spec in specs), specs


@pytest.mark.slow
def test_asr_diarize_labels_who_speaks(api, speaker_weights, tmp_path):
    """diarize=true (whisper-asr-webservice's speaker labels): two LibriSpeech readers taking
    turns come back as two WebVTT voices; max_speakers=1 makes them one."""
    from tests.app.test_cli_speakers import two_reader_audio

    url, _ = api
    upload = (np.clip(two_reader_audio(), -1, 1) * 32767).astype("<i2").tobytes()

    def vtt(**params):
        r = requests.post(url + "/asr", params={"token": TOKEN, "encode": "false", "output": "vtt", "language": "en",
                                                "diarize": "true", **params},
                          files={"audio_file": ("two readers.pcm", upload)}, timeout=900)
        assert r.status_code == 200, r.text
        return r.text

    labelled = vtt()
    assert "<v Speaker 1>" in labelled and "<v Speaker 2>" in labelled
    assert "<v Speaker 2>" not in vtt(max_speakers="1")


@pytest.mark.slow
def test_diarized_json_names_the_speakers_as_openai_does(api, speaker_weights, tmp_path):
    """response_format=diarized_json (OpenAI's speaker-labelled answer, read by the real client's
    TranscriptionDiarized): two readers taking turns are segments of speakers A and B, each
    segment's speaker the reader heard over its middle, A the first to speak."""
    from tests.app.test_cli_speakers import two_reader_audio
    from tests.media.test_vad import write_wav

    _, client = api
    audio, turns = two_reader_audio(with_turns=True)
    with open(write_wav(tmp_path / "two readers.wav", audio), "rb") as f:
        answer = client.audio.transcriptions.create(model="whisper-1", file=f, response_format="diarized_json",
                                                    language="en")
    assert type(answer).__name__ == "TranscriptionDiarized" and answer.task == "transcribe"
    assert answer.duration == pytest.approx(len(audio) / 16000, abs=0.1)
    segments = answer.segments
    assert {s.speaker for s in segments} == {"A", "B"} and segments[0].speaker == "A"
    assert all(s.type == "transcript.text.segment" and s.text and s.start < s.end for s in segments)
    assert words(" ".join(s.text for s in segments)) == words(answer.text)
    first_reader = min(turns, key=lambda t: t[0])[2]

    def reader_at(t):
        return next((who for start, end, who in turns if start <= t <= end), None)

    heard = [(s.speaker == "A") == (reader_at((s.start + s.end) / 2) == first_reader) for s in segments
             if reader_at((s.start + s.end) / 2) is not None]
    assert len(heard) >= 6 and sum(heard) >= 0.9 * len(heard), heard


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # (the client's types know it is not one)
def test_diarized_json_is_a_transcription_format_only(api):
    _, client = api
    with open(JFK, "rb") as f, pytest.raises(openai.BadRequestError) as caught:
        client.audio.translations.create(model="whisper-1", file=f, response_format="diarized_json")
    assert caught.value.body["param"] == "response_format"


def test_chunking_strategy_auto_runs_the_voice_activity_detector(api, api_folder):
    """OpenAI's chunking_strategy=auto chooses chunks by voice activity: here --vad (only the
    speech decoded), a job of its own with vad in its spec."""
    _, client = api
    answer = transcribe(client, response_format="verbose_json", chunking_strategy="auto")
    assert "ask not what your country can do for you" in answer.text.lower()
    specs = [json.loads(row["spec"]) for row in sqlite_utils.Database(api_folder / "jobs.db")["jobs"].rows]
    assert any(spec["options"].get("vad") is True and spec["formats"] == ["json"] for spec in specs), specs


def test_diarized_segments_break_where_the_speaker_changes():
    from transcriber.app.serve.openai_api import _letter, diarized

    def word(text, start, speaker):
        return {"word": text, "start": start, "end": start + 0.5, "speaker": speaker}

    timeline = {"segments": [
        {"text": " Hello there. Hi.", "start": 0.0, "end": 2.0, "speaker": "Speaker 1",
         "words": [word(" Hello", 0.0, "Speaker 1"), word(" there.", 0.5, "Speaker 1"), word(" Hi.", 1.5, "Speaker 2")]},
        {"text": " Yes.", "start": 3.0, "end": 3.5, "speaker": "Speaker 2", "words": [word(" Yes.", 3.0, "Speaker 2")]},
    ]}
    assert [(s["id"], s["speaker"], s["text"], s["start"], s["end"]) for s in diarized(timeline)] == [
        ("seg_0", "A", "Hello there.", 0.0, 1.0), ("seg_1", "B", "Hi.", 1.5, 2.0), ("seg_2", "B", "Yes.", 3.0, 3.5)]
    assert [_letter(f"Speaker {n}") for n in (1, 2, 26, 27)] == ["A", "B", "Z", "AA"]
    assert _letter(None) == "A" and _letter("Alice") == "Alice"


def test_status_tells_the_version_without_the_token(api):
    """Bazarr's "Test connection" asks the endpoint's host for /status (no token, no path)."""
    url, _ = api
    r = requests.get(url + "/status")
    assert r.status_code == 200 and r.json()["version"].startswith("transcriber ")
    assert requests.get(url + "/api/jobs").status_code == 401  # the rest still asks for it
    assert requests.post(url + "/status").status_code == 401


def test_prefer_respond_async_answers_at_once_with_the_job(api):
    url, client = api
    with open(JFK, "rb") as f:
        raw = client.audio.transcriptions.with_raw_response.create(
            model="whisper-1", file=f, response_format="srt", prompt="Async.",
            extra_headers={"Prefer": "respond-async"})
    assert raw.status_code == 202
    body = json.loads(raw.text)
    assert body["links"]["output"] == f"/jobs/{body['job_id']}/output.srt"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for _ in range(600):
        state = requests.get(f"{url}/jobs/{body['job_id']}", headers=auth, timeout=10).json()
        if state["status"] == "done":
            break
        time.sleep(0.2)
    text = requests.get(url + body["links"]["output"], headers=auth, timeout=10).text
    assert "ask not what your country" in " ".join(words(" ".join(c.content for c in srt.parse(text))))
