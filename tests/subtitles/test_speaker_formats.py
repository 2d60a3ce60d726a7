"""Speaker labels downstream of the words: ``label_speakers`` (turns onto words, hand-made
turns), the cues that break where the speaker changes (or share a cue with dialogue dashes), and
every format written with speakers and read back by a real reader: the ``srt`` library, pysubs2
(ASS), Chromium's own WebVTT parser (voice spans), ``json``, and the RTTM reader of the shared
DER scorer. Without speakers every output stays as it was (checked against the same transcript
labelled by no turn)."""

from __future__ import annotations

import functools
import http.server
import json
import os
import random
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pysubs2
import pytest
import srt

from transcriber.errors import OutputError
from transcriber.subtitles.cues import DASH, CueOptions, name_prefix, transcript_cues
from transcriber.subtitles.files import write_outputs
from transcriber.subtitles.formats import FORMATS, OutputOptions, write_rttm
from transcriber.subtitles.formats.rttm import TURN_GAP, speaker_turns
from transcriber.transcript.transforms import label_speakers
from transcriber.transcript.types import Segment, Transcript, Word

ROOT = Path(__file__).resolve().parents[2]
DER = ROOT.parent / "shared" / "tools" / "der.py"

DIALOGUE = ("Hello there, how are you doing this fine morning? I'm fine, thanks. And you? "
            "Never better, my friend, never better. Good to hear & see <you> again, truly. Yes. No. "
            "Shall we start the meeting now, or wait for the others to arrive first? Let's wait.")


def _words(text: str, start: float = 0.0, step: float = 0.4, length: float = 0.3) -> list[Word]:
    """A word every ``step`` seconds, longer silences after sentence ends."""
    words, t = [], start
    for token in text.split():
        words.append(Word(t, t + length, " " + token, 0.9))
        t += step + (0.3 if token.endswith((".", "?")) else 0.0)
    return words


def _transcript(words: list[Word], per_segment: int = 12) -> Transcript:
    segments = tuple(Segment(ws[0].start, ws[-1].end, "".join(w.text for w in ws), tuple(ws))
                     for ws in (words[k:k + per_segment] for k in range(0, len(words), per_segment)))
    return Transcript("en", words[-1].end + 1.0, segments, model="tiny.en")


def _turns_by_sentence(words: list[Word], labels=("spk_b", "spk_a", "spk_c")) -> list[tuple[float, float, str]]:
    """A turn per sentence, the speakers taking turns (with a short, unspoken exchange kept)."""
    turns, first, n = [], 0, 0
    for k, w in enumerate(words):
        if w.text.rstrip().endswith((".", "?")) or k == len(words) - 1:
            turns.append((words[first].start - 0.05, w.end + 0.05, labels[n % len(labels)]))
            first, n = k + 1, n + 1
    return turns


@pytest.fixture
def labelled() -> Transcript:
    words = _words(DIALOGUE)
    return label_speakers(_transcript(words), _turns_by_sentence(words))


# --- label_speakers -----------------------------------------------------------------------

def test_a_word_takes_the_turn_over_most_of_it_then_the_nearest_within_a_second():
    words = [Word(0.0, 1.0, " a", 1.0), Word(1.0, 2.0, " b", 1.0), Word(2.0, 2.2, " c", 1.0),
             Word(3.0, 3.1, " d", 1.0), Word(5.0, 5.5, " e", 1.0), Word(9.0, 9.0, " f", 1.0)]
    turns = [(0.0, 1.4, "x"), (0.6, 3.0, "y"),  # overlapping: a is x's (0.6 vs 0.4), b is y's
             (4.2, 4.5, "z"),                   # e is 0.5 s after z: within reach
             (8.0, 10.0, "x")]                  # f, of no length, lies inside x
    out = label_speakers(_transcript(words, per_segment=10), turns)
    # c: only y overlaps; d touches y's end (no overlap, distance 0); first speech: x, then y, then z
    assert [w.speaker for w in out.words] == ["Speaker 1", "Speaker 2", "Speaker 2", "Speaker 2", "Speaker 3",
                                              "Speaker 1"]
    far = label_speakers(_transcript([Word(0.0, 0.5, " hi", 1.0), Word(3.0, 3.5, " there", 1.0)]), [(0.0, 1.9, "x")])
    assert [w.speaker for w in far.words] == ["Speaker 1", None]  # 1.1 s from the turn: unlabelled


