"""The `dockyard` command's operator side, and its help staying true."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import run_cli


def test_help_lists_the_commands(tmp_path: Path) -> None:
    out = run_cli("--help", data_dir=tmp_path).stdout
    for command in ("serve", "accounts", "keys", "clock"):
        assert command in out
    serve_help = run_cli("serve", "--help", data_dir=tmp_path).stdout
    for flag in ("--host", "--port", "--data-dir", "--config", "--database-url", "--clock"):
        assert flag in serve_help
    assert "--forwarded-allow-ips" in serve_help
    bad = run_cli("serve", "--forwarded-allow-ips", "proxy.local", data_dir=tmp_path, check=False)
    assert (
        bad.returncode != 0 and "forwarded_allow_ips" in bad.stderr and "proxy.local" in bad.stderr
    )


def test_accounts_and_keys_without_a_server(tmp_path: Path) -> None:
    out = run_cli(
        "accounts", "create", "research", "--id", "123456789012", data_dir=tmp_path
    ).stdout
    assert "123456789012" in out
    out = run_cli("keys", "create", "--account", "research", data_dir=tmp_path).stdout
    key_id = next(line.split()[-1] for line in out.splitlines() if "aws_access_key_id" in line)
    secret = next(line.split()[-1] for line in out.splitlines() if "aws_secret_access_key" in line)
    listed = run_cli("keys", "ls", "--account", "123456789012", data_dir=tmp_path).stdout
    assert key_id in listed and secret not in listed
    assert "research" in run_cli("accounts", "ls", data_dir=tmp_path).stdout
    again = run_cli("accounts", "create", "research", data_dir=tmp_path, check=False)
    assert again.returncode != 0 and "already exists" in again.stderr
    missing = run_cli("keys", "create", "--account", "nobody", data_dir=tmp_path, check=False)
    assert missing.returncode != 0 and "nobody" in missing.stderr


def test_bad_config_is_a_clear_error(tmp_path: Path) -> None:
    config = tmp_path / "dockyard.toml"
    config.write_text("[server]\nprot = 80\n")
    result = run_cli("serve", "--config", str(config), data_dir=tmp_path, check=False)
    assert result.returncode != 0 and "unknown setting [server].prot" in result.stderr


def test_bad_fleet_is_a_clear_error(tmp_path: Path) -> None:
    config = tmp_path / "dockyard.toml"
    config.write_text(
        '[[fleet]]\ninstance_type = "ml.p5.48xlarge"\navailability_zone = "us-east-1a"\n'
    )
    result = run_cli("serve", "--config", str(config), data_dir=tmp_path, check=False)
    assert result.returncode != 0 and "count must be a positive integer" in result.stderr


def test_keys_disable_enable_delete_without_a_server(tmp_path: Path) -> None:
    run_cli("accounts", "create", "research", "--id", "123456789012", data_dir=tmp_path)
    out = run_cli("keys", "create", "--account", "research", data_dir=tmp_path).stdout
    key_id = next(line.split()[-1] for line in out.splitlines() if "aws_access_key_id" in line)

    def status() -> str:
        listed = run_cli("keys", "ls", "--account", "research", data_dir=tmp_path).stdout
        row = next((line for line in listed.splitlines() if key_id in line), "")
        return "Inactive" if "Inactive" in row else "Active" if "Active" in row else "gone"

    assert status() == "Active"
    assert "disabled" in run_cli("keys", "disable", key_id, data_dir=tmp_path).stdout
    assert status() == "Inactive"
    again = run_cli("keys", "disable", key_id, data_dir=tmp_path).stdout
    assert "already" in again
    assert "enabled" in run_cli("keys", "enable", key_id, data_dir=tmp_path).stdout
    assert status() == "Active"
    # The development key (the one in <data dir>/credentials) may go: a restart makes
    # a new one, and the command says so.
    (tmp_path / "credentials").write_text(
        f"[default]\naws_access_key_id = {key_id}\naws_secret_access_key = x\n"
    )
    deleted = run_cli("keys", "delete", key_id, data_dir=tmp_path).stdout
    assert "deleted" in deleted and "next `dockyard serve`" in deleted.replace("\n", " ")
    assert status() == "gone"
    for verb in ("enable", "disable", "delete"):
        missing = run_cli("keys", verb, key_id, data_dir=tmp_path, check=False)
        assert missing.returncode == 1 and f"no access key {key_id!r}" in missing.stderr
    keys_help = run_cli("keys", "--help", data_dir=tmp_path).stdout
    for verb in ("create", "ls", "disable", "enable", "delete"):
        assert verb in keys_help


def test_the_cli_signs_each_node_request_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server accepts a node command's or shell's signature once: the same request
    made twice in one second must still be signed differently (a signed nonce)."""
    from dockyard.cli.client import signed_headers

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE000000000")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    url = "http://127.0.0.1:8080/_dockyard/clusters/shell?ClusterName=c&NodeId=i-1"
    first, second = (signed_headers(tmp_path, "us-east-1", "GET", url) for _ in range(2))
    assert "x-dockyard-nonce" in first["Authorization"]
    assert first["Authorization"] != second["Authorization"]
