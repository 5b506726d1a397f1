"""`engine run --ray ADDRESS` on a real two-node Ray cluster on loopback, against the fake OpenAI server.

The cluster is started here (`ray start --head`, then a second `ray start --address`), one CPU per node, no
dashboard, a small object store, every port chosen free, on loopback (127.0.0.2, see HOST), its own temp dir;
teardown ends the process groups this module started (never `ray stop`, which would stop every Ray on the
shared machine).
Skipped where Ray is not installed (the [ray] extra; `make test` installs it through [dev]).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from engine.results.rows import key_of_row
from tests.fake_openai import FakeOpenAI, Reply
from tests.run.e2e import ROOT, engine, write_project

# Starting two Ray nodes and stopping them costs ~30 s: `make test-slow` (which .ci/run runs), not `make test`.
pytestmark = pytest.mark.slow

RAY = Path(os.environ.get("VIRTUAL_ENV", "")) / "bin" / "ray"
if not RAY.exists():
    RAY = Path(__import__("sys").executable).parent / "ray"
# Loopback only. Ray turns 127.0.0.1 (and localhost) into the host's network address wherever it meets it, and
# its one-machine mode refuses a second node; another loopback address (127.0.0.0/8) it leaves alone.
HOST = "127.0.0.2"
# Hermetic: no token from ~/.ray/auth_token (a local ray.init() writes one there), no usage reports.
LOOPBACK = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
NODE_PORTS = ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
              "--dashboard-agent-grpc-port", "--metrics-export-port", "--runtime-env-agent-port")


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def _start_node(args: list[str], temp: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    chosen = [f"{flag}={port}" for flag, port in zip(NODE_PORTS, _free_ports(len(NODE_PORTS)), strict=True)]
    return subprocess.Popen(
        [str(RAY), "start", "--block", *args, "--num-cpus=1",
         "--object-store-memory=78643200", f"--node-ip-address={HOST}", "--disable-usage-stats",
         *chosen],
        env=env, stdout=subprocess.DEVNULL, stderr=open(Path(temp) / "start.log", "ab"),
        start_new_session=True)   # its own process group: teardown ends exactly these processes


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=15)
            if sig == signal.SIGTERM:
                time.sleep(1)      # let the node's children (raylet, workers) go too before the group is killed
        except subprocess.TimeoutExpired:
            continue


def _nodes_alive(address: str, env: dict[str, str]) -> int:
    host, port = address.split(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return 0    # the head's GCS is not listening yet (a probe now would hang in ray.init)
    probe = (f"import ray; ray.init(address={address!r}, logging_level='ERROR', log_to_driver=False); "
             "print(sum(n['Alive'] for n in ray.nodes()))")
    done = subprocess.run([str(RAY.parent / "python"), "-c", probe], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    return int(done.stdout.strip() or 0) if done.returncode == 0 else 0


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """A two-node Ray cluster on a loopback address: its GCS address."""
    # Here, not at module level: every pytest-xdist worker of `make test` collects this (slow) module, and
    # importing ray there cost each of them ~0.5 CPU-s for tests it deselects.
    pytest.importorskip("ray")
    temp = tempfile.mkdtemp(prefix="rayt", dir="/tmp")   # short: Ray's unix socket paths must fit 107 bytes
    env = dict(os.environ, ENGINE_TEST_KEY="k", PYTHONPATH=str(ROOT), ENGINE_REMOTE_CACHE=f"{temp}/cache", **LOOPBACK)
    env.pop("RAY_ADDRESS", None)
    (port,), started = _free_ports(1), []
    address = f"{HOST}:{port}"
    try:
        head = ["--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp}"]
        started.append(_start_node(head, temp, env))
        deadline = time.monotonic() + 300   # a start-up bound on a loaded machine, not a speed check
        while _nodes_alive(address, env) < 1:
            assert time.monotonic() < deadline, (Path(temp) / "start.log").read_text()[-3000:]
            assert started[0].poll() is None, (Path(temp) / "start.log").read_text()[-3000:]
            time.sleep(1)
        started.append(_start_node([f"--address={address}"], temp, env))
        while _nodes_alive(address, env) < 2:
            assert time.monotonic() < deadline, (Path(temp) / "start.log").read_text()[-3000:]
            assert started[1].poll() is None, (Path(temp) / "start.log").read_text()[-3000:]
            time.sleep(1)
        yield address
    finally:
        for proc in reversed(started):
            _stop(proc)
        shutil.rmtree(temp, ignore_errors=True)


def _keys(df: pd.DataFrame) -> list[str]:
    return [key_of_row(row) for row in df.to_dict("records")]


def test_shards_as_ray_tasks_on_two_nodes_hold_the_model_cap(tmp_path: Path, fake_openai: FakeOpenAI,
                                                             ray_cluster: str) -> None:
    fake_openai.responder = lambda body: Reply(content="ok")
    suites, models = write_project(tmp_path, fake_openai.base_url, tests=60, concurrency=2)
    models.write_text(models.read_text().replace("timeout_s: 5", "timeout_s: 60"))   # calls are held 8 s below
    common = ["run", str(suites), "--models", str(models), "--quiet"]
    whole = engine(*common, "--out", str(tmp_path / "whole"), env={"ENGINE_TEST_KEY": "k"})
    assert whole.returncode == 0, whole.stderr
    expected = sorted(_keys(pd.read_parquet(tmp_path / "whole" / "latest")))
    fake_openai.reset()
    # A Ray worker may start seconds after another: every call that arrives in the first 8 s after the first
    # call is answered only then, so both shards are calling at once however late the second starts.
    first_call: list[float] = []

    def held_at_first(body: dict[str, object]) -> Reply:
        now = time.monotonic()
        first_call[:] = first_call or [now]
        return Reply(content="ok", delay_s=max(0.05, first_call[0] + 8.0 - now))

    fake_openai.responder = held_at_first

    out = tmp_path / "results"
    run = engine("run", str(suites), "--models", str(models), "--out", str(out), "--run-id", "sweep",
                 "--ray", ray_cluster, "--shards", "2", env={"ENGINE_TEST_KEY": "k", **LOOPBACK})
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 of 2 shards complete" in run.stdout
    folder = out / "sweep"
    assert sorted(_keys(pd.read_parquet(folder))) == expected         # every job once, as the unsharded run
    assert len(fake_openai.requests) == len(expected)
    combined = json.loads((folder / "_manifest.json").read_text())
    assert combined["complete"] and combined["counts"]["rows"] == len(expected)

    report = json.loads((folder / "_ray.json").read_text())
    assert sorted(s["shard"] for s in report["shards"]) == ["1/2", "2/2"]
    assert len({s["node"] for s in report["shards"]}) == 2            # one shard per node: both nodes worked
    first, second = report["shards"]
    overlap = min(first["ended_at"], second["ended_at"]) - max(first["started_at"], second["started_at"])
    # the shards called at the same time (several seconds each), so the caps below mean something
    assert overlap > 2.0, json.dumps(report)
    # Each shard alone would run 2 workers per model (4 in flight across two shards); the actor holds it to 2.
    assert fake_openai.max_in_flight_by_model["fast-1"] <= 2, fake_openai.max_in_flight_by_model
    assert fake_openai.max_in_flight_by_model["other-1"] <= 2, fake_openai.max_in_flight_by_model
    assert all(m["peak_in_flight"] == 2 for m in report["models"].values()), report   # every call held a slot


def test_resume_on_ray_from_a_results_url_runs_only_the_missing_shards(tmp_path: Path, fake_openai: FakeOpenAI,
                                                    ray_cluster: str) -> None:
    fake_openai.responder = lambda body: Reply(content="ok")
    suites, models = write_project(tmp_path, fake_openai.base_url, tests=10, concurrency=2)
    out = tmp_path / "results"      # written through a file:// URL: the remote-results path (engine.results.remote)
    env = {"ENGINE_TEST_KEY": "k", "ENGINE_REMOTE_CACHE": str(tmp_path / "cache"), **LOOPBACK}
    by_hand = engine("run", str(suites), "--models", str(models), "--out", f"file://{out}", "--run-id", "r",
                     "--shard", "1/2", "--quiet", env=env)
    assert by_hand.returncode == 0, by_hand.stderr
    paid = len(fake_openai.requests)
    assert 0 < paid < 2 * 13

    assert (out / "r" / "shard-1-of-2" / "_manifest.json").exists()
    # No suites or models given: the driver takes them (and the models' caps) from shard 1's manifest.
    resumed = engine("run", "--resume", f"file://{out}/r", "--ray", ray_cluster, env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "ray: 1 shard(s)" in resumed.stdout and "2 of 2 shards complete" in resumed.stdout
    assert len(fake_openai.requests) == 2 * 13                          # shard 1's calls were not made again
    df = pd.read_parquet(out / "r")
    assert len(df) == 2 * 13 and not df.duplicated(["model", "test_id", "case_index", "attempt"]).any()
    report = json.loads((out / "r" / "_ray.json").read_text())
    assert [s["shard"] for s in report["shards"]] == ["2/2"]
    assert json.loads((out / "r" / "_manifest.json").read_text())["complete"]
    assert set(report["models"]) == {"fast", "other"}
