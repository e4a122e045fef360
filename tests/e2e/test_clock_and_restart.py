"""The manual clock driven by `dockyard clock`, and a SIGKILLed server that loses nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.fixtures import insert_training_jobs
from tests.harness import DockyardServer, run_cli


def clock_now(server: DockyardServer) -> datetime:
    out = run_cli(
        "clock", "show", "--endpoint-url", server.endpoint, data_dir=server.data_dir
    ).stdout
    return datetime.fromisoformat(out.split()[0])


def test_manual_clock_moves_only_when_told(manual_server: DockyardServer) -> None:
    before = clock_now(manual_server)
    assert abs(before - datetime.now(UTC)) < timedelta(minutes=5)
    assert clock_now(manual_server) == before  # no drift while nobody moves it
    run_cli(
        "clock",
        "advance",
        "2h",
        "--endpoint-url",
        manual_server.endpoint,
        data_dir=manual_server.data_dir,
    )
    assert clock_now(manual_server) == before + timedelta(hours=2)
    target = (before + timedelta(days=3)).replace(microsecond=0)
    run_cli(
        "clock",
        "set",
        target.isoformat(),
        "--endpoint-url",
        manual_server.endpoint,
        data_dir=manual_server.data_dir,
    )
    assert clock_now(manual_server) == target
    back = run_cli(
        "clock",
        "set",
        before.isoformat(),
        "--endpoint-url",
        manual_server.endpoint,
        data_dir=manual_server.data_dir,
        check=False,
    )
    assert back.returncode != 0 and "cannot set the clock back" in back.stderr
    bad = run_cli(
        "clock",
        "advance",
        "soon",
        "--endpoint-url",
        manual_server.endpoint,
        data_dir=manual_server.data_dir,
        check=False,
    )
    assert bad.returncode != 0 and "duration" in bad.stderr


def test_signatures_are_judged_by_the_real_clock(manual_server: DockyardServer) -> None:
    """Clients sign with their real clocks; moving the manual clock must not lock them out."""
    client = manual_server.client()
    run_cli(
        "clock",
        "advance",
        "30d",
        "--endpoint-url",
        manual_server.endpoint,
        data_dir=manual_server.data_dir,
    )
    assert client.list_training_jobs()["TrainingJobSummaries"] == []


def test_clock_endpoint_needs_the_operator_key(
    manual_server: DockyardServer, tmp_path: Path
) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "operator.key").write_text("not-the-key")
    result = run_cli(
        "clock",
        "advance",
        "1h",
        "--endpoint-url",
        manual_server.endpoint,
        data_dir=other,
        check=False,
    )
    assert result.returncode != 0 and "operator key" in result.stderr


def test_real_clock_refuses_to_move(server: DockyardServer) -> None:
    result = run_cli(
        "clock",
        "advance",
        "1h",
        "--endpoint-url",
        server.endpoint,
        data_dir=server.data_dir,
        check=False,
    )
    assert result.returncode != 0 and "--clock manual" in result.stderr


def _kill_and_restart(server: DockyardServer) -> None:
    server.kill()
    server.start()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_sigkill_and_restart_keeps_everything(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    database_url = request.getfixturevalue("postgres_url") if backend == "postgresql" else None
    server = DockyardServer(tmp_path / "data", clock="manual", database_url=database_url).start()
    try:
        account, key = server.new_account("survivor")
        url = database_url or f"sqlite:///{server.data_dir / 'dockyard.db'}"
        insert_training_jobs(url, account, ["kept-1", "kept-2"])
        run_cli(
            "clock", "advance", "3d", "--endpoint-url", server.endpoint, data_dir=server.data_dir
        )
        moved_to = clock_now(server)
        dev_key = server.credentials()

        _kill_and_restart(server)

        assert server.credentials() == dev_key
        server.client().list_training_jobs()  # the development key still works
        client = server.client(key=key)
        names = [s["TrainingJobName"] for s in client.list_training_jobs()["TrainingJobSummaries"]]
        assert names == ["kept-1", "kept-2"]
        assert clock_now(server) >= moved_to  # the manual clock never travels back
    finally:
        server.stop()