def test_labels_are_numbered_in_order_of_first_speech_and_segments_split_where_the_speaker_changes():
    words = _words("one two three four five six")
    t = _transcript(words, per_segment=6)
    out = label_speakers(t, [(1.0, 3.0, "B"), (-1.0, 1.0, "A"), (2.0, 2.1, "C")])  # A speaks first
    assert [w.speaker for w in out.words] == ["Speaker 1", "Speaker 1", "Speaker 1", "Speaker 2", "Speaker 2",
                                              "Speaker 2"]
    assert [(s.speaker, s.text) for s in out.segments] == [("Speaker 1", " one two three"),
                                                           ("Speaker 2", " four five six")]
    first, second = out.segments
    assert (first.start, first.end, second.start, second.end) == (words[0].start, words[2].end, words[3].start,
                                                                  words[5].end)
    assert first.avg_logprob == t.segments[0].avg_logprob and out.text == t.text
    # stable: the same turns (any order) give the same names; renamed raw labels too
    again = label_speakers(t, [(2.0, 2.1, "c"), (1.0, 3.0, "b"), (-1.0, 1.0, "a")])
    assert again == out
    assert label_speakers(out, [(1.0, 3.0, "B"), (-1.0, 1.0, "A")]) == out  # labelling again: the same
    # a segment without words takes the turn over most of it
    empty = Transcript("en", 5.0, (Segment(0.0, 2.0, ""),))
    assert label_speakers(empty, [(0.5, 2.5, 7)]).segments[0].speaker == "Speaker 1"


def test_no_turns_leave_the_transcript_as_it_is(labelled):
    words = _words(DIALOGUE)
    plain = _transcript(words)
    assert label_speakers(plain, []) == plain
    assert all(s.speaker is None for s in plain.segments)


# --- JSON and checkpoints -----------------------------------------------------------------

def test_json_says_the_speaker_of_every_word_and_segment_only_when_there_is_one(labelled):
    data = json.loads(FORMATS["json"].render(labelled, OutputOptions(json_cues=True)))
    assert all(s["speaker"].startswith("Speaker ") for s in data["segments"])
    assert all(w["speaker"] == s["speaker"] for s in data["segments"] for w in s["words"])
    assert list(data["segments"][0])[-2:] == ["speaker", "words"]
    back = Transcript.from_dict(data)
    assert [(s.speaker, [w.speaker for w in s.words]) for s in back.segments] == \
        [(s.speaker, [w.speaker for w in s.words]) for s in labelled.segments]
    assert all(w["speaker"] for cue in data["cues"] for w in cue["words"])
    plain = json.loads(FORMATS["json"].render(_transcript(_words(DIALOGUE)), OutputOptions()))
    assert "speaker" not in json.dumps(plain)


def test_a_checkpoint_keeps_the_speakers(labelled):
    from transcriber.app.store.sqlite_store import segments_from_json, segments_to_json

    assert tuple(segments_from_json(segments_to_json(labelled.segments))) == labelled.segments
    old = json.loads(segments_to_json(labelled.segments))  # a checkpoint stored before speakers
    for seg in old:
        del seg["speaker"]
        for w in seg["words"]:
            del w["speaker"]
    assert all(s.speaker is None for s in segments_from_json(json.dumps(old)))


# --- cues ---------------------------------------------------------------------------------

def _random_labelled(seed: int) -> Transcript:
    rng = random.Random(seed)
    vocab = "the meeting starts now and we will see what happens next, okay? yes. no. maybe later!".split()
    words, t = [], 0.0
    for _ in range(rng.randint(5, 80)):
        length = rng.uniform(0.1, 0.6)
        words.append(Word(t, t + length, " " + rng.choice(vocab), 0.9))
        t += length + rng.choice([0.0, 0.05, 0.2, 0.8])
    turns, at = [], 0.0
    while at < t:
        length = rng.uniform(0.3, 6.0)
        turns.append((at, at + length, rng.choice("abc")))
        at += length
    return label_speakers(_transcript(words, per_segment=rng.randint(1, 20)), turns)


