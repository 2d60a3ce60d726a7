"""What ffprobe (or, without it, ``ffmpeg -i``) says about a media file: its duration, its
audio tracks, whether a seek into them is sample-exact, and where each starts on the media's
timeline. ``transcriber.media.audio`` decides from it how to decode the file."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from typing import Union

from transcriber.media import ffmpegtool
from transcriber.constants import SAMPLE_RATE
from transcriber.errors import AudioError

@dataclass(frozen=True)
class _MediaInfo:
    duration: float  # seconds; 0.0 when the file does not say
    duration_estimated: bool  # guessed from the bitrate, not read from a header
    has_video: bool  # a real video stream (cover art does not count)
    seeks_exactly: bool = False  # seeking gives the samples of a decode from the start (see _exact)
    tracks: tuple["_Track", ...] = ()  # the audio streams, in order
    track: int = 0  # the audio stream decoded (index into tracks; ffmpeg's a:N)

    @property
    def offset(self) -> float:
        """Where the decoded track's first sample lies on the media's timeline (s)."""
        return self.tracks[self.track].start if self.tracks else 0.0


@dataclass(frozen=True)
class _Track:
    language: str  # the stream's language tag ("eng", "ger"...), "" when it has none
    exact: bool  # seeks exactly (see _exact)
    # its first packet's time past the container's start (s): a player shows it then, and ffmpeg's
    # raw PCM drops it (a video whose audio starts 4 s late: 4.0; an audio file: 0.0)
    start: float = 0.0


def _select(name: str, info: _MediaInfo, track: Union[int, str, None]) -> _MediaInfo:
    """``info`` for the audio track asked for: its number (1 = the first) or the first with that
    language tag; AudioError naming the file's tracks when it has no such one."""
    if track is None:
        return info
    tags = [t.language.lower() for t in info.tracks]
    index = track - 1 if isinstance(track, int) else tags.index(track.lower()) if track.lower() in tags else -1
    if not 0 <= index < len(info.tracks):
        listed = ", ".join(f"{i} ({t.language or 'no language tag'})" for i, t in enumerate(info.tracks, 1))
        wanted = f"audio track {track}" if isinstance(track, int) else f"audio track tagged {track!r}"
        raise AudioError(ffmpegtool.message(name, f"no {wanted}: its audio tracks are {listed}"))
    # The duration read is the container's (its longest stream): another track may be shorter
    # without being cut, so the truncation rule cannot apply to it (as for an estimated one).
    return replace(info, track=index, seeks_exactly=info.tracks[index].exact,
                   duration_estimated=info.duration_estimated or len(info.tracks) > 1)


# Audio whose seek is sample-exact: every sample is coded on its own (PCM) or in frames that
# decode independently (FLAC), at our rate so that no resampler history is cut either.
# Measured (ffmpeg 9.0, a 221.7 s reading, seeks to 60/100/100.02/140/180 s): WAV and FLAC at
# 16 kHz identical to the decode from the start; the same FLAC at 44.1 kHz stereo differs by
# up to 8e-3 (the resampler), MP3 by up to 0.67 and Opus by up to 0.62 (decoder warm-up, the
# bit reservoir), AAC in M4A is 512 samples late (its priming is not dropped after a seek).
_EXACT_CODECS = ("flac",)
_EXACT_CODEC_PREFIX = "pcm_"


def _exact(codec: str, sample_rate: int) -> bool:
    return (codec in _EXACT_CODECS or codec.startswith(_EXACT_CODEC_PREFIX)) and sample_rate == SAMPLE_RATE


def _probe_ffprobe(name: str) -> _MediaInfo:
    cmd = [ffmpegtool.ffprobe_binary(), "-v", "error", "-show_entries",
           "format=format_name,duration,start_time:stream=codec_type,codec_name,sample_rate,duration,start_time"
           ":stream_disposition=attached_pic:stream_tags=language",
           "-of", "json", ffmpegtool.input_path(name)]
    proc = ffmpegtool.run_probe(cmd, name)
    if proc.returncode != 0:
        ffmpegtool.check_started(cmd[0], proc.returncode, proc.stderr)
        cause = ffmpegtool.reason(proc.stderr, name) or "not a media file ffprobe can read"
        raise AudioError(ffmpegtool.message(name, cause))
    return _parse_ffprobe_json(name, proc.stdout, lambda index: _first_packet(name, index))


def _first_packet(name: str, index: int) -> float | None:
    """The time of audio track ``index``'s first packet (s), read from the packets themselves;
    None when ffprobe gives none."""
    cmd = [ffmpegtool.ffprobe_binary(), "-v", "error", "-select_streams", f"a:{index}", "-show_entries",
           "packet=pts_time", "-read_intervals", "%+#1", "-of", "csv=p=0", ffmpegtool.input_path(name)]
    proc = ffmpegtool.run_probe(cmd, name)
    lines = proc.stdout.split() if proc.returncode == 0 else []
    return _seconds(lines[0].split(",")[0]) if lines else None


