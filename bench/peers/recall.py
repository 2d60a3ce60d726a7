"""Issue 48's evaluation: is any speech lost, any word written over non-speech, any word late?

    bench/setup_peers.sh && .venv/bin/python -m bench.kernels ggml-convert --model base   # once
    .venv/bin/python -m bench.peers recall --json before.json > before.md   # full: tiny.en and base
    .venv/bin/python -m bench.peers recall --quick                    # a subset (see --quick)
    .venv/bin/python -m bench.peers recall --compare before.json after.json # the verdict of a change
    .venv/bin/python -m bench.peers recall --ours ../other-checkout --json after.json  # another checkout's code
    .venv/bin/python -m bench.peers recall --json all.json --merge base.json    # runs split over processes

``--ours CHECKOUT`` runs CHECKOUT's own interpreter and worker (CHECKOUT/.venv/bin/python
CHECKOUT/bench/_worker_ours.py, so its transcriber is the one measured); the peers, the stress
sets and the scoring stay this checkout's. ``--json`` is written after every system, and
``--resume`` skips the systems a JSON already holds (a long run cut short goes on).

Files: every ``long_en`` recording of ``$TRANSCRIBER_TEST_DATA`` (else ../shared/data) with an
exact or exact-ish reference, every ``no_speech`` one, the three LibriVox files with forced word
alignments, and stress sets built at run time (``evalkit.recall``): sparse dialogue (short lines
alone after 15-45 s of digital silence or white noise at -60/-50 dBFS), jfk.flac repeated 2-8 times,
short lines after 5-60 s of leading silence, jfk.flac with its audio delayed 1-20 s in MKV and
MP4 (``ffmpeg -itsoffset``). Systems, each in its own interpreter (bench/_worker_*.py), greedy:
ours one-shot and streaming (1 s chunks), faster-whisper int8 (the same weights) and
whisper.cpp (the same weights in ggml, the wheel's defaults; its word times are its segments'
spread by characters, so it has no word-start figures).

One table per model x mode, ours beside the peers:
- pooled WER over the long_en files (and the per-file table per model);
- lost pieces: ``../shared/tools/lost.py``'s rule (a piece of a segments file with under 30% of
  its reference words, by word middles) over the long_en segments files;
- words over non-speech: every word written on a no_speech file (those over ``SUNG``, a song
  with its lyrics, counted apart);
- sparse: lines kept (lost.py's rule per line) and words outside every line;
- repeated: reference words kept over all repetitions (edit alignment, deletions only);
- leading: lines kept once (no word outside the line, no more words than it says) at their time
  (first word within 0.3 s);
- delayed: the worst |first word start - delay| (the stream's start on the media timeline);
- word starts, held out: the split is by piece (each segments file's pieces alternately A and
  B, in file order) and by file for the forced alignments (sorted, alternately A and B: 0880 and
  0930 in A, 0890 in B). A piece's reference is its first word's start: the voice onset inside
  the piece (``evalkit.recall.voice_onset``). The fitted shift is minus the median signed error
  on A; B's median/p90 are printed as measured and with A's shift applied.

``--compare`` prints, per model x mode, before -> after, and the rule of issue 48: a decoding
change is taken when, on the after run, 0 pieces are lost, 0 words over non-speech, and pooled
WER is no worse than before by more than 0.2 point in any row.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # bench/: the workers, .venvs
sys.path.insert(0, str(BENCH.parent))
from bench.peers.compare_faster_whisper import OURS_PY, PEER_PY, load_manifest, run_worker  # noqa: E402
from evalkit import recall as rc  # noqa: E402
from evalkit.scoring import aligned_starts, normalize, word_errors  # noqa: E402

WCPP_PY = BENCH / ".venvs" / "whispercpp" / "bin" / "python"
DATA = Path(os.environ.get("TRANSCRIBER_TEST_DATA") or BENCH.parent.parent / "shared" / "data")
MODES = {"oneshot": "ours one-shot", "stream": "ours streaming"}
FW, WCPP = "faster-whisper int8", "whisper.cpp"
ALIGNED = ["audio/short_en/librivox_sas01_0880.flac", "audio/short_en/librivox_sas01_0890.flac",
           "audio/short_en/librivox_sas01_0930.flac"]
# short lines of the stress sets (1.5-3.3 s, exact references), and the long speech repeated/delayed
LINES = ["ljspeech_LJ002-0035", "ls_1089-134691-0000", "ljspeech_LJ002-0020", "ls_61-70968-0002",
         "librivox_sas01_0880", "sr_one_two_three", "ls_1089-134686-0001", "librivox_sas01_0930"]
SPEECH = "jfk"
FULL = {"sparse_gaps": [15, 25, 35, 45, 20, 30, 40, 15], "sparse_levels": [None, -60.0, -50.0],
        "repeats": [2, 3, 5, 8], "leading": [5, 7, 15, 30, 60], "delays": [1, 4, 20]}
QUICK = {"sparse_gaps": [15, 30, 45, 20], "sparse_levels": [None, -50.0],
         "repeats": [2, 3], "leading": [5, 30], "delays": [4]}
IN_PLACE = 0.3  # s: a line's first word this close to its start is in place (issue 48's bound)
# no_speech files that hold singing: ReadAlongs' "noise" is a pop song with its lyrics sung (both
# faster-whisper and ours write them). Words there are counted apart and kept out of the verdict.
SUNG = {"noise_readalongs_a.flac"}


def short_lines(data: Path) -> dict[str, tuple]:
    from transcriber.media.audio import load_audio

    rows = {Path(e["file"]).stem: e for e in load_manifest(data, ["short_en"])}
    return {n: (load_audio(data / rows[n]["file"]), rows[n]["text"]) for n in LINES + [SPEECH]}


def build_stress(data: Path, plan: dict, folder: Path, ffmpeg: str) -> list[dict]:
    """Write every stress recording; manifest-like entries with their pieces."""
    lines = short_lines(data)
    speech, text = lines[SPEECH]
    sets = [rc.build_sparse([lines[n] for n in LINES[:len(plan["sparse_gaps"])]], plan["sparse_gaps"],
                            plan["sparse_levels"])]
    sets += [rc.build_repeated(speech, text, k) for k in plan["repeats"]]
    sets += [rc.build_leading(*lines[LINES[i % 2 * 3]], s) for i, s in enumerate(plan["leading"])]
    sets += [rc.build_delayed(speech, text, d, c) for d in plan["delays"] for c in ("mkv", "mp4")]
    out = []
    for s in sets:
        path = rc.write_stress(s, folder, ffmpeg)
        out.append({"file": path, "path": path, "kind": s.kind, "name": s.name, "delay": s.delay, "duration_s": s.duration,
                    "pieces": [[p.start, p.end, p.text] for p in s.pieces]})
    return out


def files_of(data: Path, quick: bool) -> list[dict]:
    entries = load_manifest(data, ["long_en"])
    if quick:
        entries = [e for e in entries if e["duration_s"] < 200]
    rows = {e["file"]: e for e in (json.loads(x) for x in (data / "manifest.jsonl").read_text().splitlines() if x)}
    out = [{**e, "kind": "long"} for e in entries]
    out += [{**e, "kind": "nospeech"} for e in rows.values() if e["subset"] == "no_speech"]
    out += [{**rows[f], "kind": "aligned"} for f in ALIGNED]
    for e in out:
        e["path"] = str(data / e["file"])
    return out


def systems(args, model: str, folder: Path, ffmpeg: str) -> list[tuple[str, Path, str, dict]]:
    ours_py, ours_worker = OURS_PY, "_worker_ours.py"
    if args.ours:
        ours_py, ours_worker = args.ours / ".venv" / "bin" / "python", str(args.ours / "bench" / "_worker_ours.py")
    found = [(MODES[m] + (" --vad" if args.vad else ""), ours_py, ours_worker, {"mode": m, "vad": args.vad})
             for m in args.modes]
    if not args.no_peers:
        fw = {"compute_type": "int8"}
        if model != "tiny.en":
            from bench.peers.multilingual import base_ct2_folder  # the peer's default folder is tiny.en's

            (folder / model).mkdir(exist_ok=True)
            fw["model_dir"] = str(base_ct2_folder(folder / model))
        found.append((FW, PEER_PY, "_worker_peer.py", fw))
        ggml = BENCH / ".venvs" / f"ggml-{model}.bin"
        if ggml.exists():
            # one thread: ggml's workers spin at their barriers, and on a shared 2-core machine
            # two of them took 10x faster-whisper's time (its text does not depend on threads)
            found.append((WCPP, WCPP_PY, "_worker_whispercpp.py",
                          {"model_path": str(ggml), "ffmpeg": ffmpeg, "threads": 1}))
        else:
            print(f"{ggml} is missing (python -m bench.kernels ggml-convert --model {model}): no whisper.cpp row", file=sys.stderr)
    return found


def run_all(args, files: list[dict], folder: Path, ffmpeg: str, saved: dict) -> dict:
    runs = saved.setdefault("runs", {})
    for model in args.models:
        for name, python, worker, fields in systems(args, model, folder, ffmpeg) if args.modes or not args.no_peers else []:
            if name in runs.get(model, {}):
                print(f"  {model} {name}: kept from {args.json}", file=sys.stderr)
                continue
            job = {"files": [f["path"] for f in files], "threads": args.threads, "word_timestamps": True,
                   "warmup": False, "model": model, "compute_type": None, "detail": True, "words": True,
                   **fields}
            t0 = time.perf_counter()
            res = run_worker(python, worker, job, args.threads, args.timeout)
            wall = time.perf_counter() - t0
            print(f"  {model} {name}: {res.get('error') or f'{wall:.0f} s'}", file=sys.stderr)
            if "error" not in res:
                runs.setdefault(model, {})[name] = {"hyps": res["hyps"], "file_s": res["file_s"],
                                                    "info": res["info"], "wall_s": wall}
                if args.json:
                    args.json.write_text(json.dumps(saved))
    return runs


def words_of(hyp: dict) -> list[tuple[float, float, str]]:
    return [(w[0], w[1], w[2]) for w in hyp.get("words") or []]


def score(files: list[dict], hyps: list[dict], word_times: bool, onsets: dict) -> dict:
    """Every figure of one system on one model (plain JSON)."""
    out = {"wer": {}, "lost": [], "judged": 0, "nonspeech": {}, "sparse": None, "repeated": {},
           "leading": {}, "delayed": {}, "starts": {"A": [], "B": []}, "starts_by_source": {}}
    by_source = lambda src, half: out["starts_by_source"].setdefault(src, {"A": [], "B": []})[half]  # noqa: E731
    aligned_seen = 0
    for f, hyp in zip(files, hyps):
        words, name = words_of(hyp), Path(f["file"]).name
        if f["kind"] == "long":
            out["wer"][name] = list(word_errors(f["text"], hyp["text"]))
            if f.get("segments_file"):
                pieces = rc.pieces_of(json.loads((DATA / f["segments_file"]).read_text()))
                lost, judged = rc.lost_pieces(pieces, words)
                out["lost"] += [f"{name} {p.start:.2f}-{p.end:.2f}: {p.text[:50]}" for p in lost]
                out["judged"] += judged
                if word_times:
                    for i, p in enumerate(pieces):
                        half = "AB"[i % 2]
                        got = rc.first_word_offsets([(onsets[f["file"]][i], p.text)], words)
                        out["starts"][half] += got
                        by_source(Path(f["file"]).stem, half).extend(got)
        elif f["kind"] == "nospeech":
            out["nonspeech"][name] = len(words)
        elif f["kind"] == "aligned":
            if word_times:
                from evalkit.scoring import word_start_offsets

                ref = aligned_starts(DATA / f["word_alignment"])
                got = word_start_offsets(ref, [(w[2], w[0]) for w in words])
                out["starts"]["AB"[aligned_seen % 2]] += got
                by_source("forced alignments", "AB"[aligned_seen % 2]).extend(got)
            aligned_seen += 1
        else:
            pieces = [rc.Piece(*p) for p in f["pieces"]]
            kept = [rc.line_kept(p, words) for p in pieces]
            outside = rc.words_outside(pieces, words)
            first = rc.first_word_offsets([(p.start, p.text) for p in pieces], words, reach=2.0)
            if f["kind"] == "sparse":
                out["sparse"] = {"kept": sum(kept), "lines": len(kept), "outside": outside}
            elif f["kind"] == "repeated":
                out["repeated"][f["name"]] = list(rc.words_kept(" ".join(p.text for p in pieces), hyp["text"]))
            elif f["kind"] == "leading":
                # once: no word away from the line, and no more words than it says ("8. The Press
                # Yard 8." is the line doubled inside its own span)
                once = outside == 0 and len(normalize(hyp["text"]).split()) <= len(normalize(pieces[0].text).split())
                out["leading"][f["name"]] = {"kept": kept[0], "outside": outside, "once": once,
                                             "first": first[0] if first else None}
            else:
                out["delayed"][f["name"]] = words[0][0] - f["delay"] if words else None
    return out


def summary(s: dict) -> dict:
    """The row figures of one system's scores."""
    err = sum(e for e, _ in s["wer"].values())
    n = sum(w for _, w in s["wer"].values())
    rep = [sum(v[0] for v in s["repeated"].values()), sum(v[1] for v in s["repeated"].values())]
    lead = s["leading"].values()
    good_lead = sum(v["kept"] and v.get("once", v["outside"] == 0) and v["first"] is not None and abs(v["first"]) <= IN_PLACE
                    for v in lead)
    delays = [v for v in s["delayed"].values()]
    a, b = s["starts"]["A"], s["starts"]["B"]
    shift = rc.fitted_shift(a)
    return {"wer": 100 * err / max(n, 1), "lost": len(s["lost"]), "judged": s["judged"],
            "nonspeech": sum(n for f, n in s["nonspeech"].items() if f not in SUNG),
            "sung": sum(n for f, n in s["nonspeech"].items() if f in SUNG),
            "sparse": s["sparse"], "repeated": rep, "leading": [good_lead, len(lead)],
            "delayed": None if not delays else (None if None in delays else max(abs(v) for v in delays)),
            "delayed_missing": sum(v is None for v in delays), "delayed_n": len(delays),
            "start_A": [*rc.quantiles(a), len(a)], "start_B": [*rc.quantiles(b), len(b)], "shift_A": shift,
            "start_B_shifted": list(rc.quantiles([x + shift for x in b]))}


