"""Every decoding mode gives the same words with the native kernels as on MLX's own ops.

A small version of bench/kernels/precision.py (which runs the whole dev set): three of the dev set's
short_en recordings and examples/jfk.flac, one-shot greedy, beam search, streaming and files
side by side (--batch-files), kernels on (bf16 decoder weights, as installed) against
TRANSCRIBER_KERNELS=off: the same words as the WER counts them (after evalkit.scoring.normalize;
beam search may pick another comma between near-equal beams: "belly" / "belly," seen), and the
same words with their punctuation in greedy modes. Skipped where the kernels were not built.
"""

from __future__ import annotations

import pytest

import transcriber
from tests.conftest import JFK, require_data, scored_entries
from transcriber import native
from evalkit.scoring import normalize
from transcriber.native import loader

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (loader.record() or {}).get("paths"), reason="native kernels not built here")]


@pytest.fixture(scope="module")
def files():
    short = [e for e in scored_entries(("short_en",))][:3]
    return [require_data() / e["file"] for e in short] + [JFK]


def _words(model, files, mode: str) -> list[list[str]]:
    if mode == "greedy":
        return [[w.text for w in transcriber.transcribe(f, model).words] for f in files]
    if mode == "beam":
        return [[w.text for w in transcriber.transcribe(f, model, beam_size=5).words] for f in files]
    if mode == "stream":
        return [[w.text for w in transcriber.stream(f, model)] for f in files]
    batch, got = transcriber.OneShotEngine(model).side_by_side(len(files)), {f: [] for f in files}
    for f in files:
        batch.add(f, f)
    for key, event in batch.events():
        assert not isinstance(event, Exception), event
        if event is not None:
            got[key] += [w.text for w in event.words]
    return [got[f] for f in files]


@pytest.mark.parametrize("mode", ["greedy", "beam", "stream", "batch"])
def test_kernels_on_and_off_give_the_same_words(model, files, monkeypatch, mode):
    native.reset()
    assert native.status().path is not None, native.status().line()
    on = _words(model, files, mode)
    monkeypatch.setenv(loader.ENV, "off")
    native.reset()
    try:
        assert native.ops() is None
        off = _words(model, files, mode)
    finally:
        monkeypatch.delenv(loader.ENV)
        native.reset()
    assert [normalize("".join(w)) for w in on] == [normalize("".join(w)) for w in off]
    assert all(on)
    if mode != "beam":
        assert on == off
