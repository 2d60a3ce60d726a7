"""A Ray node that dies under a file is not the file's fault (transcriber/app/run/ray_runner.py).

A real cluster on this machine: ``ray.cluster_utils.Cluster`` (Ray's own test utility) starts a
head (no CPUs: it only hosts the control store and the driver) and two nodes of one CPU each,
every one its own raylet. The worker decoding jfk.flac stops itself at a step (the test hook of
tests/app/test_ray.py, tests/faults), the test kills that worker's node (its raylet and every process of it), and
the run must go on on the other node: the file queued again without an attempt counted, resumed
from its checkpoint, one line naming the node, exit 0.
"""

from __future__ import annotations

import os
import re
import shutil
import time

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'transcriber[ray]'")
from ray.cluster_utils import Cluster  # noqa: E402

from tests import faults  # noqa: E402
from tests.conftest import JFK, PRESS_YARD  # noqa: E402
from tests.app.test_ray import HOOK, STREAM, driver, invoke, jobs_in, pid_of, stopped_worker, wait_for, words_of  # noqa: E402

NODE_MEMORY = dict(object_store_memory=80 * 2**20)  # items are small: keep each raylet's store small


@pytest.fixture
def cluster(monkeypatch):
    """A head without CPUs and two one-CPU nodes (three raylets); shut down after the test. Its
    workers act on HOOK (tests/faults)."""
    monkeypatch.setenv("PYTHONPATH", faults.environment(dict(os.environ))["PYTHONPATH"])
    cluster = Cluster(initialize_head=True, head_node_args=dict(num_cpus=0, include_dashboard=False, **NODE_MEMORY))
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1, **NODE_MEMORY)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()


def ancestors(pid: int) -> set[int]:
    """The pids of the process's parents, up to init."""
    found = set()
    while pid > 1:
        with open(f"/proc/{pid}/stat", "rb") as f:
            pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        found.add(pid)
    return found


def node_of(cluster: Cluster, pid: int):
    """The cluster node whose raylet started the worker process ``pid``."""
    parents = ancestors(pid)
    return next(node for node in cluster.worker_nodes
                if any(p.process.pid in parents for p in node.all_processes["raylet"]))


@pytest.mark.slow
def test_a_node_that_dies_under_a_file_requeues_it_uncounted_and_the_run_goes_on(cluster, tmp_path):
    reference = tmp_path / "reference"
    reference.mkdir()
    shutil.copy(JFK, reference / "jfk.flac")
    assert invoke(reference, *STREAM, "--db", tmp_path / "ref.db", "-f", "json", "-q").exit_code == 0
    work = tmp_path / "in"
    work.mkdir()
    shutil.copy(JFK, work / "jfk.flac")
    shutil.copy(PRESS_YARD, work / "press yard.flac")
    db = tmp_path / "jobs.db"
    proc = driver(work, *STREAM, "--ray", cluster.address, "--db", db, "-f", "json", "--checkpoint-seconds", "1",
                  "--workers", "2", env_extra={HOOK: "SIGSTOP@jfk.flac:4"})
    try:
        pid = wait_for(lambda: stopped_worker(db, "jfk.flac"), "the worker of jfk.flac to stop at step 4", 120)
        wait_for(lambda: jobs_in(db)["press yard.flac"].status == "done", "the other file to be done", 60)
        node = node_of(cluster, pid)
        start = time.monotonic()
        cluster.remove_node(node, allow_graceful=False)  # its raylet, and so every worker of it, killed
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - start
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    jobs = jobs_in(db)
    assert all(j.status == "done" for j in jobs.values()), err
    jfk = jobs["jfk.flac"]
    assert jfk.errors == 0 and jfk.runs == 2, err  # queued again, not counted against the file
    assert pid_of(jfk.worker) != pid
    assert words_of(work)["jfk"] == words_of(reference)["jfk"]  # resumed: no word lost or repeated
    assert "given up" not in err and "will retry" not in err
    lost = [line for line in err.splitlines() if "jfk.flac" in line and node.node_id[:8] in line]
    assert len(lost) == 1 and lost[0].startswith("warning: ") and "queued again" in lost[0], err
    assert re.search(r"2 done, 0 skipped, 0 failed", err), err
    assert took < 60, f"the run took {took:.0f} s after the node died"