@pytest.mark.parametrize("seed", range(40))
def test_a_cue_has_one_speaker_and_its_name_fits_its_first_line(seed):
    t = _random_labelled(seed)
    options = CueOptions(max_line_chars=rng_width(seed))
    cues = transcript_cues(t, options)
    assert [w for c in cues for w in c.words] == t.words
    previous = None
    for cue in cues:
        spoken = {w.speaker for w in cue.words if w.text.strip()}
        assert len(spoken) == 1 and cue.speakers == (cue.speaker,) * len(cue.lines) and cue.speaker in spoken
        assert cue.named == (cue.speaker != previous)  # a name exactly where the speaker changes
        shown = [name_prefix(cue.speaker) + cue.lines[0], *cue.lines[1:]] if cue.named else list(cue.lines)
        assert all(len(line) <= options.max_line_chars or " " not in line.split(": ", 1)[-1] for line in shown)
        previous = cue.speaker


def rng_width(seed: int) -> int:
    return (30, 42, 60)[seed % 3]


@pytest.mark.parametrize("seed", range(40))
def test_dialogue_dashes_put_at_most_two_speakers_in_a_cue_a_line_each(seed):
    t = _random_labelled(seed)
    options = CueOptions(dialogue_dashes=True, max_line_chars=rng_width(seed))
    cues = transcript_cues(t, options)
    assert [w for c in cues for w in c.words] == t.words
    for cue in cues:
        spoken = [w.speaker for w in cue.words if w.text.strip()]
        changes = sum(a != b for a, b in zip(spoken, spoken[1:]))
        assert not cue.named and changes <= 1 and cue.dialogue == (changes == 1)
        if cue.dialogue:
            assert len(cue.lines) == 2 and cue.speakers == (spoken[0], spoken[-1])
            assert all(len(DASH + line) <= options.max_line_chars or " " not in line for line in cue.lines)


def test_a_short_exchange_shares_a_cue_only_with_dialogue_dashes(labelled):
    exchange = [c for c in transcript_cues(labelled, CueOptions(dialogue_dashes=True)) if c.dialogue]
    assert any(c.lines == ("Yes.", "No.") for c in exchange)
    assert not any(c.dialogue for c in transcript_cues(labelled))


# --- every format, read back --------------------------------------------------------------

def test_srt_names_the_speaker_where_it_changes_as_the_srt_library_reads_it(labelled):
    cues = transcript_cues(labelled)
    subtitles = list(srt.parse(FORMATS["srt"].render(labelled, OutputOptions())))
    assert len(subtitles) == len(cues)
    previous = None
    for subtitle, cue in zip(subtitles, cues):
        named = subtitle.content.startswith(name_prefix(cue.speaker))
        assert named == (cue.speaker != previous)
        assert (subtitle.content[len(name_prefix(cue.speaker)):] if named else subtitle.content) == cue.text
        assert all(len(line) <= 42 for line in subtitle.content.splitlines())
        previous = cue.speaker
    assert subtitles[0].content.startswith("Speaker 1: Hello there")
    highlighted = list(srt.parse(FORMATS["srt"].render(labelled, OutputOptions(highlight_words=True))))
    assert sum(s.content.startswith("Speaker ") for s in highlighted) > len(cues) / 2  # every piece of a named cue
    dashed = list(srt.parse(FORMATS["srt"].render(labelled, OutputOptions(cues=CueOptions(dialogue_dashes=True)))))
    assert any(s.content == "- Yes.\n- No." for s in dashed)
    assert not any("Speaker" in s.content for s in dashed)


def test_ass_puts_the_speaker_in_the_name_field_as_pysubs2_reads_it(labelled):
    cues = [c for c in transcript_cues(labelled) if c.text]
    events = [e for e in pysubs2.SSAFile.from_string(FORMATS["ass"].render(labelled, OutputOptions()))
              if not e.is_comment]
    assert [e.name for e in events] == [c.speaker for c in cues]
    assert [e.plaintext for e in events] == [c.text for c in cues]
    karaoke = pysubs2.SSAFile.from_string(FORMATS["ass"].render(labelled, OutputOptions(highlight_words=True)))
    assert [e.name for e in karaoke] == [c.speaker for c in cues]
    dashed = pysubs2.SSAFile.from_string(
        FORMATS["ass"].render(labelled, OutputOptions(cues=CueOptions(dialogue_dashes=True))))
    both = [e for e in dashed if "&" in e.name and e.plaintext == "- Yes.\n- No."]
    assert len(both) == 1 and both[0].name.count("Speaker") == 2


