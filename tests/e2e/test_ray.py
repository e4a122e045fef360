"""The Ray backend (issue 16, first slice) against a real Ray cluster on this machine
(`ray.cluster_utils.Cluster`: a head and two worker nodes): a job's instance is a Ray
actor running the same agent and sandbox, its log and metrics reach the API through
the actor, a warm pool's next job runs on the pool's own actor, and a restarted server
finds its running instance again."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from ray import cluster_utils as ray_cluster_utils

from tests.e2e.plan_helpers import search, set_clock, tomorrow_at
from tests.e2e.test_cluster_exec import cli, run_on
from tests.e2e.test_clusters import group, wait_cluster, wait_nodes
from tests.e2e.test_plan_jobs import P5, STEPPER, at, buy, wait_secondary
from tests.e2e.test_training_jobs import job_request, script_job
from tests.harness import DockyardServer

# Three worker nodes in two AZs, offering instances by custom resources (docs/ray.md);
# their GPUs are Ray's bookkeeping only (this machine has none).
NODES: list[dict[str, Any]] = [
    {"resources": {"dockyard/ml.m5.xlarge": 1, "dockyard/az/us-east-1a": 1}},
    {
        "num_gpus": 8,
        "resources": {
            "dockyard/ml.m5.xlarge": 1,
            "dockyard/ml.p5.48xlarge": 1,
            "dockyard/az/us-east-1a": 1,
        },
    },
    {
        "num_gpus": 10,
        "resources": {
            "dockyard/ml.m5.xlarge": 1,
            "dockyard/ml.g5.xlarge": 2,
            "dockyard/ml.p5.48xlarge": 1,
            "dockyard/az/us-east-1b": 1,
        },
    },
]


DEFAULT_OUTPUT = "s3://dockyard-jobs/out"
# Two hosts of the type two nodes of us-east-1a offer: one on each.
TWO_HOSTS = {"InstanceType": "ml.m5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 10}
NODE_ARGS: dict[Any, dict[str, Any]] = {}  # each node of the cluster: what it was started with


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    # The head takes no instance (it offers no dockyard resource): a worker node can die.
    cluster = ray_cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False}
    )
    for args in NODES:
        NODE_ARGS[cluster.add_node(num_cpus=1, **args)] = args
    yield cluster
    cluster.shutdown()


@pytest.fixture
def ray_server(tmp_path: Path, ray_cluster: Any) -> Iterator[DockyardServer]:
    with on_ray(tmp_path, ray_cluster) as server:
        yield server


@pytest.fixture
def ray_manual_server(tmp_path: Path, ray_cluster: Any) -> Iterator[DockyardServer]:
    """A server on the cluster whose clock moves only when told (`dockyard clock`)."""
    with on_ray(tmp_path, ray_cluster, clock="manual") as server:
        yield server


@contextmanager
def on_ray(tmp_path: Path, ray_cluster: Any, **options: Any) -> Iterator[DockyardServer]:
    server = DockyardServer(tmp_path / "data", **options)
    server.extra_args = ["--backend", "ray", "--ray-address", str(ray_cluster.address)]
    server.start(timeout=120)
    try:
        yield server
    finally:
        throw_away(server, ray_cluster)


def throw_away(server: DockyardServer, ray_cluster: Any) -> None:
    """Stop the server and end its agents - and its actors and placement groups, which
    hold the nodes' dockyard resources (in a process of its own: Ray's driver state)."""
    server.stop()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from dockyard.compute.backends.ray_host import "
            "end_all; end_all(sys.argv[1], Path(sys.argv[2]))",
            str(ray_cluster.address),
            str(server.data_dir),
        ],
        check=True,
        timeout=120,
    )


def job(name: str, code: str, keep_alive: int = 0) -> dict[str, Any]:
    """An inline job on one ml.m5.xlarge, its output in the default bucket."""
    request = job_request(name, code, OutputDataConfig={"S3OutputPath": DEFAULT_OUTPUT})
    if keep_alive:
        request["ResourceConfig"]["KeepAlivePeriodInSeconds"] = keep_alive
    request["AlgorithmSpecification"]["MetricDefinitions"] = [
        {"Name": "loss", "Regex": "loss=([0-9.]+)"}
    ]
    return request


def wait(server: DockyardServer, name: str, test: Any, timeout: float = 180) -> dict[str, Any]:
    client = server.client()
    deadline = time.monotonic() + timeout
    while True:
        described = client.describe_training_job(TrainingJobName=name)
        if test(described):
            return dict(described)
        assert time.monotonic() < deadline, described
        time.sleep(0.3)


def ancestry(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of a process and each of its parents."""
    found = []
    while pid > 1:
        try:
            line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            found.append((pid, line))
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return found


