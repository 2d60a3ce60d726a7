"""The runner with a scripted engine (the engine interface, no model): checkpoint spacing, stop
after a checkpoint, resume without losing or repeating a word, retries, lease takeover, live
outputs. The real model and real crashes are in test_jobs_e2e.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable, Optional

import pytest

from transcriber.app.run.engines import EngineCache
from transcriber.app.run.enqueue import request_for
from transcriber.app.run.local import Runner
from transcriber.app.store.spec import JobSpec
from transcriber.app.store.sqlite_store import SqliteJobStore
from transcriber import Segment, Step, Word

SHORT = "audio/short_en/sr_one_two_three.flac"  # 2.74 s, in the recordings (the data_dir fixture)


class ScriptedEngine:
    """Ten steps of 0.25 s, one word each; ``on_step(i)`` runs before step i is yielded."""

    model_name = "scripted"

    def __init__(self, on_step: Optional[Callable[[int], None]] = None, n: int = 10):
        self.on_step, self.n = on_step, n
        self.started_from: list[Optional[dict]] = []

    def steps(self, path, state):
        self.started_from.append(state)
        i = state["i"] if state else 0
        while i < self.n:
            i += 1
            if self.on_step:
                self.on_step(i)
            word = Word((i - 1) * 0.25, i * 0.25 - 0.05, f" w{i}", 0.9)
            yield Step((word,), (Segment(word.start, word.end, word.text, (word,)),), {"i": i}, i * 0.25, "en")

    def batch(self, width):
        return None  # one file at a time (transcriber.Engine.batch)


@pytest.fixture
def setup(tmp_path, monkeypatch, data_dir):
    monkeypatch.delenv("TRANSCRIBER_DEBUG", raising=False)
    media = tmp_path / "one two three.flac"
    shutil.copy(data_dir / SHORT, media)
    store = SqliteJobStore(tmp_path / "jobs.db")

    def make(spec=JobSpec(formats=("json", "srt"))):
        return store.enqueue(request_for(media, None, None, spec))[0]

    yield store, media, make
    store.close()


def runner_for(store, engine, **kw) -> Runner:
    return Runner(store, engines=EngineCache(lambda spec: engine), checkpoint_seconds=1.0, **kw)


def words_of(media: Path) -> list[str]:
    data = json.loads(media.with_suffix(".json").read_text())
    return [w["word"] for s in data["segments"] for w in s["words"]]


ALL = [f" w{i}" for i in range(1, 11)]


def test_checkpoints_every_n_seconds_of_audio(setup):
    store, media, make = setup
    job = make()
    result = runner_for(store, ScriptedEngine()).run([job.id])
    assert [j.id for j in result.done] == [job.id] and not result.failed
    assert [c["position"] for c in store.checkpoints(job.id)] == [1.0, 2.0, 2.5]
    assert words_of(media) == ALL
    done = store.get(job.id)
    assert done.status == "done" and done.words_complete and done.model == "scripted"
    assert done.progress == pytest.approx(2.74, abs=0.01)  # done: the whole file (ffprobe's duration, or ffmpeg's in 1/100 s)
    assert sorted(Path(p).suffix for p in done.outputs) == [".json", ".srt"]


def test_stop_commits_a_checkpoint_and_the_next_run_resumes_there(setup):
    store, media, make = setup
    job = make()
    runner = None

    def stop_at_6(i):
        if i == 6:
            runner.stop.request()

    runner = runner_for(store, ScriptedEngine(stop_at_6))
    result = runner.run([job.id])
    assert result.stopped is not None and not result.done
    assert [c["position"] for c in store.checkpoints(job.id)] == [1.0, 1.5]  # the stop's own checkpoint
    assert store.get(job.id).status == "queued" and not media.with_suffix(".json").exists()
    engine = ScriptedEngine()
    runner_for(store, engine).run([job.id])
    assert engine.started_from == [{"i": 6}]
    assert words_of(media) == ALL


def test_a_failed_attempt_is_retried_from_its_checkpoint(setup):
    store, media, make = setup
    job = make()
    failures = []

    def fail_once_at_7(i):
        if i == 7 and not failures:
            failures.append(i)
            raise RuntimeError("boom\nsecond line")

    engine = ScriptedEngine(fail_once_at_7)
    result = runner_for(store, engine).run([job.id])
    assert [j.id for j in result.done] == [job.id]
    assert engine.started_from == [None, {"i": 4}]  # resumed at the last checkpoint (1.0 s)
    assert words_of(media) == ALL
    done = store.get(job.id)
    assert (done.runs, done.errors, done.status) == (2, 1, "done")


def test_failures_stop_after_max_attempts_with_a_one_line_error(setup):
    store, media, make = setup
    job = make()

    def always(i):
        if i == 3:
            raise RuntimeError("boom\nsecond line")

    result = runner_for(store, ScriptedEngine(always), max_attempts=2).run([job.id])
    (failed, reason), = result.failed
    assert reason == "unexpected RuntimeError: boom second line"
    failed = store.get(job.id)
    assert (failed.status, failed.runs, failed.errors, failed.retryable) == ("failed", 2, 2, True)
    assert not media.with_suffix(".json").exists() and not media.with_suffix(".srt").exists()


def test_a_runner_whose_job_was_taken_over_writes_nothing_more(setup):
    store, media, make = setup
    job = make()
    other = SqliteJobStore(store.path)

    def taken_over_at_5(i):
        if i == 5:
            other.expire_dead_leases(lambda owner: True)  # as if this runner had been judged dead
            assert other.claim("otherhost:1:x", [job.id], 60) is not None

    result = runner_for(store, ScriptedEngine(taken_over_at_5)).run([job.id])
    assert [j.id for j in result.lost] == [job.id] and not result.done and not result.failed
    assert [c["position"] for c in store.checkpoints(job.id)] == [1.0]
    assert store.get(job.id).lease_owner == "otherhost:1:x"
    other.close()


def test_live_outputs_grow_at_each_checkpoint(setup):
    store, media, make = setup
    job = make(JobSpec(formats=("json",), live=True))
    seen = []

    def look(i):
        if i in (5, 9):
            seen.append(words_of(media))

    runner_for(store, ScriptedEngine(look)).run([job.id])
    assert seen == [ALL[:4], ALL[:8]]
    assert words_of(media) == ALL


def test_a_failed_redo_with_other_options_keeps_the_last_good_words(setup):
    """Issue 18: a redo of a done job with other word options, at the same output place, that
    fails gives the job back its last good words (its outputs were never touched)."""
    store, media, make = setup
    job = make()
    runner_for(store, ScriptedEngine()).run([job.id])
    before = store.get(job.id)
    other = JobSpec(formats=("json", "srt"), options={"beam_size": 3})
    redo, action = store.enqueue(request_for(media, None, None, other))
    assert (redo.id, action) == (job.id, "redo") and store.resume_point(job.id).segments == []

    def crash(i):
        if i == 3:
            raise RuntimeError("disk on fire")

    result = runner_for(store, ScriptedEngine(crash), max_attempts=1).run([job.id])
    assert [j.id for j, _ in result.failed] == [job.id]  # told as the redo's failure
    after = store.get(job.id)
    assert after.status == "done" and after.words_complete and after.spec == before.spec
    assert after.fingerprint == before.fingerprint and after.outputs == before.outputs
    assert [w.text for s in store.resume_point(job.id).segments for w in s.words] == ALL
    assert words_of(media) == ALL
    assert store.enqueue(request_for(media, None, None, JobSpec(formats=("json", "srt"))))[1] == "skip"


def test_an_interrupted_redo_keeps_the_last_good_words_for_the_old_options(setup):
    store, media, make = setup
    job = make()
    runner_for(store, ScriptedEngine()).run([job.id])
    other = JobSpec(formats=("json", "srt"), options={"beam_size": 3})
    assert store.enqueue(request_for(media, None, None, other))[1] == "redo"
    runner = None

    def stop_at_4(i):
        if i == 4:
            runner.stop.request()

    runner = runner_for(store, ScriptedEngine(stop_at_4))
    assert runner.run([job.id]).stopped is not None and store.get(job.id).status == "queued"
    # the old options again: the kept words, nothing to decode; the new ones would resume
    assert store.enqueue(request_for(media, None, None, JobSpec(formats=("json", "srt"))))[1] == "skip"
    assert store.get(job.id).status == "done"
    assert [w.text for s in store.resume_point(job.id).segments for w in s.words] == ALL
