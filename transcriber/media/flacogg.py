"""A FLAC stream, as it is written, re-wrapped frame by frame in Ogg pages for ffmpeg.

ffmpeg reads a raw FLAC stream through its FLAC parser, which finds the frames in the bytes and
gives one out only once it has found the headers of the 10 after it: 0.7-1 s of audio (frames of
1152 samples at 16 kHz, 4608 at 48 kHz) that a followed recording's words would wait for. In
Ogg each frame is a packet of its own, decoded as soon as its page is read.

    ogg = FlacToOgg()
    out = ogg.feed(flac_bytes)   # the file's bytes, in pieces of any size; b"" until a page is whole
    out = ogg.end()              # at the end of the file: its last frame

The frames are the file's own bytes, so the samples decoded are the same. A frame ends where the
next one starts: a sync code whose header checks (its CRC-8), before which the frame's CRC-16
checks; so one frame (72-96 ms) is held until the next is written, and the last one is given
out at the end only if it is whole. ``passing``: the bytes are
not a FLAC stream that starts with "fLaC" (an ID3 tag before it...): the caller gives them to
ffmpeg as they are. Ogg's FLAC mapping: https://xiph.org/flac/ogg_mapping.html.
"""

from __future__ import annotations

import struct
from typing import Optional

SERIAL = 0x464C4143  # the one logical stream's number: any will do
STREAMINFO, VORBIS_COMMENT, LAST = 0, 4, 0x80  # metadata block types; the last block's flag


def _table(poly: int, width: int) -> list[int]:
    """The byte-at-a-time table of an MSB-first CRC of ``width`` bits (FLAC's and Ogg's)."""
    top, mask = 1 << (width - 1), (1 << width) - 1
    table = []
    for byte in range(256):
        crc = byte << (width - 8)
        for _ in range(8):
            crc = ((crc << 1) ^ poly if crc & top else crc << 1) & mask
        table.append(crc)
    return table


_TABLES = {8: _table(0x07, 8), 16: _table(0x8005, 16), 32: _table(0x04C11DB7, 32)}


def crc(data: bytes, width: int) -> int:
    """FLAC's CRC-8 (header) or CRC-16 (frame), or Ogg's CRC-32 (page): initial value 0, no
    reflection, no final xor."""
    table, shift, mask, value = _TABLES[width], width - 8, (1 << width) - 1, 0
    for b in data:
        value = ((value << 8) & mask) ^ table[(value >> shift) ^ b]
    return value


def frame_samples(data: bytes, at: int = 0) -> Optional[int]:
    """The samples of the FLAC frame whose header starts at ``at``; None if no valid header
    (sync code, reserved bits, CRC-8) starts there, or not all of it is in ``data`` yet."""
    if len(data) < at + 6 or data[at] != 0xFF or data[at + 1] & 0xFE != 0xF8 or data[at + 3] & 1:
        return None
    size_code, rate_code = data[at + 2] >> 4, data[at + 2] & 0xF
    ones = 8 - (~data[at + 4] & 0xFF).bit_length()  # the frame number, UTF-8 coded: its length
    if size_code == 0 or rate_code == 0xF or ones in (1, 8):
        return None
    pos = at + 4 + max(ones, 1)  # after the number: the block size's, then the rate's extra bytes
    extra = {6: 1, 7: 2}.get(size_code, 0) + {12: 1, 13: 2, 14: 2}.get(rate_code, 0)
    if len(data) < pos + extra + 1 or crc(data[at:pos + extra], 8) != data[pos + extra]:
        return None
    if size_code == 1:
        return 192
    if size_code <= 5:
        return 576 << (size_code - 2)
    if size_code == 6:
        return data[pos] + 1
    if size_code == 7:
        return (data[pos] << 8 | data[pos + 1]) + 1
    return 256 << (size_code - 8)