def _parse_ffprobe_json(name: str, text: str, first_packet=None) -> _MediaInfo:
    """``first_packet(index)``: an audio track's first packet time, asked for files with video.
    The streams' start_time comes from the packets ffprobe's probe reads (the file's first
    seconds): an audio track that starts later than those (an MKV whose audio begins 20 s in,
    measured with ffprobe 5.1) is given 0 there, so it is read from its own first packet."""
    info = json.loads(text or "{}")
    streams = info.get("streams", [])
    audio = [s for s in streams if s.get("codec_type") == "audio"]
    if not audio:
        raise AudioError(ffmpegtool.message(name, "no audio stream"))
    has_video = any(s.get("codec_type") == "video"
                    and not s.get("disposition", {}).get("attached_pic") for s in streams)
    rate = audio[0].get("sample_rate", "")
    exact = _exact(str(audio[0].get("codec_name", "")), int(rate) if str(rate).isdigit() else 0)
    origin = _seconds(info.get("format", {}).get("start_time")) or 0.0
    starts = [_seconds(a.get("start_time")) for a in audio]
    if has_video and first_packet is not None:
        starts = [first if (first := first_packet(i)) is not None else start for i, start in enumerate(starts)]
    tracks = tuple(_Track(str(a.get("tags", {}).get("language", "")), _exact(
        str(a.get("codec_name", "")), int(a["sample_rate"]) if str(a.get("sample_rate", "")).isdigit() else 0),
        max(0.0, round((start or origin) - origin, 6))) for a, start in zip(audio, starts))
    # A Matroska stream often has no duration of its own: fall back to the container's, which counts from
    # the container's start, not from the audio's (``duration`` is the decoded track's).
    duration = _seconds(audio[0].get("duration"))
    if duration is not None and "matroska" in info.get("format", {}).get("format_name", ""):
        # a Matroska stream's duration is its DURATION tag: where the stream ends on the timeline
        duration = max(0.0, duration - tracks[0].start)
    if duration is None:
        duration = max(0.0, (_seconds(info.get("format", {}).get("duration")) or 0.0) - tracks[0].start)
    return _MediaInfo(duration, False, has_video, exact, tracks)


def _seconds(value) -> float | None:
    """ffprobe's number of seconds, None when it gives none ("N/A", absent, not finite)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if math.isfinite(seconds) else None


_DURATION_RE = re.compile(r"^\s*Duration: (?:(\d+):(\d+):(\d+(?:\.\d+)?)|N/A)", re.M)
# "  Stream #0:1(ger): Audio: flac, ..." (the language tag, when there is one, in parentheses)
_STREAM_RE = re.compile(r"^\s*Stream #\d+:\d+(?:\[\w+\])?(?:\((\w+)\))?.*?: (Audio|Video): (.*)$", re.M)
_CODEC_RE = re.compile(r"^(\w+)(?:.*?, (\d+) Hz)?")  # "flac, 16000 Hz, mono, s16" / "pcm_s16le (...)"


def _probe_ffmpeg(name: str) -> _MediaInfo:
    # `ffmpeg -i file` with no output always exits 1; the file's description is on stderr.
    proc = ffmpegtool.run_probe([ffmpegtool.ffmpeg_binary(), "-nostdin", "-hide_banner", "-i", ffmpegtool.input_path(name)], name)
    text = proc.stderr
    duration = _DURATION_RE.search(text)
    if "Input #0" not in text or not duration:
        cause = ffmpegtool.reason(text, name) or "not a media file ffmpeg can read"
        raise AudioError(ffmpegtool.message(name, cause))
    streams = [(m.group(2), m.group(3), m.group(1) or "") for m in _STREAM_RE.finditer(text)]
    audio = [(rest, language) for kind, rest, language in streams if kind == "Audio"]
    if not audio:
        raise AudioError(ffmpegtool.message(name, "no audio stream"))
    has_video = any(kind == "Video" and "(attached pic)" not in rest for kind, rest, _ in streams)
    tracks = tuple(_Track("" if language == "und" else language, _codec_exact(rest)) for rest, language in audio)
    seconds = 0.0
    if duration.group(1) is not None:
        h, m, s = duration.groups()
        seconds = int(h) * 3600 + int(m) * 60 + float(s)
    estimated = "Estimating duration from bitrate" in text
    return _MediaInfo(seconds, estimated, has_video, tracks[0].exact, tracks)


def _codec_exact(description: str) -> bool:
    codec = _CODEC_RE.match(description)
    return bool(codec) and _exact(codec.group(1), int(codec.group(2) or 0))


