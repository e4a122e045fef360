"""The fork server's wire: how the local backend asks for an agent (see
`agent.fork_server` for the fork server, `backends.forks` for the backend's side).

One JSON line each way per agent over the fork server's stdin and stdout:
{"root": ROOT, "end_with_owner": bool} in, {"pid": n} (or {"error": ...}) out.
"""

from __future__ import annotations

import sys

MODULE = "dockyard.compute.agent"


FORK_SERVER_FLAG = "--fork-server"


# How long the backend waits for the fork server's answer before it gives up on it.
REPLY_SECONDS = 10.0


# How long a new fork server may take to answer its first request (Python and the
# agent's imports on a busy host).
FIRST_REPLY_SECONDS = 60.0


# How long agents that end with their owner have to stop once it is gone.
OWNER_GONE_SECONDS = 30.0


def command() -> list[str]:
    """The fork server's command line (and so every agent's it forks)."""
    return [sys.executable, "-m", MODULE, FORK_SERVER_FLAG]
