"""Run a Markdown document's examples as a user would type them, in order.

Every fenced ```sh and ```python block runs, top to bottom, in one shell session (so a
block's `export`s and `eval`s hold for the blocks after it) in one directory laid out
as after `make run` (./.dockyard is the server's data dir, ./.venv the project's). An
HTML comment on the line before a block changes what happens to it:

    <!-- not run: why -->       the block is shown, not run (it starts a server, say)
    <!-- file: path/to/x.py --> the block is written to that file (a training script)
    <!-- sdk-v3 -->             the Python block runs with the SDK v3's interpreter

Other fences (```text, ```json) are not run. `python` is the project's venv, which has
boto3 and the SageMaker SDK v2, as after `pip install sagemaker`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.harness import REPO, DockyardServer

BLOCK = re.compile(r"(?:<!--([^>]*)-->\n)?```(\w*)\n(.*?)```", re.S)
MARK = "@@dockyard-doc-block "
# SDK v3 needs a newer boto3 than dockyard pins: `make test` installs it into a venv of
# its own (Makefile, tests/sdk/v3-requirements.txt).
SDK_V3_PYTHON = Path(
    os.environ.get("DOCKYARD_TEST_SDK_V3_PYTHON", REPO / ".venv/sdk-v3/bin/python")
)


@dataclass(frozen=True)
class Block:
    index: int
    lang: str
    code: str
    directive: str

    @property
    def runs(self) -> bool:
        return self.lang in ("sh", "python") and not self.directive.startswith("not run")


def blocks(markdown: str) -> list[Block]:
    return [
        Block(i, m.group(2), m.group(3), (m.group(1) or "").strip())
        for i, m in enumerate(BLOCK.finditer(markdown))
    ]


def output_of(document: list[Block], outputs: dict[int, str], needle: str) -> str:
    """The output of the one run block whose code holds `needle`."""
    (index,) = [b.index for b in document if b.runs and needle in b.code]
    return outputs[index]


def script(document: list[Block]) -> str:
    lines = ["set -euo pipefail"]
    for block in document:
        if not block.runs:
            continue
        lines.append(f"echo '{MARK}{block.index}'")
        if block.directive.startswith("file:"):
            path = block.directive.removeprefix("file:").strip()
            lines += [f"mkdir -p \"$(dirname '{path}')\"", f"cat > '{path}' <<'DOCKYARD_EOF'"]
            lines += [block.code.rstrip("\n"), "DOCKYARD_EOF"]
        elif block.lang == "python":
            python = str(SDK_V3_PYTHON) if block.directive == "sdk-v3" else "python"
            lines += [f"{python} - <<'DOCKYARD_EOF'", block.code.rstrip("\n"), "DOCKYARD_EOF"]
        else:
            lines.append(block.code)
    return "\n".join(lines) + "\n"


def run(markdown: str, server: DockyardServer, cwd: Path, timeout: int = 900) -> dict[int, str]:
    """Runs the document's blocks against `server`, whose data dir is cwd/.dockyard;
    answers each run block's output (stdout and stderr) by its index."""
    assert server.data_dir == cwd / ".dockyard"
    venv = cwd / ".venv"
    if not venv.exists():
        venv.symlink_to(REPO / ".venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SAGEMAKER_"))}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    # The documents talk to `make run`'s port; the CLI's default endpoint follows this.
    env["DOCKYARD_ENDPOINT_URL"] = server.endpoint
    env["SAGEMAKER_SUPPRESS_V2_WARNING"] = "1"
    text = script(blocks(markdown)).replace("127.0.0.1:8080", f"127.0.0.1:{server.port}")
    result = subprocess.run(
        ["bash", "-c", text],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    outputs: dict[int, str] = {}
    for part in result.stdout.split(MARK)[1:]:
        index, _, output = part.partition("\n")
        outputs[int(index)] = output
    assert result.returncode == 0, f"a block failed:\n{result.stdout[-8000:]}"
    return outputs
