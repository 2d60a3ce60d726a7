"""Subtitles written into a copy of the video (transcriber.subtitles.embed): real videos made by ffmpeg,
each container, both ffmpeg builds (imageio's has no ffprobe: the streams are read from ffmpeg),
the original untouched, nothing half-made left behind, and the real model's words in the track."""
from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
import srt

from tests.conftest import JFK, ffmpeg
from transcriber.subtitles import embed
from transcriber.media.ffmpegtool import ffmpeg_binary

SRT = ("1\n00:00:00,500 --> 00:00:01,500\nHello there.\n\n"
       "2\n00:00:01,800 --> 00:00:02,700\nA second cue, with ünïcode.\n\n")
VIDEO = {".mp4": ["-c:v", "mpeg4", "-c:a", "aac"], ".m4v": ["-c:v", "mpeg4", "-c:a", "aac"],
         ".mov": ["-c:v", "mpeg4", "-c:a", "aac"], ".mkv": ["-c:v", "mpeg4", "-c:a", "aac"],
         ".webm": ["-c:v", "libvpx", "-c:a", "libopus"]}


def make_video(path: Path, audio: str = "sine=frequency=440:sample_rate=48000", seconds: float = 3) -> Path:
    source = ["-f", "lavfi", "-i", audio] if "=" in audio else ["-i", audio]
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=96x64:rate=5", *source, "-t", str(seconds), "-shortest",
           *VIDEO[path.suffix], str(path))
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def track_text(path: Path, index: int = 0) -> list[srt.Subtitle]:
    out = subprocess.run([ffmpeg_binary(), "-nostdin", "-v", "error", "-i", str(path), "-map", f"0:s:{index}",
                          "-f", "srt", "-"], capture_output=True, text=True, check=True).stdout
    return list(srt.parse(out))


@pytest.mark.parametrize("ext", sorted(VIDEO))
def test_a_tagged_track_is_added_to_a_copy_and_every_stream_kept(tmp_path, any_ffmpeg, ext):
    video = make_video(tmp_path / f"talk{ext}")
    before, streams = digest(video), embed.streams(video)
    out = embed.embed(video, SRT, "de")
    assert out == tmp_path / f"talk.subtitled{ext}"
    assert digest(video) == before  # the original is never touched
    assert [s.kind for s in embed.streams(out)] == [s.kind for s in streams] + ["subtitle"]
    assert embed.streams(out)[-1].language == "ger"
    cues = track_text(out)
    assert [c.content for c in cues] == ["Hello there.", "A second cue, with ünïcode."]
    assert [round(c.start.total_seconds(), 1) for c in cues] == [0.5, 1.8]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([video.name, out.name])  # no temporary left


def test_in_place_replaces_the_video_with_the_verified_copy(tmp_path, any_ffmpeg):
    video = make_video(tmp_path / "talk.mkv")
    kinds = [s.kind for s in embed.streams(video)]
    assert embed.embed(video, SRT, "en", in_place=True) == video
    assert [s.kind for s in embed.streams(video)] == kinds + ["subtitle"]
    assert [c.content for c in track_text(video)] == ["Hello there.", "A second cue, with ünïcode."]
    assert [p.name for p in tmp_path.iterdir()] == ["talk.mkv"]


def test_a_track_the_video_had_is_kept_beside_the_new_one(tmp_path, any_ffmpeg):
    plain = make_video(tmp_path / "plain.mkv")
    (tmp_path / "old.srt").write_text("1\n00:00:00,000 --> 00:00:01,000\nOld track.\n\n")
    video = tmp_path / "talk.mkv"
    ffmpeg("-i", str(plain), "-i", str(tmp_path / "old.srt"), "-map", "0", "-map", "1", "-c", "copy",
           "-c:s", "srt", "-metadata:s:s:0", "language=fre", str(video))
    out = embed.embed(video, SRT, "en")
    assert [(s.kind, s.language) for s in embed.streams(out) if s.kind == "subtitle"] == [("subtitle", "fre"),
                                                                                         ("subtitle", "eng")]
    assert [c.content for c in track_text(out, 0)] == ["Old track."]
    assert [c.content for c in track_text(out, 1)][0] == "Hello there."


def test_a_container_without_subtitles_is_refused_in_one_line(tmp_path):
    video = tmp_path / "talk.avi"
    video.write_bytes(b"whatever")
    with pytest.raises(embed.EmbedError) as err:
        embed.embed(video, SRT, "en")
    assert str(video) in str(err.value) and ".mkv" in str(err.value) and "\n" not in str(err.value)
    assert [p.name for p in tmp_path.iterdir()] == ["talk.avi"]


def test_a_file_that_is_not_a_video_leaves_nothing_behind(tmp_path, any_ffmpeg):
    video = tmp_path / "talk.mkv"
    video.write_bytes(b"not a video at all" * 100)
    with pytest.raises(embed.EmbedError) as err:
        embed.embed(video, SRT, "en", in_place=True)
    assert str(video) in str(err.value) and "\n" not in str(err.value)
    assert video.read_bytes() == b"not a video at all" * 100
    assert [p.name for p in tmp_path.iterdir()] == ["talk.mkv"]


def test_language_tags_are_iso_639_2():
    assert [embed.language_tag(c) for c in ("en", "de", "zh", "haw", "jw", "xx", "")] == \
        ["eng", "ger", "chi", "haw", "jav", "und", "und"]


@pytest.mark.slow
def test_the_models_words_read_back_from_the_video(tmp_path, model):
    """The real model on jfk.flac under a test picture: the track holds its words."""
    import transcriber
    from transcriber.subtitles.formats import write_srt

    video = make_video(tmp_path / "jfk.mp4", str(JFK), seconds=11)
    transcript = transcriber.transcribe(video, model=model)
    out = embed.embed(video, write_srt(transcript), transcript.language)
    text = " ".join(c.content for c in track_text(out)).lower()
    assert "ask not what your country can do for you" in " ".join(text.replace(",", "").split())
    assert embed.streams(out)[-1].language == "eng"
