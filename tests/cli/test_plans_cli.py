"""`dockyard plans` and `dockyard fleet` against a live manual-clock server."""

from __future__ import annotations

from tests.e2e.plan_helpers import set_clock, settle, tomorrow_at
from tests.harness import DockyardServer, run_cli


def cli(server: DockyardServer, *args: str, check: bool = True):
    return run_cli(*args, "--endpoint-url", server.endpoint, data_dir=server.data_dir, check=check)


def test_search_buy_list_show(manual_server: DockyardServer) -> None:
    set_clock(manual_server, tomorrow_at(6))
    out = cli(
        manual_server,
        "plans",
        "search",
        "--instance-type",
        "ml.p5.48xlarge",
        "--count",
        "8",
        "--days",
        "2",
    ).stdout
    assert "us-east-1a" in out and "USD" in out
    offering = next(word for word in out.split() if word.startswith("tpo-"))
    out = cli(manual_server, "plans", "buy", offering, "--name", "cli-plan").stdout
    assert "training-plan/cli-plan" in out
    settle(manual_server)
    assert "Scheduled" in cli(manual_server, "plans", "ls").stdout
    set_clock(manual_server, tomorrow_at(12))
    shown = cli(manual_server, "plans", "show", "cli-plan").stdout
    assert "cli-plan" in shown and "Active" in shown
    assert "block 1 |" in shown and "^ now" in shown and "#" in shown
    missing = cli(manual_server, "plans", "show", "nope", check=False)
    assert missing.returncode == 1 and "ResourceNotFound" in missing.stderr


def test_fleet_shows_what_each_instance_does(manual_server: DockyardServer) -> None:
    set_clock(manual_server, tomorrow_at(6))
    out = cli(
        manual_server, "plans", "search", "--instance-type", "ml.p5.4xlarge", "--count", "2"
    ).stdout
    offering = next(word for word in out.split() if word.startswith("tpo-"))
    cli(manual_server, "plans", "buy", offering, "--name", "small")
    settle(manual_server)
    before = cli(
        manual_server, "fleet", "--instance-type", "ml.p5.4xlarge", "--az", "us-east-1a"
    ).stdout
    assert "reserved-capacity" not in before and "8 instances" in before
    set_clock(manual_server, tomorrow_at(7))
    during = cli(
        manual_server, "fleet", "--instance-type", "ml.p5.4xlarge", "--az", "us-east-1a"
    ).stdout
    assert during.count("reserved-capacity") == 2 and during.count("idle") == 6
    everything = cli(manual_server, "fleet").stdout
    assert "us-east-1-dfw-2a" in everything and "ml.p6e-gb200.36xlarge" in everything