def agent_of(server: DockyardServer, name: str, host: str = "algo-1") -> int:
    [pid_file] = (server.data_dir / "instances").glob(f"*-{name}-*/{host}/agent.pid")
    return int(pid_file.read_text())


def raylet_of(server: DockyardServer, name: str, host: str) -> int:
    """The Ray node an instance runs on: the raylet its actor's worker runs under."""
    return next(pid for pid, line in ancestry(agent_of(server, name, host)) if "raylet" in line)


def test_a_job_runs_in_a_ray_actor_and_reports_through_it(ray_server: DockyardServer) -> None:
    server = ray_server
    client = server.client()
    client.create_training_job(**job("on-ray", "print('loss=0.5'); print('loss=0.25')"))
    done = wait(server, "on-ray", lambda j: j["TrainingJobStatus"] != "InProgress")
    assert done["TrainingJobStatus"] == "Completed", done
    assert [(m["MetricName"], m["Value"]) for m in done["FinalMetricDataList"]] == [("loss", 0.25)]
    assert messages(server, "on-ray/") == ["loss=0.5", "loss=0.25"]
    # Its actor ends (no warm pool): its files are shipped whole to the server first -
    # its end state only then - and read from there.
    deadline = time.monotonic() + 60
    while not list((server.data_dir / "ray-shipped").glob("*-on-ray-*/algo-1/state.json")):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert messages(server, "on-ray/") == ["loss=0.5", "loss=0.25"]
    again = server.client().describe_training_job(TrainingJobName="on-ray")
    assert again["FinalMetricDataList"] == done["FinalMetricDataList"]


def test_a_warm_pool_reuses_its_actor_and_a_restart_finds_it(ray_server: DockyardServer) -> None:
    server = ray_server
    client = server.client()
    code = "import os; print('pid', os.getppid(), flush=True)"
    client.create_training_job(**job("ray-warm-1", code, keep_alive=600))
    wait(server, "ray-warm-1", lambda j: j.get("WarmPoolStatus", {}).get("Status") == "Available")
    # The pool's agent runs under its Ray actor, not under the server.
    lines = [line for _, line in ancestry(agent_of(server, "ray-warm-1"))]
    assert any("ray::InstanceHost" in line for line in lines), lines
    # The server is killed and comes back: the pool's actor is found again by its name.
    server.kill()
    server.start(timeout=120)
    client = server.client()
    client.create_training_job(**job("ray-warm-2", code, keep_alive=600))
    wait(server, "ray-warm-2", lambda j: j["TrainingJobStatus"] == "Completed")
    first = client.describe_training_job(TrainingJobName="ray-warm-1")["WarmPoolStatus"]
    assert first.get("ReusedByJob") == "ray-warm-2", first
    client.update_training_job(
        TrainingJobName="ray-warm-2", ResourceConfig={"KeepAlivePeriodInSeconds": 0}
    )
    wait(server, "ray-warm-2", lambda j: j.get("WarmPoolStatus", {}).get("Status") == "Terminated")


PAIR = """
import os, socket, time
host = os.environ["SM_CURRENT_HOST"]
print("net", os.readlink("/proc/self/ns/net"), flush=True)
if host == "algo-1":
    conn, (peer, _) = socket.create_server(("", 7001)).accept()
    print("met", conn.recv(16).decode(), "from", peer, flush=True)
else:
    for _ in range(600):
        try:
            conn = socket.create_connection(("algo-1", 7001))
            break
        except OSError:
            time.sleep(0.1)
    conn.sendall(host.encode())
time.sleep(3)
"""


def messages(server: DockyardServer, stream_prefix: str) -> list[str]:
    logs = server.client("logs")
    [stream] = logs.describe_log_streams(
        logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix=stream_prefix
    )["logStreams"]
    events = logs.get_log_events(
        logGroupName="/aws/sagemaker/TrainingJobs",
        logStreamName=stream["logStreamName"],
        startFromHead=True,
    )["events"]
    return [e["message"] for e in events]


