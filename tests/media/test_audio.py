"""transcriber.media.audio against the real ffmpeg and real recordings (derived files built here)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from transcriber.media import audio, ffmpegtool
from transcriber.media.audio import SAMPLE_RATE, iter_audio, load_audio, probe
from transcriber.errors import AudioError, TranscriberError

from tests.conftest import JFK, PRESS_YARD, audio_path, damaged_flac  # JFK: examples/jfk.flac, 11.0 s, 16 kHz mono

pytestmark = pytest.mark.usefixtures("any_ffmpeg")  # imageio-ffmpeg's and the PATH's (tests/conftest.py)


def _ffmpeg(*args: str) -> None:
    subprocess.run([ffmpegtool.ffmpeg_binary(), "-nostdin", "-hide_banner", "-v", "error", "-y",
                    *args], check=True, stdin=subprocess.DEVNULL)


def _cut(src: Path, dst: Path, fraction: float) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: int(len(data) * fraction)])
    return dst


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("media")
    f = {name: d / name for name in ("jfk.mp3", "jfk.mp4", "long_video.mp4", "faststart.mp4",
                                     "noaudio.mp4")}
    jfk = str(JFK)
    _ffmpeg("-i", jfk, str(f["jfk.mp3"]))  # with a Xing header: the duration is exact
    _ffmpeg("-f", "lavfi", "-i", "color=c=blue:s=64x64:r=10:d=11", "-i", jfk,
            "-c:a", "aac", str(f["jfk.mp4"]))
    # The video outlasts the audio by 4 s: a shorter audio track is not a truncation.
    _ffmpeg("-f", "lavfi", "-i", "color=c=blue:s=64x64:r=10:d=15", "-i", jfk,
            "-c:a", "aac", str(f["long_video.mp4"]))
    # moov atom first, so the cut file still opens and the cut shows only while decoding.
    _ffmpeg("-f", "lavfi", "-i", "color=c=blue:s=64x64:r=10:d=11", "-i", jfk,
            "-c:a", "aac", "-movflags", "+faststart", str(f["faststart.mp4"]))
    _ffmpeg("-f", "lavfi", "-i", "color=c=black:s=64x64:d=2", str(f["noaudio.mp4"]))
    f["trunc.flac"] = _cut(JFK, d / "trunc.flac", 0.4)
    f["trunc.mp3"] = _cut(f["jfk.mp3"], d / "trunc.mp3", 0.4)
    f["trunc.mp4"] = _cut(f["faststart.mp4"], d / "trunc.mp4", 0.4)
    f["cut_moov.mp4"] = _cut(f["jfk.mp4"], d / "cut_moov.mp4", 0.4)  # moov at the end: lost
    f["empty.mp3"] = d / "empty.mp3"
    f["empty.mp3"].write_bytes(b"")
    f["text.mp3"] = d / "text.mp3"
    f["text.mp3"].write_text("this is not an mp3 file\n" * 20)
    return f


@pytest.fixture(scope="module")
def jfk() -> np.ndarray:
    return load_audio(JFK)


def test_ffmpeg_binary_is_cached_and_runs():
    assert ffmpegtool.ffmpeg_binary() is ffmpegtool.ffmpeg_binary()
    assert os.access(ffmpegtool.ffmpeg_binary(), os.X_OK)


def test_load_audio_format(jfk):
    assert SAMPLE_RATE == 16000
    assert jfk.dtype == np.float32 and jfk.ndim == 1
    assert jfk.size == 11 * SAMPLE_RATE
    assert np.abs(jfk).max() <= 1.0 and np.abs(jfk).max() > 0.1
    assert load_audio(JFK).flags.writeable  # fresh arrays, not views of a bytes object


def test_probe_duration(media):
    assert probe(JFK) == pytest.approx(11.0, abs=0.05)
    assert probe(media["jfk.mp3"]) == pytest.approx(11.0, abs=0.1)
    assert probe(str(media["jfk.mp4"])) == pytest.approx(11.0, abs=0.2)


def test_a_file_is_probed_once_while_it_stays_the_same(tmp_path, monkeypatch):
    """transcribe() asks for the duration after its decode probed the file: one probe process,
    not two (a distribution's ffprobe takes ~50 ms to start). A file rewritten is probed again."""
    runs = []
    real = ffmpegtool.run_probe
    monkeypatch.setattr(ffmpegtool, "run_probe", lambda cmd, name: runs.append(name) or real(cmd, name))
    path = tmp_path / "clip.flac"
    _ffmpeg("-i", str(JFK), "-t", "3", str(path))
    stream = iter_audio(path)
    assert sum(len(c) for _, c in stream) == 3 * SAMPLE_RATE
    assert probe(path) == pytest.approx(3.0, abs=0.05)
    assert len(runs) == 1
    _ffmpeg("-i", str(JFK), "-t", "5", str(path))  # the same name, other content
    assert probe(path) == pytest.approx(5.0, abs=0.05)
    assert len(runs) == 2


def test_chunks_are_contiguous_and_concatenate_to_load_audio(jfk):
    chunks = list(iter_audio(JFK, chunk_seconds=3.0))
    assert [off for off, _ in chunks] == [0, 48000, 96000, 144000]
    assert [c.size for _, c in chunks] == [48000, 48000, 48000, 32000]
    assert all(c.dtype == np.float32 for _, c in chunks)
    np.testing.assert_array_equal(np.concatenate([c for _, c in chunks]), jfk)


def test_start_seeks_in_source_samples(jfk):
    chunks = list(iter_audio(JFK, chunk_seconds=2.0, start=3.25))
    first = round(3.25 * SAMPLE_RATE)
    assert chunks[0][0] == first
    assert all(b[0] == a[0] + a[1].size for a, b in zip(chunks, chunks[1:]))
    seeked = np.concatenate([c for _, c in chunks])
    assert first + seeked.size == jfk.size
    np.testing.assert_allclose(seeked, jfk[first:], atol=1e-3)  # FLAC seeks sample-exactly


def test_start_and_duration_window(jfk):
    part = load_audio(JFK, start=2.0, duration=1.5)
    assert part.size == pytest.approx(1.5 * SAMPLE_RATE, abs=2)
    np.testing.assert_allclose(part, jfk[32000:32000 + part.size], atol=1e-3)


def test_start_past_the_end_yields_nothing():
    assert list(iter_audio(JFK, start=12.5)) == []


@pytest.mark.parametrize("name", ["jfk.mp3", "jfk.mp4", "long_video.mp4", "faststart.mp4"])
def test_other_containers_decode_to_the_same_speech(media, jfk, name):
    samples = load_audio(media[name])
    assert samples.dtype == np.float32
    assert abs(samples.size - jfk.size) <= 0.05 * SAMPLE_RATE
    n = min(samples.size, jfk.size)
    # Lossy codecs and their delay: the same signal, not the same samples.
    assert np.corrcoef(samples[:n], jfk[:n])[0, 1] > 0.9


def test_digital_silence_is_not_an_error():
    samples = load_audio(audio_path("digital_silence.flac"))
    assert samples.size > 0 and np.abs(samples).max() < 1e-3  # a stray LSB here and there


@pytest.mark.parametrize("name", ["empty.mp3", "text.mp3", "noaudio.mp4", "cut_moov.mp4",
                                  "trunc.flac", "trunc.mp3", "trunc.mp4", "missing.mp3"])
def test_bad_files_raise_one_line_audio_error(media, tmp_path, name):
    path = media.get(name, tmp_path / name)
    with pytest.raises(AudioError) as info:
        load_audio(path)
    message = str(info.value)
    assert isinstance(info.value, TranscriberError)
    assert "\n" not in message and name in message, message
    assert message.startswith(f"cannot read audio from {str(path)!r}: ")


def test_error_causes(media, tmp_path):
    def cause(path):
        with pytest.raises(AudioError) as info:
            probe(path) if path.suffix != ".flac" else load_audio(path)
        return info.value

    assert "No such file or directory" in str(cause(tmp_path / "missing.mp3"))
    assert isinstance(cause(tmp_path / "missing.mp3").__cause__, FileNotFoundError)
    assert "empty" in str(cause(media["empty.mp3"]))
    # ffmpeg's own words, which differ by version (5.1's ffprobe tries to read MP3 frames)
    assert re.search("Invalid data found|Failed to read frame size", str(cause(media["text.mp3"])))
    assert "no audio stream" in str(cause(media["noaudio.mp4"]))
    assert "truncated" in str(cause(media["trunc.flac"]))


def test_truncated_file_still_yields_what_it_has_before_failing(media):
    got = []
    with pytest.raises(AudioError, match="truncated"):
        for offset, samples in iter_audio(media["trunc.mp3"], chunk_seconds=1.0):
            got.append((offset, samples.size))
    assert len(got) >= 3 and got[0] == (0, SAMPLE_RATE)


def test_a_damaged_frame_ffmpeg_conceals_is_a_warning_on_the_stream(tmp_path):
    """ffmpeg's errors on a file it still decodes in full: a count and the first message,
    once the stream has been read to its end; a clean file has none."""
    damaged = damaged_flac(tmp_path / "damaged.flac")
    stream = iter_audio(damaged, chunk_seconds=0.5)
    chunks = []
    for _, samples in stream:
        assert stream.warnings == ()  # known at the end only
        chunks.append(samples)
    assert 1.0 < sum(c.size for c in chunks) / SAMPLE_RATE < 1.6
    (warning,) = stream.warnings
    match = re.fullmatch(r"ffmpeg reported (\d+) error messages? while decoding, the first: (.+)", warning)
    assert match and int(match.group(1)) >= 1 and "@ 0x" not in match.group(2), warning
    clean = iter_audio(PRESS_YARD)
    assert list(clean) and clean.warnings == ()


def test_bad_arguments_and_files_raise_at_the_call(media):
    with pytest.raises(ValueError):
        iter_audio(JFK, chunk_seconds=0)
    with pytest.raises(ValueError):
        iter_audio(JFK, start=-1)
    with pytest.raises(AudioError):
        iter_audio(media["noaudio.mp4"])


def _ffmpeg_started(seconds: float = 5.0) -> bool:
    """Whether a child of this process is ffmpeg, waiting for its exec: a child just forked still
    shows this interpreter's command line (on a loaded machine, for a while: the full suite saw
    it, and the stream that failed here unclosed left its ffmpeg to fail the tests after)."""
    deadline = time.monotonic() + seconds
    while not any(_is_ffmpeg(c) for c in _children()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _children() -> list[str]:
    """The command lines of this process's children, zombies included (Linux /proc)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid():
            out.append(cmdline.decode(errors="replace") or stat)
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_closing_the_generator_early_leaves_no_ffmpeg_behind():
    # A long input so that ffmpeg is surely still running (blocked on a full pipe) at close.
    gen = iter_audio(audio_path("ljspeech_LJ001-0001_0032_concat.flac"), chunk_seconds=1.0)
    offset, samples = next(gen)
    assert offset == 0 and samples.size == SAMPLE_RATE
    assert _ffmpeg_started()
    gen.close()
    assert [c for c in _children() if _is_ffmpeg(c)] == []  # (the reads' reader child may be there: transcriber/deadline/bounded.py)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_a_stream_closed_or_dropped_unread_leaves_no_ffmpeg_behind():
    # From the start, ffmpeg begins decoding while the file is probed: before any chunk is read.
    stream = iter_audio(audio_path("ljspeech_LJ001-0001_0032_concat.flac"), chunk_seconds=1.0)
    try:
        assert _ffmpeg_started()
    finally:
        stream.close()
    assert [c for c in _children() if _is_ffmpeg(c)] == []
    stream = iter_audio(audio_path("ljspeech_LJ001-0001_0032_concat.flac"), chunk_seconds=1.0)
    del stream
    assert [c for c in _children() if _is_ffmpeg(c)] == []


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_a_file_the_probe_refuses_leaves_no_ffmpeg_behind(media):
    with pytest.raises(AudioError, match="no audio stream"):
        iter_audio(media["noaudio.mp4"])
    assert [c for c in _children() if _is_ffmpeg(c)] == []


def _is_ffmpeg(cmdline: str) -> bool:
    """A command line of ffmpeg's (not one that only names a path holding the word)."""
    return os.path.basename(cmdline.split("\0")[0]).startswith("ffmpeg")


def test_ffprobe_json_parsing():
    info = audio._parse_ffprobe_json("x.mkv", """{
        "streams": [{"codec_type": "video", "disposition": {"attached_pic": 0}},
                    {"codec_type": "audio"}],
        "format": {"duration": "12.5"}}""")
    assert info.duration == 12.5 and info.has_video
    info = audio._parse_ffprobe_json("x.mp3", """{
        "streams": [{"codec_type": "audio", "duration": "3.0"},
                    {"codec_type": "video", "disposition": {"attached_pic": 1}}],
        "format": {"duration": "N/A"}}""")
    assert info.duration == 3.0 and not info.has_video and not info.seeks_exactly
    info = audio._parse_ffprobe_json("x.flac", """{
        "streams": [{"codec_type": "audio", "codec_name": "flac", "sample_rate": "16000"}],
        "format": {"duration": "3.0"}}""")
    assert info.seeks_exactly  # FLAC at 16 kHz: a seek is sample-exact, not decoded from the start
    info = audio._parse_ffprobe_json("x.wav", """{
        "streams": [{"codec_type": "audio", "codec_name": "pcm_s16le", "sample_rate": "44100"}]}""")
    assert not info.seeks_exactly  # resampled: the resampler's history would be cut
    with pytest.raises(AudioError, match="no audio stream"):
        audio._parse_ffprobe_json("x.mp4", '{"streams": [{"codec_type": "video"}]}')