def test_txt_and_tsv_say_the_speaker(labelled):
    lines = FORMATS["txt"].render(labelled, OutputOptions()).splitlines()
    segments = labelled.segments
    assert len(lines) == len(segments)
    for k, (line, seg) in enumerate(zip(lines, segments)):
        named = k == 0 or segments[k - 1].speaker != seg.speaker
        assert line == (name_prefix(seg.speaker) if named else "") + seg.text.strip()
    rows = [row.split("\t") for row in FORMATS["tsv"].render(labelled, OutputOptions()).splitlines()]
    assert rows[0] == ["start", "end", "text", "speaker"]
    assert [row[3] for row in rows[1:]] == [s.speaker for s in segments]
    assert [row[2] for row in rows[1:]] == [s.text.strip() for s in segments]


def _read_rttm(text: str) -> dict[str, list[tuple[float, float]]]:
    """The shared scorer's reader (shared/tools/der.py ``read``): fields 3, 4 and 7."""
    turns: dict[str, list[tuple[float, float]]] = {}
    for line in text.splitlines():
        p = line.split()
        if len(p) < 8 or p[0] != "SPEAKER":
            continue
        turns.setdefault(p[7], []).append((float(p[3]), float(p[3]) + float(p[4])))
    return turns


def test_rttm_writes_a_line_per_turn_of_consecutive_words(labelled, tmp_path):
    text = write_rttm(labelled, "talk one")
    lines = text.splitlines()
    assert all(len(line.split()) == 10 and line.startswith("SPEAKER talk_one 1 ") for line in lines)
    assert all(line.split()[5:7] == ["<NA>", "<NA>"] and line.split()[8:] == ["<NA>", "<NA>"] for line in lines)
    read = _read_rttm(text)
    assert set(read) == {"Speaker_1", "Speaker_2", "Speaker_3"}
    turns = speaker_turns(labelled)
    assert sorted((round(s, 3), round(e, 3)) for spans in read.values() for s, e in spans) == \
        sorted((round(s, 3), round(e, 3)) for s, e, _ in turns)
    words = labelled.words  # every word inside one turn of its speaker, and turns of one speaker apart
    for w in words:
        assert any(s - 1e-6 <= w.start and w.end <= e + 1e-6 for s, e in read[w.speaker.replace(" ", "_")])
    for a, b in zip(turns, turns[1:]):
        assert a[2] != b[2] or b[0] - a[1] >= TURN_GAP
    stem = tmp_path / "talk"
    written = write_outputs(labelled, stem, ["rttm"])
    assert written == [tmp_path / "talk.rttm"] and written[0].read_text().startswith("SPEAKER talk 1 ")


def test_rttm_refuses_a_transcript_without_speakers_and_names_the_fix(tmp_path):
    plain = _transcript(_words(DIALOGUE))
    with pytest.raises(OutputError, match="--speakers") as caught:
        write_outputs(plain, tmp_path / "talk", ["srt", "rttm"])
    assert len(str(caught.value).splitlines()) == 1 and not list(tmp_path.iterdir())
    assert write_rttm(Transcript("en", 3.0)) == ""  # no speech: no turn
    assert "rttm" not in [name for name, f in FORMATS.items() if f.http or f.subtitle]


