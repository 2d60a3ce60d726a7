"""Subtitles written into a copy of the video: one file to share, for players that ignore sidecars.

``embed(video, srt_text, language)`` muxes the subtitles into ``NAME.subtitled.EXT`` beside the
video (``in_place=True``: into the video itself), every stream of the original copied as it is
(no re-encode), the new track tagged with its language (ISO 639-2, as containers want it):

- Matroska (.mkv) and WebM (.webm): an SRT track (WebM takes WebVTT only);
- MP4 (.mp4, .m4v) and QuickTime (.mov): a mov_text track, the one subtitle codec they carry.

Nothing half-made is ever left under the target's name: ffmpeg writes a temporary file beside it
(named as ``files.write_atomic`` names its temporaries, so the sweep of a later run removes one
a kill left behind), which is verified before it replaces the target in one rename: its streams
are the original's plus one subtitle stream with the language tag (ffprobe's list where ffprobe is
on PATH, else ffmpeg's own), and the track read back from it holds every cue written. The
original is never touched unless ``in_place`` (and then only by that rename).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import srt

from transcriber.media.ffmpegtool import ffmpeg_binary, ffprobe_binary
from transcriber.errors import OutputError
from transcriber.subtitles.files import temp_prefix

# extension -> (ffmpeg's muxer, the subtitle codec that container carries)
CONTAINERS = {".mkv": ("matroska", "srt"), ".webm": ("webm", "webvtt"), ".mp4": ("mp4", "mov_text"),
              ".m4v": ("mp4", "mov_text"), ".mov": ("mov", "mov_text")}
SUFFIX = ".subtitled"  # the copy of NAME.EXT is NAME.subtitled.EXT
TIMEOUT_S = 3600.0  # a stream copy of a large video is bounded by the disk, not the CPU

# Whisper's language codes -> ISO 639-2/B, the tags Matroska and MP4 expect
ISO639_2 = dict(item.split(":") for item in (
    "en:eng zh:chi de:ger es:spa ru:rus ko:kor fr:fre ja:jpn pt:por tr:tur pl:pol ca:cat nl:dut ar:ara "
    "sv:swe it:ita id:ind hi:hin fi:fin vi:vie he:heb uk:ukr el:gre ms:may cs:cze ro:rum da:dan hu:hun "
    "ta:tam no:nor th:tha ur:urd hr:hrv bg:bul lt:lit la:lat mi:mao ml:mal cy:wel sk:slo te:tel fa:per "
    "lv:lav bn:ben sr:srp az:aze sl:slv kn:kan et:est mk:mac br:bre eu:baq is:ice hy:arm ne:nep mn:mon "
    "bs:bos kk:kaz sq:alb sw:swa gl:glg mr:mar pa:pan si:sin km:khm sn:sna yo:yor so:som af:afr oc:oci "
    "ka:geo be:bel tg:tgk sd:snd gu:guj am:amh yi:yid lo:lao uz:uzb fo:fao ht:hat ps:pus tk:tuk nn:nno "
    "mt:mlt sa:san lb:ltz my:bur bo:tib tl:tgl mg:mlg as:asm tt:tat haw:haw ln:lin ha:hau ba:bak jw:jav "
    "su:sun yue:chi").split())


class EmbedError(OutputError):
    """The subtitles could not be written into a copy of the video."""


@dataclass(frozen=True)
class Stream:
    kind: str  # video, audio, subtitle, data, attachment
    language: str  # the stream's language tag, "" when it has none


def embedded_path(video: Path) -> Path:
    """Where the copy of the video with its subtitles goes by default: ``NAME.subtitled.EXT``."""
    video = Path(video)
    return video.with_name(f"{video.stem}{SUFFIX}{video.suffix}")


def container(video: Path) -> tuple[str, str]:
    """(muxer, subtitle codec) for the video's extension; EmbedError for one we cannot write."""
    found = CONTAINERS.get(Path(video).suffix.lower())
    if found is None:
        known = ", ".join(sorted(CONTAINERS))
        raise EmbedError(f"cannot embed subtitles in {video}: not a container that carries them ({known})")
    return found


def language_tag(language: str) -> str:
    """The ISO 639-2 tag of a Whisper language code ("und" for one we do not know)."""
    return ISO639_2.get((language or "").lower(), "und")


