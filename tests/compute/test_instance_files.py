"""An instance's files shipped from its node as they grow (`InstanceFiles.since` and
`extend`), then whole: what the server keeps reads as the node's own."""

from __future__ import annotations

import json
from pathlib import Path

from dockyard.compute.backends.instance_files import InstanceFiles
from dockyard.compute.wire.layout import Layout
from dockyard.compute.wire.log_format import LogWriter
from dockyard.compute.wire.spec import JobSpec


def write_events(root: Path, messages: list[str]) -> None:
    layout = Layout(root)
    layout.log_file.parent.mkdir(parents=True, exist_ok=True)
    with LogWriter(layout.log_file) as writer:
        for number, message in enumerate(messages):
            writer.write(1_000 + number, message)


def test_increments_add_up_to_the_nodes_log_and_repeat_harmlessly(tmp_path: Path) -> None:
    node = InstanceFiles(tmp_path / "node")
    server = InstanceFiles(tmp_path / "server")
    root = tmp_path / "node" / "job-key" / "algo-1"
    write_events(root, ["one", "two"])
    Layout(root).job_file.write_text(json.dumps({"job_name": "j", "attempt": 1}))

    def ship() -> None:
        sizes = server.sizes("job-key", "algo-1")
        server.extend("job-key", "algo-1", node.since("job-key", "algo-1", sizes))

    ship()
    write_events(root, ["three"])
    sizes = server.sizes("job-key", "algo-1")
    increment = node.since("job-key", "algo-1", sizes)
    server.extend("job-key", "algo-1", increment)
    server.extend("job-key", "algo-1", increment)  # a pass repeated after a crash
    ship()  # nothing new
    with server.open_log("job-key", "algo-1") as log:
        assert [e.message for e in log.read(0, len(log))] == ["one", "two", "three"]
    assert server.launched_spec("job-key", "algo-1") == JobSpec(job_name="j", attempt=1)
    assert server.state("job-key", "algo-1") is None  # a running instance's is not shipped
    assert server.logged_hosts("job-key") == ["algo-1"]


def test_a_name_leading_out_of_the_instance_is_not_written(tmp_path: Path) -> None:
    server = InstanceFiles(tmp_path / "server")
    server.unpack("k", "algo-1", {"../../escaped": b"x", "logs/output.jsonl": b""})
    assert not (tmp_path / "escaped").exists()
    assert (tmp_path / "server" / "k" / "algo-1" / "logs" / "output.jsonl").exists()


def test_a_log_that_shrank_on_its_node_is_followed(tmp_path: Path) -> None:
    """An agent restarting drops a half-written last line: the copy follows the node."""
    node = InstanceFiles(tmp_path / "node")
    server = InstanceFiles(tmp_path / "server")
    root = tmp_path / "node" / "k" / "algo-1"
    write_events(root, ["one"])
    log = Layout(root).log_file
    with open(log, "ab") as file:
        file.write(b'{"t": 1001, "m": "ha')  # cut off mid-line
    server.extend("k", "algo-1", node.since("k", "algo-1", server.sizes("k", "algo-1")))
    write_events(root, ["two"])  # the writer's repair drops the half line first
    server.extend("k", "algo-1", node.since("k", "algo-1", server.sizes("k", "algo-1")))
    server.extend("k", "algo-1", node.since("k", "algo-1", server.sizes("k", "algo-1")))
    assert (tmp_path / "server" / "k" / "algo-1" / "logs" / "output.jsonl").read_bytes() == (
        log.read_bytes()
    )
    with server.open_log("k", "algo-1") as reader:
        assert [e.message for e in reader.read(0, len(reader))] == ["one", "two"]