def test_a_two_instance_job_is_spread_over_two_nodes(ray_server: DockyardServer) -> None:
    """STRICT_SPREAD puts algo-1 and algo-2 on different Ray nodes (those offering
    ml.m5.xlarge in us-east-1a), each in a network namespace of its own: they meet by
    host name over the job network their agents carry (`agent.overlay`)."""
    server = ray_server
    (server.data_dir / "s3" / "results").mkdir(parents=True, exist_ok=True)
    request = script_job(
        server,
        "ray-pair",
        PAIR,
        ResourceConfig=TWO_HOSTS,
    )
    server.client().create_training_job(**request)
    training = wait(server, "ray-pair", lambda j: j["SecondaryStatus"] in ("Training", "Failed"))
    assert training["TrainingJobStatus"] == "InProgress", training.get("FailureReason")
    assert raylet_of(server, "ray-pair", "algo-1") != raylet_of(server, "ray-pair", "algo-2")
    done = wait(server, "ray-pair", lambda j: j["TrainingJobStatus"] != "InProgress")
    assert done["TrainingJobStatus"] == "Completed", done
    first, second = messages(server, "ray-pair/algo-1"), messages(server, "ray-pair/algo-2")
    assert first[1:] == ["met algo-2 from 10.254.0.2"], first
    assert first[0].startswith("net ") and second[0].startswith("net ")
    assert first[0] != second[0], (first, second)  # two network namespaces


def test_a_dead_node_fails_its_job_and_keeps_no_pool(
    ray_server: DockyardServer, ray_cluster: Any
) -> None:
    server = ray_server
    client = server.client()
    code = "import time; print('step 1 of many', flush=True); time.sleep(600)"
    client.create_training_job(**job("ray-doomed", code, keep_alive=600))
    wait(server, "ray-doomed", lambda j: j.get("SecondaryStatus") == "Training")
    # Its log so far reaches the server while it runs (within a sweep or two).
    deadline = time.monotonic() + 60
    shipped = server.data_dir / "ray-shipped"
    while not any(
        b"step 1 of many" in log.read_bytes()
        for log in shipped.glob("*-ray-doomed-*/algo-1/logs/output.jsonl")
    ):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    # The node whose raylet the instance's actor runs under dies.
    node = node_with(ray_cluster, {pid for pid, _ in ancestry(agent_of(server, "ray-doomed"))})
    ray_cluster.remove_node(node)
    failed = wait(server, "ray-doomed", lambda j: j["TrainingJobStatus"] == "Failed")
    assert "exited unexpectedly" in failed["FailureReason"]
    assert failed.get("WarmPoolStatus", {}).get("Status") in (None, "Terminated")
    assert messages(server, "ray-doomed/") == ["step 1 of many"]  # not lost with the node
    # A node offering the same comes back, for the tests after this one.
    args = NODE_ARGS.pop(node)
    NODE_ARGS[ray_cluster.add_node(num_cpus=1, **args)] = args


GPU_REPORT = (
    "import os, time; print('gpus', os.environ['CUDA_VISIBLE_DEVICES'], "
    "os.environ['SM_NUM_GPUS'], flush=True); time.sleep(4)"
)


def test_an_instance_gets_the_gpus_ray_gave_its_actor(ray_server: DockyardServer) -> None:
    """The ml.g5.xlarge instances (1 GPU each) of the node offering two: two jobs at once
    get one GPU each, different ones, as Ray's num_gpus assigned them."""
    server = ray_server
    client = server.client()
    for name in ("gpu-1", "gpu-2"):
        request = job(name, GPU_REPORT)
        request["ResourceConfig"]["InstanceType"] = "ml.g5.xlarge"
        client.create_training_job(**request)
    seen = []
    for name in ("gpu-1", "gpu-2"):
        done = wait(server, name, lambda j: j["TrainingJobStatus"] != "InProgress")
        assert done["TrainingJobStatus"] == "Completed", done.get("FailureReason")
        [line] = messages(server, f"{name}/algo-1")
        _, visible, count = line.split()
        assert count == "1" and visible.isdigit(), line
        seen.append(visible)
    assert seen[0] != seen[1], seen