class FlacToOgg:
    """See the module docstring."""

    def __init__(self):
        self.buffer = b""  # bytes not given out yet
        self.passing = False  # not FLAC: the bytes pass as they are
        self.started = False  # the header pages are out
        self.scan = 2  # where the search for the next frame's start goes on
        self.sequence = 0  # the next page's number
        self.granule = 0  # samples given out so far

    def feed(self, data: bytes) -> bytes:
        if self.passing:
            return data
        self.buffer += data
        if not self.started:
            if len(self.buffer) >= 4 and self.buffer[:4] != b"fLaC":
                self.passing = True
                data, self.buffer = self.buffer, b""
                return data
            return self._headers() + (self._frames() if self.started else b"")
        return self._frames()

    def end(self) -> bytes:
        """What is left: the last frame, on the last page, if it is whole (its CRC-16 checks);
        before the header pages (a file cut short in its metadata), the bytes as they are. A
        frame cut short (a recorder killed mid-write, a file given up on while a frame was
        half written) is left out: ffmpeg would only report it damaged ("invalid residual")."""
        if not self.started or not self.buffer:
            data, self.buffer = self.buffer, b""
            return data
        if crc(self.buffer, 16) != 0:
            self.buffer = b""
            return b""
        samples = frame_samples(self.buffer) or 0
        self.granule += samples
        packet, self.buffer = self.buffer, b""
        return self._pages(packet, self.granule, last=True)

    def _headers(self) -> bytes:
        """The two header pages, once the metadata blocks are all here: STREAMINFO in the first
        packet, the VORBIS_COMMENT block (an empty one if the file has none) in the second; the
        other blocks (padding, seek table, pictures) are not needed to decode."""
        pos, blocks = 4, {}
        while True:
            if len(self.buffer) < pos + 4:
                return b""
            kind, size = self.buffer[pos], int.from_bytes(self.buffer[pos + 1:pos + 4], "big")
            if len(self.buffer) < pos + 4 + size:
                return b""
            blocks.setdefault(kind & 0x7F, self.buffer[pos + 4:pos + 4 + size])
            pos += 4 + size
            if kind & LAST:
                break
        if STREAMINFO not in blocks:
            self.passing = True  # not a FLAC stream this can read: ffmpeg will say what it is
            data, self.buffer = self.buffer, b""
            return data
        self.buffer, self.started = self.buffer[pos:], True
        info = blocks[STREAMINFO]
        comment = blocks.get(VORBIS_COMMENT, struct.pack("<II", 0, 0))  # vendor "", no comments
        first = b"\x7fFLAC\x01\x00" + struct.pack(">H", 1) + b"fLaC" + bytes([STREAMINFO]) \
            + len(info).to_bytes(3, "big") + info
        second = bytes([LAST | VORBIS_COMMENT]) + len(comment).to_bytes(3, "big") + comment
        return self._pages(first, 0, first=True) + self._pages(second, 0)

    def _frames(self) -> bytes:
        """A page for each frame whose end is known: the next frame's start is here."""
        out = b""
        while (samples := frame_samples(self.buffer)) is not None:
            end = self._next_frame()
            if end is None:
                break
            self.granule += samples
            out += self._pages(self.buffer[:end], self.granule)
            self.buffer, self.scan = self.buffer[end:], 2
        return out

    def _next_frame(self) -> Optional[int]:
        """Where the frame at the buffer's start ends, if the next frame's header is here."""
        at = self.buffer.find(b"\xff", self.scan)
        while at != -1:
            if len(self.buffer) < at + 16:  # a header is at most 16 bytes: look again with more
                self.scan = at
                return None
            if frame_samples(self.buffer, at) is not None and crc(self.buffer[:at], 16) == 0:
                return at
            at = self.buffer.find(b"\xff", at + 1)
        self.scan = max(2, len(self.buffer) - 1)
        return None

    def _pages(self, packet: bytes, granule: int, first: bool = False, last: bool = False) -> bytes:
        """``packet`` on pages of at most 255 segments of 255 bytes (more than one only for a
        packet of over 64 KiB); the page that ends it carries ``granule``."""
        out, at = b"", 0
        while True:
            chunk = packet[at:at + 255 * 255]
            ends = at + len(chunk) == len(packet) and len(chunk) < 255 * 255  # else a 0 segment follows
            lacing = [255] * (len(chunk) // 255) + ([len(chunk) % 255] if ends else [])
            kind = (2 if first and at == 0 else 0) | (1 if at else 0) | (4 if last and ends else 0)
            head = struct.pack("<4sBBqIIIB", b"OggS", 0, kind, granule if ends else -1, SERIAL, self.sequence, 0,
                               len(lacing)) + bytes(lacing)
            checksum = crc(head + chunk, 32)
            out += head[:22] + struct.pack("<I", checksum) + head[26:] + chunk
            self.sequence += 1
            at += len(chunk)
            if ends:
                return out
