"""One instance's confinement, as its agent uses it: sandbox, network, limits.

The agent makes it when its instance starts (joining the instances' network, making
the instance's cgroup, writing its sandbox's files) and closes it when the instance
ends. Everything that runs user code - a job, the install of its requirements, a
parked interpreter - is started through it, in a fresh sandbox each time.

Unconfined (`--unsafe-no-sandbox`, `JobSpec.unconfined`) the same calls run plain
child processes of the agent, with the job's tree where it is on this host; nothing
but the environment is kept from them, and EnableNetworkIsolation cannot be honoured.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from dockyard.compute.agent.env import build_env, container_env
from dockyard.compute.agent.files import freeze, hand_over
from dockyard.compute.agent.overlay import Overlay, OverlayError, addresses
from dockyard.compute.agent.zygote import BOOT, Zygote
from dockyard.compute.sandbox import seccomp as sandbox_seccomp
from dockyard.compute.sandbox.bwrap import (
    SYSTEM_PATH,
    VENV,
    Sandbox,
    SandboxDirs,
    SandboxError,
    make_owned_dir,
    unavailable,
    unavailable_message,
)
from dockyard.compute.sandbox.limits import Cgroup, Limits
from dockyard.compute.sandbox.limits import unavailable as limits_unavailable
from dockyard.compute.sandbox.network import HomeNetwork, NetworkError
from dockyard.compute.wire.layout import Layout
from dockyard.compute.wire.spec import JobSpec


class ConfinementError(Exception):
    """The instance cannot be confined; str() is an InternalServerError reason."""


@dataclass
class RunResult:
    code: int
    output: str


class Confinement:
    def __init__(
        self,
        layout: Layout,
        sandbox: Sandbox | None,
        network: HomeNetwork | None,
        cgroup: Cgroup | None,
        note: str | None = None,
    ) -> None:
        self.layout = layout
        self.sandbox = sandbox
        self.network = network
        self.cgroup = cgroup
        # Why the instance has no resource limits, when it has none (for the agent log).
        self.note = note
        self._keys: dict[tuple[str, bool, str], tuple[str, ...]] = {}
        self.overlay: Overlay | None = None  # the job network across machines, if any

    @property
    def uid(self) -> int | None:
        return self.sandbox.uid if self.sandbox else None

    # -- life -------------------------------------------------------------------------

    @classmethod
    def open(cls, spec: JobSpec, layout: Layout) -> Confinement:
        if spec.unconfined:
            if spec.network_isolation:
                raise ConfinementError(
                    "InternalServerError: EnableNetworkIsolation needs the job sandbox, and "
                    "this server runs jobs unconfined (--unsafe-no-sandbox)"
                )
            make_owned_dir(SandboxDirs(layout.root).home, os.getuid())
            return cls(layout, None, None, None)
        why = unavailable()
        if why is not None:
            raise ConfinementError(f"InternalServerError: {unavailable_message(why)}")
        uid = spec.sandbox_uid
        if uid is None:
            raise ConfinementError("InternalServerError: job.json names no sandbox uid")
        # Hosts on one machine share their home's namespace; a host whose peers are on
        # other machines has one of its own, joined to theirs by the job network.
        home = layout.root if spec.overlay else layout.root.parent
        network = HomeNetwork(home, spec.network_isolation)
        overlay = None
        try:
            netns = network.join(spec.host, os.getpid())
            if spec.overlay:
                overlay = Overlay(netns, spec.host, spec.hosts, spec.overlay)
        except (NetworkError, OverlayError) as exc:
            network.leave(spec.host)
            raise ConfinementError(
                f"InternalServerError: could not set up the job's network: {exc}"
            ) from exc
        try:
            limits = Limits.from_dict(spec.sandbox.get("limits"))
            cgroup = Cgroup.create(layout.root, limits)
            note = None
            if cgroup is None and limits.any:
                note = f"the instance runs without resource limits: {limits_unavailable()}"
            sandbox = Sandbox(
                root=layout.root,
                uid=uid,
                hostname=spec.host,
                hosts=tuple(spec.hosts),
                netns=netns,
                cgroup=cgroup,
                private=layout.root,
                gpus=tuple(spec.gpus),
                addresses=tuple(addresses(spec.hosts).items()) if overlay else (),
            )
            sandbox.write_files()
        except BaseException:
            if overlay is not None:
                overlay.close()
            network.leave(spec.host)
            raise
        confinement = cls(layout, sandbox, network, cgroup, note)
        confinement.overlay = overlay
        return confinement

    def close(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.overlay is not None:
            self.overlay.close()
            self.overlay = None
        if self.network is not None and self.sandbox is not None:
            self.network.leave(self.sandbox.hostname)

    # -- paths and environment ----------------------------------------------------------

    def inside(self, path: str | Path) -> str:
        return self.sandbox.inside(path) if self.sandbox else str(path)

    def _venv(self) -> Path | None:
        python = self.layout.venv / "bin" / "python"
        return self.layout.venv if python.exists() or python.is_symlink() else None

    def _installation(self, python: str) -> str:
        """The interpreter whose installation a sandbox shows for `python` (as the
        sandbox sees it): the venv's base, from the agent's own record of it - never
        from the venv's pyvenv.cfg, which the job's install could have rewritten."""
        if not python.startswith(VENV + "/"):
            return python
        try:
            base = json.loads(self.layout.venv_marker.read_text())["base"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfinementError(
                "InternalServerError: the instance's venv has no record of its interpreter"
            ) from exc
        return str(base)

    def base_env(self, python: str) -> dict[str, str]:
        if self.sandbox is not None:
            return self.sandbox.environment(python, self._venv() is not None)
        path = [str(Path(python).parent)] if Path(python).is_absolute() else []
        return {
            "PATH": ":".join([*path, SYSTEM_PATH]),
            "HOME": str(SandboxDirs(self.layout.root).home),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "DOCKYARD_CONTAINER_ROOT": str(self.layout.root),
        }

    def job_env(self, spec: JobSpec) -> dict[str, str]:
        env = build_env(spec, self.layout, self.base_env(self.inside(spec.python)))
        return container_env(env, self.layout) if self.sandbox else env

    def wipe_scratch(self) -> None:
        if self.sandbox is not None:
            self.sandbox.wipe_scratch()

    def hand_over(self) -> None:
        """The laid-out tree becomes the sandbox user's (its cache already is)."""
        if self.sandbox is None:
            return
        cache = self.layout.warm_pool_cache
        try:
            owned = os.lstat(cache).st_uid == self.sandbox.uid
        except OSError:
            owned = False
        hand_over(self.layout.opt_ml, self.sandbox.uid, skip=cache if owned else None)

    def take_back(self) -> None:
        """The tree becomes root's again (`freeze`), all but the pool's cache (which the
        agent never reads, only deletes): the job's sandbox is gone, but its other
        instances, the same user, may still run and hold a descriptor of it."""
        if self.sandbox is not None:
            freeze(self.layout.opt_ml, skip=self.layout.warm_pool_cache)

    def oom_kills(self) -> int:
        return self.cgroup.oom_kills() if self.cgroup else 0

    # -- starting user code -------------------------------------------------------------

    def _command(
        self,
        argv: list[str],
        python: str,
        *,
        install: bool = False,
        uv_cache: Path | None = None,
        info_fd: int | None = None,
        seccomp_fd: int | None = None,
    ) -> list[str]:
        if self.sandbox is None:
            return argv
        # An install may write the venv; a job sees it read-only.
        venv = self.layout.venv if install else self._venv()
        try:
            return self.sandbox.command(
                argv,
                self._installation(python),
                venv=venv,
                venv_writable=install,
                uv=uv_binary() if install else None,
                uv_cache=uv_cache,
                info_fd=info_fd,
                seccomp_fd=seccomp_fd,
            )
        except SandboxError as exc:
            raise ConfinementError(f"InternalServerError: {exc}") from exc

    def key(self, python: str) -> tuple[str, ...]:
        """What a parked interpreter was started as: one that differs cannot run a job."""
        # Asked on every warm start: what it depends on is the interpreter and whether
        # the venv exists (the rest of the sandbox is the instance's, fixed).
        memo = (python, self._venv() is not None, self._installation_record())
        found = self._keys.get(memo)
        if found is None:
            found = self._keys[memo] = (python, *self._command([python, "-c", BOOT], python))
        return found

    def _installation_record(self) -> str:
        try:
            return self.layout.venv_marker.read_text()
        except OSError:
            return ""

    def park(
        self,
        python: str,
        *,
        install: bool = False,
        uv_cache: Path | None = None,
        exec_only: bool = False,
        boot: str = BOOT,
        pass_fds: tuple[int, ...] = (),
    ) -> Zygote:
        """Start an interpreter (`python`, as the sandbox sees it) waiting for a job.

        Its environment is the sandbox's fixed base (bwrap, nsenter and setpriv run as
        root, so nothing a job chose may reach them); the job's comes with the job.
        One that will only `exec` a command (`exec_only`: a cold start of anything but
        `python SCRIPT`; an install) starts without `site`: nothing of an interpreter's
        own start outlives an exec, and site's imports cost more than the rest of it.
        `boot` is what it runs: `BOOT`, or a cluster node's command runner (`agent.exec`,
        `agent.shell`); `pass_fds` are descriptors it inherits (a shell's socket pair).
        """
        bare = exec_only or install
        seccomp = self._seccomp()
        try:
            info = os.pipe() if self.sandbox is not None else None
            try:
                command = self._command(
                    [python, "-S", "-c", boot] if bare else [python, "-c", boot],
                    python,
                    install=install,
                    uv_cache=uv_cache,
                    info_fd=info[1] if info else None,
                    seccomp_fd=seccomp,
                )
            except ConfinementError:
                if info:
                    os.close(info[0])
                    os.close(info[1])
                raise
            # Only a parked interpreter with `site` can stand for `python SCRIPT` later.
            key = ("install",) if install else ("exec",) if exec_only else self.key(python)
            fds = pass_fds if seccomp is None else (*pass_fds, seccomp)
            return Zygote.start(key, command, self.base_env(python), info, fds)
        finally:
            if seccomp is not None:
                os.close(seccomp)  # bwrap has its own (or never started)

    def _seccomp(self) -> int | None:
        """A descriptor of the sandbox's system-call filter for one start (none
        unconfined)."""
        if self.sandbox is None:
            return None
        try:
            return sandbox_seccomp.descriptor()
        except sandbox_seccomp.SeccompError as exc:
            raise ConfinementError(f"InternalServerError: {exc}") from exc

    def run(
        self,
        argv: list[str],
        python: str,
        env: dict[str, str],
        timeout: float,
        *,
        uv_cache: Path | None = None,
    ) -> RunResult:
        """Run a command to its end in a sandbox that may write the venv (installs)."""
        zygote = self.park(python, install=True, uv_cache=uv_cache)
        cwd = self.inside(self.layout.code_dir) if self.layout.code_dir.is_dir() else "/"
        message = {"exec": True, "argv": argv, "env": env, "cwd": cwd, "failure_file": "/dev/null"}
        process = zygote.activate(message)
        if process is None or process.stdout is None:
            zygote.end()
            return RunResult(127, "the sandbox did not start")
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            zygote.end()
            return RunResult(124, f"timed out after {timeout:.0f} seconds")
        code = zygote.end()
        return RunResult(code, output.decode(errors="replace"))


def uv_binary() -> str:
    """The uv dockyard depends on: the `uv` package's binary."""
    from uv import find_uv_bin

    try:
        return os.path.realpath(find_uv_bin())
    except FileNotFoundError as exc:
        raise ConfinementError("InternalServerError: uv is not installed beside dockyard") from exc