@pytest.mark.skipif(not DER.is_file(), reason="shared/tools/der.py not found")
def test_rttm_scores_against_an_ami_reference_with_the_shared_scorer(data_dir, tmp_path):
    """Words tiled over an AMI excerpt's reference turns, labelled by those turns, written as
    RTTM: the shared scorer finds the same speakers and little error (what is left: overlapped
    speech, which one label per word cannot carry, and the 0.2 s between words)."""
    reference = data_dir / "alignments" / "ami_pyannote_debug_dev00.rttm"
    ref_turns = [(float(p[3]), float(p[3]) + float(p[4]), p[7])
                 for p in (line.split() for line in reference.read_text().splitlines()) if p and p[0] == "SPEAKER"]
    words, t = [], 0.0
    end = max(e for _, e, _ in ref_turns)
    while t < end:
        if any(s <= t + 0.15 <= e for s, e, _ in ref_turns):
            words.append(Word(t, t + 0.3, " word", 0.9))
        t += 0.3
    labelled = label_speakers(_transcript(words), ref_turns)
    hypothesis = tmp_path / "hyp.rttm"
    hypothesis.write_text(write_rttm(labelled, "ami_pyannote_debug_dev00"))
    out = subprocess.run([sys.executable, str(DER), str(reference), str(hypothesis)], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    der = float(out.split()[1])
    speakers = {p[7] for p in (line.split() for line in reference.read_text().splitlines()) if p}
    assert f"ref speakers {len(speakers)}, hyp speakers {len(speakers)}" in out and der < 0.15, out


def _chromium() -> bool:
    return any(Path(p, "chromium").exists() for p in os.environ.get("PATH", "").split(os.pathsep))


PAGE = """<!doctype html><html><body><pre id="cues"></pre><script>
const video = document.createElement("video"), track = document.createElement("track");
track.kind = "subtitles"; track.default = true; track.srclang = "en"; track.src = "subs.vtt";
track.addEventListener("load", () => {  // Chromium's own WebVTT parser read the file
  const cues = Array.from(track.track.cues).map((cue) => {
    const html = cue.getCueAsHTML();
    const voices = Array.from(html.querySelectorAll("span[title]")).map((s) => s.title);
    return {voices: voices, text: html.textContent, raw: cue.text};
  });
  const out = document.getElementById("cues");
  out.textContent = JSON.stringify(cues); out.dataset.done = "1";
});
video.appendChild(track); document.body.appendChild(video); track.track.mode = "hidden";
</script></body></html>"""


@pytest.mark.skipif(not _chromium(), reason="Debian's chromium is not installed (apt-get install chromium)")
def test_vtt_voices_as_chromium_reads_them(labelled, tmp_path):
    for name, options in (("prefix", OutputOptions()), ("dashes", OutputOptions(cues=CueOptions(dialogue_dashes=True)))):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "index.html").write_text(PAGE)
        (folder / "subs.vtt").write_text(FORMATS["vtt"].render(labelled, options))
        shown = _chromium_cues(folder)
        cues = [c for c in transcript_cues(labelled, options.cues) if c.text]
        assert len(shown) == len(cues)
        for got, cue in zip(shown, cues):
            assert got["voices"] == list(cue.speakers if cue.dialogue else [cue.speaker])
            lines = [DASH + line for line in cue.lines] if cue.dialogue else list(cue.lines)
            assert got["text"] == "\n".join(lines)  # & < > read back as written
    assert any("&" in got["text"] and "<you>" in got["text"] for got in shown)
    assert any(len(set(got["voices"])) == 2 for got in shown)
    # a name of any text (set by hand, not label_speakers) is escaped as the spec's annotation
    odd = replace(labelled, segments=tuple(replace(s, words=tuple(replace(w, speaker="Tom & <Jerry>") for w in s.words))
                                           for s in labelled.segments))
    folder = tmp_path / "escaped"
    folder.mkdir()
    (folder / "index.html").write_text(PAGE)
    (folder / "subs.vtt").write_text(FORMATS["vtt"].render(odd, OutputOptions()))
    assert {voice for got in _chromium_cues(folder) for voice in got["voices"]} == {"Tom & <Jerry>"}


def _chromium_cues(folder: Path) -> list[dict]:
    """The cues Chromium's parser reads from ``folder``/subs.vtt, the page served over HTTP."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--mute-audio",
                              "--virtual-time-budget=10000", "--dump-dom",
                              f"http://127.0.0.1:{server.server_address[1]}/index.html"],
                             capture_output=True, text=True, timeout=120).stdout
    finally:
        server.shutdown()
        server.server_close()
    assert 'data-done="1"' in dom, dom[:2000]
    shown = dom.split('<pre id="cues"', 1)[1].split(">", 1)[1].split("</pre>", 1)[0]
    return json.loads(shown.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&"))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


# --- nothing changes without speakers -----------------------------------------------------

@pytest.mark.parametrize("options", [OutputOptions(), OutputOptions(vtt_karaoke=True, highlight_words=True, json_cues=True),
                                     OutputOptions(cues=CueOptions(dialogue_dashes=True, max_lines=1))])
def test_without_speakers_every_output_is_as_before(options):
    """The same words with speakers taken off render as the transcript that never had them;
    and a transcript with them differs only by them (the words, their cue times alike)."""
    words = _words(DIALOGUE)
    plain = _transcript(words)
    stripped = replace(plain, segments=tuple(replace(s, speaker=None, words=tuple(replace(w, speaker=None)
                                                                                  for w in s.words))
                                             for s in label_speakers(plain, []).segments))
    for name, fmt in FORMATS.items():
        if name != "rttm":
            assert fmt.render(stripped, options) == fmt.render(plain, options)
    assert "<v " not in FORMATS["vtt"].render(plain, options) and ",Default,," in FORMATS["ass"].render(plain, options)