def fmt(row: dict, key: str) -> str:
    if row is None:
        return "-"
    v = row[key]
    if key == "wer":
        return f"{v:.2f}"
    if key == "nonspeech":
        return f"{v} (+{row.get('sung', 0)} over sung lyrics)"
    if key == "lost":
        return f"{v} of {row['judged']}"
    if key == "sparse":
        return "-" if v is None else f"{v['kept']}/{v['lines']} lines, {v['outside']} words outside"
    if key == "repeated":
        return f"{100 * v[0] / max(v[1], 1):.1f}% ({v[0]}/{v[1]})"
    if key == "leading":
        return f"{v[0]}/{v[1]}"
    if key == "delayed":
        miss = f", {row['delayed_missing']} empty" if row["delayed_missing"] else ""
        return ("-" if v is None else f"{v:.2f} s") + f" ({row['delayed_n']} files{miss})"
    if key == "start_B":
        if v[2] == 0:
            return "-"
        return (f"{v[0]:.3f} / {v[1]:.3f} ({v[2]} words); A's shift {row['shift_A']:+.3f}: "
                f"{row['start_B_shifted'][0]:.3f} / {row['start_B_shifted'][1]:.3f}")
    return str(v)


ROWS = [("pooled WER % (long_en)", "wer"), ("lost pieces", "lost"), ("words over non-speech", "nonspeech"),
        ("sparse dialogue", "sparse"), ("repeated 2-8x: words kept", "repeated"),
        ("leading silence: once, in place", "leading"), ("delayed audio: worst abs(first word - delay)", "delayed"),
        ("word start B median / p90 (s)", "start_B")]


