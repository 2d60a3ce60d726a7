"""PCM samples, as a growing WAV gives them, framed in Matroska for ffmpeg: each write a block.

ffmpeg's WAV (and raw PCM) demuxer reads packets of a fixed size and gives one out only once it
is full: the end of each write waits for the next one, and with it the chunk that ends there.
Its ``-max_size`` option makes packets small, but ffmpeg 5.x refuses below 1024 bytes, which
held back the last 256 bytes of every 1 s write of 16 kHz mono (1 s late). In Matroska each
block is a packet of its own size, decoded as soon as it is read, whatever the version.

    mkv = PcmToMatroska(rate=16000, channels=1, bits=32)   # float32 samples, interleaved
    out = mkv.header()          # once, first
    out = mkv.feed(samples)     # the next samples' bytes: one cluster of one block (b"": none)

The samples are the same bytes, so ffmpeg decodes the same samples (pcm_f32le, pcm_f64le).
A block's timestamp is its first sample's time in nanoseconds: in milliseconds (Matroska's
usual unit), blocks of less than 1 ms shared one, and ffmpeg 5 said so, "non monotonically
increasing dts", though the samples came out whole. Matroska: https://www.matroska.org/technical/elements.html.
"""

from __future__ import annotations

import struct

UNKNOWN = b"\x01\xff\xff\xff\xff\xff\xff\xff"  # an element's size: unknown (runs to the end)


def _size(n: int) -> bytes:
    """An element's size, EBML-coded in 8 bytes."""
    return bytes([0x01]) + n.to_bytes(7, "big")


def _element(element_id: int, payload: bytes) -> bytes:
    return element_id.to_bytes((element_id.bit_length() + 7) // 8, "big") + _size(len(payload)) + payload


def _uint(element_id: int, value: int) -> bytes:
    return _element(element_id, value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big"))


class PcmToMatroska:
    """See the module docstring. ``bits``: 32 or 64, IEEE float samples, little-endian."""

    def __init__(self, rate: int, channels: int, bits: int = 32):
        self.rate, self.channels, self.bits = rate, channels, bits
        self.frame = channels * bits // 8  # bytes of one sample of every channel
        self.samples = 0  # per channel, given out so far

    def header(self) -> bytes:
        ebml = _element(0x1A45DFA3, _uint(0x4286, 1) + _uint(0x42F7, 1) + _uint(0x42F2, 4) + _uint(0x42F3, 8)
                        + _element(0x4282, b"matroska") + _uint(0x4287, 4) + _uint(0x4285, 2))
        info = _element(0x1549A966, _uint(0x2AD7B1, 1) + _element(0x4D80, b"transcriber")
                        + _element(0x5741, b"transcriber"))
        audio = _element(0xE1, _element(0xB5, struct.pack(">d", self.rate)) + _uint(0x9F, self.channels)
                         + _uint(0x6264, self.bits))
        track = _element(0xAE, _uint(0xD7, 1) + _uint(0x73C5, 1) + _uint(0x83, 2)
                         + _element(0x86, b"A_PCM/FLOAT/IEEE") + audio)
        return ebml + bytes.fromhex("18538067") + UNKNOWN + info + _element(0x1654AE6B, track)

    def feed(self, data: bytes) -> bytes:
        """A cluster holding ``data`` (whole samples of every channel) as one block."""
        if not data:
            return b""
        assert len(data) % self.frame == 0, "whole samples of every channel only"
        at = self.samples * 1_000_000_000 // self.rate
        self.samples += len(data) // self.frame
        block = _element(0xA3, b"\x81" + struct.pack(">hB", 0, 0x80) + data)
        return _element(0x1F43B675, _uint(0xE7, at) + block)