def node_with(ray_cluster: Any, pids: set[int]) -> Any:
    """The cluster's worker node whose raylet is one of `pids`."""
    [node] = [
        n
        for n in ray_cluster.worker_nodes
        if any(p.process.pid in pids for p in n.all_processes.get("raylet", []))
    ]
    return node


def start_on_plan(
    server: DockyardServer,
    name: str,
    plan_arn: str,
    block_start: datetime,
    steps: int,
    before: str = "",
) -> None:
    """A checkpointing job (STEPPER) on a 1-instance ml.p5.48xlarge plan, started by the
    clock reaching its block, and let run past its third checkpoint."""
    client = server.client()
    request = script_job(
        server,
        name,
        before + textwrap.dedent(STEPPER),
        HyperParameters={"steps": str(steps), "every": "5", "pause": "0.05"},
        CheckpointConfig={"S3Uri": f"s3://results/checkpoints/{name}"},
    )
    request["ResourceConfig"] = {
        "InstanceType": P5,
        "InstanceCount": 1,
        "VolumeSizeInGB": 10,
        "TrainingPlanArn": plan_arn,
    }
    client.create_training_job(**request)
    set_clock(server, block_start)
    wait_secondary(server, client, name, "Training", timeout=120)
    deadline = time.monotonic() + 120
    while not any(m.startswith("checkpoint 15") for m in messages(server, f"{name}/algo-1")):
        assert time.monotonic() < deadline
        time.sleep(0.2)


def ray_node_of(server: DockyardServer, name: str) -> int:
    """The raylet the job's instance runs under now (waits for its agent to start)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            return raylet_of(server, name, "algo-1")
        except (OSError, ValueError, StopIteration):
            assert time.monotonic() < deadline
            time.sleep(0.2)


def test_a_plan_job_moves_to_the_next_blocks_node(ray_manual_server: DockyardServer) -> None:
    """A 1-instance ml.p5.48xlarge plan whose blocks are in two AZs: the job runs its
    first block on the node offering the type in the first AZ, is interrupted with
    30 minutes left, and resumes from its checkpoint on the other AZ's node, with the
    type's 8 GPUs both times."""
    server = ray_manual_server
    client = server.client()
    (server.data_dir / "s3" / "results").mkdir(parents=True, exist_ok=True)
    d0 = tomorrow_at(6)
    set_clock(server, d0)
    # Day 1 is full in both AZs and day 2 in us-east-1a: a 48-hour plan is split.
    for day, zones in ((1, {"us-east-1a", "us-east-1b"}), (2, {"us-east-1a"})):
        for offering in search(
            client,
            InstanceType=P5,
            InstanceCount=1,
            DurationHours=24,
            StartTimeAfter=at(d0, day),
            EndTimeBefore=at(d0, day + 1),
        ):
            zone = offering["ReservedCapacityOfferings"][0]["AvailabilityZone"]
            if zone in zones:
                zones.discard(zone)
                buy(client, f"blocker-{day}-{zone}", offering)
    split = next(
        o
        for o in search(
            client,
            InstanceType=P5,
            InstanceCount=1,
            DurationHours=48,
            StartTimeAfter=at(d0, 0),
            EndTimeBefore=at(d0, 3),
        )
        if len({b["AvailabilityZone"] for b in o["ReservedCapacityOfferings"]}) == 2
    )
    plan_arn = buy(client, "two-zones", split)
    gpus = "import os\nprint('gpus', os.environ['CUDA_VISIBLE_DEVICES'], flush=True)\n"
    start_on_plan(server, "mover", plan_arn, at(d0, 0), steps=400, before=gpus)
    first_node = ray_node_of(server, "mover")

    set_clock(server, at(d0, 1) - timedelta(minutes=30))
    wait_secondary(server, client, "mover", "Pending", timeout=120)
    set_clock(server, at(d0, 2))
    wait_secondary(server, client, "mover", "Training", timeout=180)
    assert ray_node_of(server, "mover") != first_node
    done = wait(server, "mover", lambda j: j["TrainingJobStatus"] != "InProgress")
    assert done["TrainingJobStatus"] == "Completed", done.get("FailureReason")
    said = messages(server, "mover/algo-1")
    restarts = [m for m in said if m.startswith("restart")]
    assert restarts[0] == "restart 0 from 0" and restarts[1].startswith("restart 1 from ")
    assert int(restarts[1].split()[-1]) >= 15  # from its checkpoint, not from scratch
    gpus = [m for m in said if m.startswith("gpus")]
    assert len(gpus) == 2 and all(len(m.split()[1].split(",")) == 8 for m in gpus), gpus


