"""``transcriber.media.flacogg``: a FLAC stream re-wrapped in Ogg as it is written (follow's FLAC feed).
Real ffmpeg decodes both; the samples must be the same."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from tests.conftest import JFK
from transcriber.media.ffmpegtool import ffmpeg_binary
from transcriber.media.flacogg import FlacToOgg, crc, frame_samples

pytestmark = pytest.mark.usefixtures("any_ffmpeg")  # imageio-ffmpeg's and the PATH's (tests/conftest.py)


def decode(data: bytes, fmt: str) -> bytes:
    """ffmpeg's 16 kHz mono float32 of ``data`` (a stream of format ``fmt``), through a pipe."""
    r = subprocess.run([ffmpeg_binary(), "-v", "error", "-f", fmt, "-i", "pipe:0", "-f", "f32le", "-ac", "1", "-ar", "16000",
                        "pipe:1"], input=data, capture_output=True, check=True)
    assert not r.stderr, r.stderr
    return r.stdout


def in_pieces(data: bytes, seed: int = 0) -> bytes:
    """``data`` through a FlacToOgg in pieces of 1-3000 bytes, then its end."""
    feed, out, at = FlacToOgg(), [], 0
    for size in np.random.default_rng(seed).integers(1, 3000, size=len(data)):
        out.append(feed.feed(data[at:at + size]))
        at += size
        if at >= len(data):
            break
    return b"".join(out) + feed.end()


@pytest.mark.parametrize("args", [[], ["-ar", "44100", "-ac", "2"], ["-ar", "48000", "-sample_fmt", "s32"],
                                  ["-ar", "8000", "-frame_size", "4096"], ["-ar", "22050", "-compression_level", "0"]],
                         ids=["16k", "44k-stereo", "48k-24bit", "8k-4096", "22k-level0"])
def test_the_ogg_decodes_to_the_samples_of_the_flac(tmp_path, args):
    path = tmp_path / "x.flac"
    subprocess.run([ffmpeg_binary(), "-v", "error", "-i", JFK, *args, path], check=True)
    flac = path.read_bytes()
    ogg = in_pieces(flac)
    assert ogg[:4] == b"OggS"
    assert decode(ogg, "ogg") == decode(flac, "flac")


def test_a_frame_is_given_out_when_the_next_one_starts(tmp_path):
    """One frame is held back, not ffmpeg's ten: fed up to the start of frame k + 1, the pages
    hold frames 0..k-1 and k."""
    path = tmp_path / "x.flac"
    subprocess.run([ffmpeg_binary(), "-v", "error", "-i", JFK, path], check=True)
    flac = path.read_bytes()
    starts = [i for i in range(len(flac) - 16) if frame_samples(flac, i) is not None]
    feed = FlacToOgg()
    out = feed.feed(flac[:starts[5] + 16])  # frame 5's header whole: frames 0-4 are out
    assert feed.granule == sum(frame_samples(flac, i) for i in starts[:5])
    assert out.count(b"OggS") == 2 + 5  # two header pages, a page a frame
    assert feed.feed(b"") == b""


def test_a_last_frame_written_only_in_part_is_left_out(tmp_path):
    """The file given up on while its last frame is half written: the frames before it decode
    without an error message (the half frame was fed to ffmpeg: "invalid residual")."""
    path = tmp_path / "x.flac"
    subprocess.run([ffmpeg_binary(), "-v", "error", "-i", JFK, path], check=True)
    flac = path.read_bytes()
    starts = [i for i in range(len(flac) - 16) if frame_samples(flac, i) is not None]
    cut = (starts[20] + starts[21]) // 2  # frame 20 half written
    ogg = in_pieces(flac[:cut])
    assert decode(ogg, "ogg") == decode(flac[:starts[20]], "flac")
    whole = in_pieces(flac[:starts[21]])  # frame 20 whole (its CRC-16 checks): given out at the end
    assert decode(whole, "ogg") == decode(flac[:starts[21]], "flac")


def test_bytes_that_are_not_flac_pass_as_they_are():
    feed = FlacToOgg()
    data = b"ID3\x04\x00" + bytes(100)
    assert feed.feed(data[:2]) == b"" and feed.feed(data[2:]) == data and feed.passing
    assert feed.feed(b"more") == b"more"


def test_the_crcs_are_flac_and_ogg_s(tmp_path):
    """The check values of CRC-8/SMBUS (FLAC's header) and CRC-16/UMTS (FLAC's frame); the CRC of
    a page of an Ogg file ffmpeg wrote (computed with its own field zero)."""
    assert crc(b"123456789", 8) == 0xF4
    assert crc(b"123456789", 16) == 0xFEE8
    path = tmp_path / "x.ogg"
    subprocess.run([ffmpeg_binary(), "-v", "error", "-i", JFK, "-c:a", "flac", path], check=True)
    data = path.read_bytes()
    size = 27 + data[26] + sum(data[27:27 + data[26]])  # the first page: header, lacing, body
    page = data[:22] + bytes(4) + data[26:size]
    assert crc(page, 32) == int.from_bytes(data[22:26], "little")