def has_track(video: Path, language: str) -> bool:
    """Whether the video holds a subtitle stream tagged with ``language`` (ISO 639-2 or Whisper's)."""
    tags = {language, language_tag(language)}
    return any(s.kind == "subtitle" and s.language in tags for s in streams(video))


def embed(video: Path, srt_text: str, language: str, *, in_place: bool = False,
          target: Optional[Path] = None) -> Path:
    """Write ``srt_text`` as a subtitle track into a copy of ``video`` (``target``, by default
    ``embedded_path``) or into ``video`` itself; returns the path written. Raises EmbedError
    naming the file and the cause."""
    video = Path(video)
    muxer, codec = container(video)
    target = video if in_place else Path(target or embedded_path(video))
    before = streams(video)
    cues = len(list(srt.parse(srt_text)))
    tag = language_tag(language)
    with tempfile.TemporaryDirectory(prefix=temp_prefix(video.name)) as scratch:
        subtitles = Path(scratch) / "subtitles.srt"
        subtitles.write_text(srt_text, encoding="utf-8")
        temp = _temporary(target)
        try:
            _mux(video, subtitles, temp, muxer, codec, sum(s.kind == "subtitle" for s in before), tag)
            _verify(temp, before, Stream("subtitle", tag), cues, video)
            os.replace(temp, target)
        finally:
            temp.unlink(missing_ok=True)
    return target


def _temporary(target: Path) -> Path:
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=temp_prefix(target.name), suffix=".part")
    os.close(fd)
    return Path(name)


def _mux(video: Path, subtitles: Path, out: Path, muxer: str, codec: str, index: int, tag: str) -> None:
    """All of the video's streams, stream-copied, plus the subtitles as subtitle stream ``index``."""
    _run([ffmpeg_binary(), "-nostdin", "-v", "error", "-y", "-i", str(video), "-i", str(subtitles),
          "-map", "0", "-map", "1", "-c", "copy", f"-c:s:{index}", codec,
          f"-metadata:s:s:{index}", f"language={tag}", "-f", muxer, str(out)], video)


def _verify(made: Path, before: list[Stream], added: Stream, cues: int, video: Path) -> None:
    """The made file holds the original's streams and the new track, with every cue."""
    after = streams(made)
    if after != [*before, added]:
        raise EmbedError(f"cannot embed subtitles in {video}: the copy's streams are {_kinds(after)}, "
                         f"not {_kinds([*before, added])}")
    index = sum(s.kind == "subtitle" for s in before)
    text = _run([ffmpeg_binary(), "-nostdin", "-v", "error", "-i", str(made), "-map", f"0:s:{index}",
                 "-f", "srt", "-"], video)
    read_back = len(list(srt.parse(text)))
    if read_back != cues:
        raise EmbedError(f"cannot embed subtitles in {video}: the copy's track holds {read_back} cues, "
                         f"not {cues}")


def _kinds(found: list[Stream]) -> str:
    return ", ".join(f"{s.kind}({s.language})" if s.language else s.kind for s in found) or "none"


_FFMPEG_STREAM = re.compile(r"^\s*Stream #0:\d+(?:\[0x[0-9a-f]+\])?(?:\((\w+)\))?: (\w+)", re.MULTILINE)


def streams(path: Path) -> list[Stream]:
    """The file's streams in order: their kind and language tag (ffprobe if on PATH, else ffmpeg)."""
    probe = ffprobe_binary()
    if probe:
        out = _run([probe, "-v", "error", "-show_entries", "stream=codec_type:stream_tags=language",
                    "-of", "json", str(path)], path)
        return [Stream(s.get("codec_type", ""), s.get("tags", {}).get("language", ""))
                for s in json.loads(out).get("streams", [])]
    proc = subprocess.run([ffmpeg_binary(), "-nostdin", "-hide_banner", "-i", str(path)],
                          capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S)
    return [Stream(kind.lower(), lang or "") for lang, kind in _FFMPEG_STREAM.findall(proc.stderr)]


def _run(cmd: list[str], subject: Path) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise EmbedError(f"cannot embed subtitles in {subject}: {Path(cmd[0]).name} ran over {TIMEOUT_S:.0f} s") from e
    except OSError as e:
        raise EmbedError(f"cannot embed subtitles in {subject}: {Path(cmd[0]).name}: {e.strerror}") from e
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        raise EmbedError(f"cannot embed subtitles in {subject}: {lines[-1] if lines else f'exit {proc.returncode}'}")
    return proc.stdout