VICTIM = """
import os, socket, time
if os.environ["SM_CURRENT_HOST"] == "algo-1":
    inbox = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    inbox.bind(("algo-1", 9999))
    print("listening", flush=True)
    seen = set()
    while True:
        data, (peer, _) = inbox.recvfrom(256)
        said = f"got {data[:32]!r} from {peer}"
        if said not in seen:
            seen.add(said)
            print(said, flush=True)
else:
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    while True:
        out.sendto(b"genuine", ("algo-1", 9999))
        time.sleep(0.5)
"""

# Another tenant's job: it knows how the job network works and exactly where algo-1's
# agent takes its datagrams (the worst case), not the victim's key. It sends a forged
# packet ("from algo-2 to algo-1's port 9999") there, and sends to the victim's job
# address directly. Nothing of it may reach the victim's code.
ATTACKER = """
import os, random, socket, struct
def checksum(header):
    words = sum(struct.unpack("!10H", header))
    while words > 0xFFFF:
        words = (words & 0xFFFF) + (words >> 16)
    return ~words & 0xFFFF
body = b"forged"
udp = struct.pack("!HHHH", 40000, 9999, 8 + len(body), 0) + body
header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                     socket.inet_aton("10.254.0.2"), socket.inet_aton("10.254.0.1"))
packet = header[:10] + struct.pack("!H", checksum(header)) + header[12:] + udp
target = (os.environ["SM_HP_TARGET"], int(os.environ["SM_HP_PORT"]))
out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    for _ in range(200):
        out.sendto(random.randbytes(16) + packet, target)
    print("sent", 200, flush=True)
except PermissionError:
    # The node is this job's own host, whose addresses its network refuses (here, with
    # every node on one machine, always; tests/compute/test_overlay.py forges from
    # elsewhere).
    print("refused", flush=True)
# Straight at the victim's job address (its way out routes it to the outside world).
for _ in range(20):
    out.sendto(b"direct", ("10.254.0.1", 9999))
print("direct sent", flush=True)
"""


def test_another_job_cannot_get_into_a_job_network(ray_server: DockyardServer) -> None:
    server = ray_server
    client = server.client()
    (server.data_dir / "s3" / "results").mkdir(parents=True, exist_ok=True)
    victim = script_job(
        server,
        "victim",
        VICTIM,
        ResourceConfig=TWO_HOSTS,
    )
    client.create_training_job(**victim)
    deadline = time.monotonic() + 180
    while not any(m.startswith("got b'genuine'") for m in log_of(server, "victim/algo-1")):
        assert time.monotonic() < deadline, log_of(server, "victim/algo-1")
        time.sleep(0.3)

    [spec_file] = (server.data_dir / "instances").glob("*-victim-*/algo-1/job.json")
    address, port = json.loads(spec_file.read_text())["overlay"]["peers"]["algo-1"]
    attacker = script_job(server, "attacker", ATTACKER)
    attacker["HyperParameters"].update(target=address, port=str(port))
    client.create_training_job(**attacker)
    done = wait(server, "attacker", lambda j: j["TrainingJobStatus"] != "InProgress")
    assert done["TrainingJobStatus"] == "Completed", done.get("FailureReason")
    said = log_of(server, "attacker/algo-1")
    assert said[0] in ("sent 200", "refused"), said
    assert said[1] == "direct sent", said

    time.sleep(2)  # what was sent has been read or dropped by now
    client.stop_training_job(TrainingJobName="victim")
    wait(server, "victim", lambda j: j["TrainingJobStatus"] != "InProgress")
    assert log_of(server, "victim/algo-1") == [
        "listening",
        "got b'genuine' from 10.254.0.2",
    ]


def log_of(server: DockyardServer, prefix: str) -> list[str]:
    try:
        return messages(server, prefix)
    except ValueError:  # no stream yet
        return []


