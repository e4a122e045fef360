"""`python -m dockyard.compute.agent ROOT`: an instance's agent (`instance`);
`python -m dockyard.compute.agent --fork-server`: the local backend's source of agents
(`fork_server`), which is not an agent itself.

Both are imported before either runs: the fork server's children become agents without
importing anything more (that is the fork server's point).
"""

from __future__ import annotations

import sys

from dockyard.compute.agent import fork_server, instance
from dockyard.compute.wire.forks import FORK_SERVER_FLAG


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == [FORK_SERVER_FLAG]:
        return fork_server.serve()
    return instance.main(args)


if __name__ == "__main__":
    sys.exit(main())
