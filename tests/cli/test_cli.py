"""The `dockyard` command's operator side, and its help staying true."""

from __future__ import annotations

from pathlib import Path

from tests.harness import run_cli


def test_help_lists_the_commands(tmp_path: Path) -> None:
    out = run_cli("--help", data_dir=tmp_path).stdout
    for command in ("serve", "accounts", "keys", "clock"):
        assert command in out
    serve_help = run_cli("serve", "--help", data_dir=tmp_path).stdout
    for flag in ("--host", "--port", "--data-dir", "--config", "--database-url", "--clock"):
        assert flag in serve_help


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