def test_a_hyperpod_cluster_on_ray_and_its_node_commands(
    ray_manual_server: DockyardServer,
) -> None:
    """A cluster's node is an instance on a Ray node like a job's: OnCreate runs, and
    `dockyard clusters exec|shell` reach its agent through its actor."""
    server = ray_manual_server
    client = server.client()
    scripts = server.data_dir / "s3" / "scripts" / "lifecycle"
    scripts.mkdir(parents=True, exist_ok=True)
    (scripts / "on_create.sh").write_text("#!/bin/sh\necho ready > /opt/ml/marker.txt\n")
    client.create_cluster(ClusterName="on-ray", InstanceGroups=[group("workers", 1)])
    wait_cluster(server, client, "on-ray", "InService", timeout=180)
    [node] = wait_nodes(server, client, "on-ray", ["Running"], timeout=180)
    node_id = str(node["InstanceId"])
    [pid_file] = (server.data_dir / "instances").glob(f"*-cluster-*/{node_id}/agent.pid")
    lines = [line for _, line in ancestry(int(pid_file.read_text()))]
    assert any("ray::InstanceHost" in line for line in lines), lines

    assert run_on(server, "on-ray", node_id, "cat", "/opt/ml/marker.txt") == (0, "ready\n")
    assert run_on(server, "on-ray", node_id, "hostname") == (0, f"{node_id}\n")
    done = cli(server, "clusters", "shell", "on-ray", node_id, stdin="hostname; exit 3\n")
    assert done.returncode == 3, (done.stdout, done.stderr)
    # hostname's answer on a line of its own, or after the prompt when the input was
    # echoed before the shell printed it (typed ahead: which comes first is a race).
    lines = done.stdout.replace("\r", "")
    assert re.search(rf"(^|\$ ){re.escape(node_id)}$", lines, re.M), done.stdout

    client.delete_cluster(ClusterName="on-ray")
    wait_cluster(server, client, "on-ray", "Gone", timeout=180)


def test_a_plan_job_whose_node_dies_restarts_on_healthy_capacity(
    ray_manual_server: DockyardServer, ray_cluster: Any
) -> None:
    """On reserved capacity a dead node is not the job's end: the job restarts, on a node
    offering the block's type in its AZ, once one is there again."""
    server = ray_manual_server
    client = server.client()
    (server.data_dir / "s3" / "results").mkdir(parents=True, exist_ok=True)
    d0 = tomorrow_at(6)
    set_clock(server, d0)
    [offering, *_] = search(
        client,
        InstanceType=P5,
        InstanceCount=1,
        DurationHours=24,
        StartTimeAfter=at(d0, 0),
        EndTimeBefore=at(d0, 1),
    )
    plan_arn = buy(client, "one-day", offering)
    start_on_plan(server, "survivor", plan_arn, at(d0, 0), steps=300)
    [root] = (server.data_dir / "instances").glob("*-survivor-*/algo-1")
    # Training as the API says may come a moment before the agent's state names the
    # job's process: wait for it (it is killed below).
    deadline = time.monotonic() + 60
    while (pid := json.loads((root / "state.json").read_text()).get("pid")) is None:
        assert time.monotonic() < deadline, "the job's process never started"
        time.sleep(0.1)
    # Its node dies; one offering the same joins.
    node = node_with(ray_cluster, {ray_node_of(server, "survivor")})
    ray_cluster.remove_node(node)
    # On one machine the instance's agent and code outlive their "node" (their own
    # session); a real node's death takes them along.
    os.kill(agent_of(server, "survivor"), signal.SIGKILL)
    os.killpg(int(pid), signal.SIGKILL)
    args = NODE_ARGS.pop(node)
    NODE_ARGS[ray_cluster.add_node(num_cpus=1, **args)] = args
    done = wait(server, "survivor", lambda j: j["TrainingJobStatus"] != "InProgress", timeout=300)
    assert done["TrainingJobStatus"] == "Completed", done.get("FailureReason")
    # One log stream across both nodes. The agent puts checkpoints in S3 when an attempt
    # stops or ends, and this one died: the restart begins anew.
    said = messages(server, "survivor/algo-1")
    assert [m for m in said if m.startswith("restart")] == [
        "restart 0 from 0",
        "restart 1 from 0",
    ]
    assert said[-1].startswith("done ")