def print_tables(summaries: dict, files: list[dict], scores: dict) -> None:
    for model, rows in summaries.items():
        for mode in [name for name in rows if name not in (FW, WCPP)]:  # ours, each mode (and --vad)
            cols = [mode] + [p for p in (FW, WCPP) if p in rows]
            print(f"\n### {model}, {mode}\n\n| | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols))
            for label, key in ROWS:
                print(f"| {label} | " + " | ".join(fmt(rows[c], key) for c in cols) + " |")
            for c in cols:
                for line in scores[model][c]["lost"]:
                    print(f"- {c} lost: {line}")
                src = scores[model][c].get("starts_by_source", {})
                if any(v["B"] for v in src.values()):
                    print(f"- {c} word starts on B by source, median / p90 (words): " + "; ".join(
                        "{} {:.3f} / {:.3f} ({})".format(k, *rc.quantiles(v["B"]), len(v["B"]))
                        for k, v in src.items() if v["B"]))
                ns = {f: n for f, n in scores[model][c]["nonspeech"].items() if n}
                if ns:
                    print(f"- {c} words over non-speech: " + ", ".join(f"{f} {n}" for f, n in ns.items()))
        names = list(rows)
        print(f"\n{model}, WER % per long_en file:\n")
        print("| file | s | " + " | ".join(names) + " |\n|---|---:|" + "---:|" * len(names))
        for f in files:
            if f["kind"] == "long":
                n = Path(f["file"]).name
                cells = [100 * scores[model][c]["wer"][n][0] / max(scores[model][c]["wer"][n][1], 1) for c in names]
                print(f"| {n} | {f['duration_s']:.0f} | " + " | ".join(f"{x:.2f}" for x in cells) + " |")


def compare(before: Path, after: Path) -> int:
    """Before -> after per model x mode, and the verdict; exit 1 when a row fails."""
    b, a = json.loads(before.read_text())["summary"], json.loads(after.read_text())["summary"]
    failed = 0
    for model in a:
        for mode in MODES.values():
            if mode not in a[model] or mode not in b.get(model, {}):
                continue
            x, y = b[model][mode], a[model][mode]
            ok = y["lost"] == 0 and y["nonspeech"] == 0 and y["wer"] <= x["wer"] + 0.2
            failed += not ok
            print(f"\n### {model}, {mode}: {'taken' if ok else 'NOT taken'}\n\n| | before | after |\n|---|---|---|")
            for label, key in ROWS:
                print(f"| {label} | {fmt(x, key)} | {fmt(y, key)} |")
    return 1 if failed else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tiny.en,base")
    ap.add_argument("--modes", default="oneshot,stream")
    ap.add_argument("--quick", action="store_true",
                    help="long_en files under 200 s, fewer stress recordings (QUICK)")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--vad", action="store_true", help="ours with --vad (Silero VAD: only speech decoded)")
    ap.add_argument("--ours", type=Path, help="a checkout whose .venv and bench/_worker_ours.py to measure")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=7200)
    ap.add_argument("--json", type=Path, help="write the hypotheses, scores and summary here")
    ap.add_argument("--resume", action="store_true", help="keep the systems --json already holds")
    ap.add_argument("--merge", nargs="+", type=Path, default=[], metavar="JSON",
                    help="add these runs' systems to --json's (runs split over processes), then score")
    ap.add_argument("--score-only", action="store_true", help="decode nothing: score what --json holds")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args()
    if args.compare:
        sys.exit(compare(*args.compare))
    args.models, args.modes = args.models.split(","), args.modes.split(",")
    for need in ([] if args.no_peers else [PEER_PY, WCPP_PY]):
        if not need.exists():
            sys.exit(f"{need} is missing: run bench/setup_peers.sh first")
    from transcriber.media.audio import load_audio
    from transcriber.media.ffmpegtool import ffmpeg_binary
    from transcriber.native.blas.probe import cpu_model

    ffmpeg = shutil.which("ffmpeg") or ffmpeg_binary()
    keep = args.resume or args.score_only or args.merge  # merging into --json keeps what it holds
    saved = json.loads(args.json.read_text()) if keep and args.json.exists() else {}
    for other in args.merge:
        for model, rs in json.loads(other.read_text())["runs"].items():
            saved.setdefault("runs", {}).setdefault(model, {}).update(rs)
    if args.score_only or args.merge:
        args.models = [m for m in args.models if m in saved.get("runs", {})]
        args.modes, args.no_peers = [], True
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        files = files_of(DATA, args.quick) + build_stress(DATA, QUICK if args.quick else FULL, folder, ffmpeg)
        onsets = {}
        for f in files:
            if f["kind"] == "long" and f.get("segments_file"):
                samples = load_audio(f["path"])
                pieces = rc.pieces_of(json.loads((DATA / f["segments_file"]).read_text()))
                onsets[f["file"]] = [rc.voice_onset(samples, p.start, p.end) for p in pieces]
        runs = run_all(args, files, folder, ffmpeg, saved)
    scores = {m: {name: score(files, r["hyps"], name != WCPP, onsets) for name, r in rs.items()}
              for m, rs in runs.items()}
    summaries = {m: {name: summary(s) for name, s in ss.items()} for m, ss in scores.items()}
    wall = time.perf_counter() - t0
    audio = sum(f["duration_s"] for f in files)
    print(f"issue 48 evaluation{' (--quick)' if args.quick else ''}: {len(files)} files, {audio / 60:.1f} min of "
          f"audio per system; CPU {cpu_model()}, {os.cpu_count()} cores, {args.threads} threads; "
          f"wall {wall / 60:.1f} min this run; ours from {args.ours or BENCH.parent}")
    for m, rs in runs.items():
        for name, r in rs.items():
            print(f"- {m} {name}: {r['wall_s']:.0f} s; {r['info']}")
    print_tables(summaries, files, scores)
    if args.json:
        saved.update({"files": [{k: v for k, v in f.items() if k != "path"} for f in files],
                      "scores": scores, "summary": summaries, "quick": args.quick})
        args.json.write_text(json.dumps(saved))


if __name__ == "__main__":
    main()
