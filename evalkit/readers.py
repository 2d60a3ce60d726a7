"""Recordings with known speakers built from the data's long readings, for the speaker pass.

An ``ls_testother_*`` long_en file joins the utterances of two LibriSpeech chapters (two
readers), each utterance's start and end in its ``.segments.json`` (ids ``speaker-chapter-n``:
the reader is the id's first field). ``alternating`` cuts the pieces out and interleaves the
two readers A, B, A, B... with 0.5 s of silence between pieces; the reference turns are the
pieces' own spans (a piece keeps LibriSpeech's short silences at its ends: score with a
collar). ``one_reader`` joins one reader's pieces the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
GAP_S = 0.5


def pieces(data_dir: Path, name: str, samples: np.ndarray) -> dict[str, list[np.ndarray]]:
    """Reader -> that reader's utterances (sample arrays) of ``audio/long_en/<name>.flac``."""
    segments = json.loads((Path(data_dir) / "alignments" / f"{name}.segments.json").read_text())["segments"]
    readers: dict[str, list[np.ndarray]] = {}
    for seg in segments:
        a, b = int(round(seg["start"] * SAMPLE_RATE)), int(round(seg["end"] * SAMPLE_RATE))
        readers.setdefault(seg["id"].split("-")[0], []).append(samples[a:b])
    return readers


def join(sequence: list[tuple[str, np.ndarray]], repeat: int = 1) -> tuple[np.ndarray, list]:
    """Pieces joined with GAP_S of silence (the whole sequence ``repeat`` times): the samples
    and the (start, end, reader) turns."""
    gap = np.zeros(int(GAP_S * SAMPLE_RATE), np.float32)
    parts, turns, at = [], [], 0
    for _ in range(repeat):
        for reader, piece in sequence:
            if parts:
                parts.append(gap)
                at += len(gap)
            turns.append((at / SAMPLE_RATE, (at + len(piece)) / SAMPLE_RATE, reader))
            parts.append(piece.astype(np.float32))
            at += len(piece)
    return np.concatenate(parts), turns


def alternating(readers: dict[str, list[np.ndarray]], repeat: int = 1) -> tuple[np.ndarray, list]:
    """Two readers' pieces interleaved A, B, A, B... (as many pairs as the shorter has)."""
    (a, first), (b, second) = list(readers.items())[:2]
    sequence = [item for pair in zip(first, second) for item in ((a, pair[0]), (b, pair[1]))]
    return join(sequence, repeat)


def one_reader(readers: dict[str, list[np.ndarray]]) -> tuple[np.ndarray, list]:
    """The first reader's pieces only."""
    reader, own = next(iter(readers.items()))
    return join([(reader, piece) for piece in own])
