"""What a job shares with the host and its other tenants, attacked from real jobs: the
kernel's keyrings (kept per uid, outside every namespace), the uid itself across two
servers on one host, the host's own and link-local addresses through the job's way out,
and what is left running once an instance's agent, or the Ray cluster it ran on, is gone
(docs/security.md)."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dockyard.compute.sandbox import routes as sandbox_routes
from tests.e2e.test_sandbox import attack, box, finish, job, report, run, why
from tests.harness import DockyardServer, instance_root, open_gate

__all__ = ["box"]  # the module's server, made by test_sandbox's fixture

# The key system calls in this machine's own table, and (x86_64) in i386's: reached
# with `int 0x80` from machine code the job maps itself, in a child, as a kernel without
# 32-bit emulation kills it for trying.
KEYRINGS = """
    import platform, subprocess
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    ADD_KEY, REQUEST_KEY, KEYCTL = {
        "x86_64": (248, 249, 250), "aarch64": (217, 218, 219)
    }[platform.machine()]
    USER_KEYRING, GET_KEYRING_ID, SEARCH = -4, 0, 10
    L = ctypes.c_long

    def call(nr, *args):
        got = libc.syscall(L(nr), *args)
        if got == -1:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return got

    def store():
        return call(ADD_KEY, b"user", b"dockyard-tenant", b"s3cr3t", L(6), L(USER_KEYRING))

    def search():
        return call(KEYCTL, L(SEARCH), L(USER_KEYRING), b"user", b"dockyard-tenant", L(0))

    attempt("keyctl", lambda: call(KEYCTL, L(GET_KEYRING_ID), L(USER_KEYRING), L(1)))
    attempt("request_key", lambda: call(REQUEST_KEY, b"user", b"dockyard-tenant", None, L(0)))
    if platform.machine() == "x86_64":
        attempt("x32 keyctl", lambda: call(KEYCTL | 0x40000000, L(0), L(USER_KEYRING), L(1)))
        i386 = "\\n".join([
            "import ctypes, mmap",
            # mov eax, 288 (keyctl); xor ebx, ebx; mov ecx, -4; xor edx, edx; int 0x80; ret
            "code = bytes.fromhex('B820010000' '31DB' 'B9FCFFFFFF' '31D2' 'CD80' 'C3')",
            "page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)",
            "page.write(code)",
            "address = ctypes.addressof(ctypes.c_char.from_buffer(page))",
            "print(ctypes.CFUNCTYPE(ctypes.c_int)(address)())",
        ])
        child = subprocess.run([sys.executable, "-c", i386], capture_output=True, text=True)
        # The kernel's answer: -EPERM is -1; a keyring's id is positive.
        REPORT["i386 keyctl"] = child.stdout.strip() or f"killed: {child.returncode}"
"""


def test_a_job_cannot_use_the_kernels_keyrings(box: DockyardServer) -> None:
    code = attack(
        KEYRINGS
        + """
    attempt("add_key", store)
    attempt("search", search)
    """
    )
    done = run(box, "keyrings", code)
    assert done["TrainingJobStatus"] == "Completed", why(done)
    got = report(box, "keyrings")
    # EPERM, from the sandbox's filter - not a key, nor ENOKEY or ENOSYS from a kernel
    # that let the call through.
    for call in ("keyctl", "add_key", "request_key", "search"):
        assert got[call] == "denied: PermissionError", got
    if "x32 keyctl" in got:
        assert got["x32 keyctl"] == "denied: PermissionError", got
        assert got["i386 keyctl"] in ("-1", "killed: -11"), got


@pytest.fixture(scope="module")
def other_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockyardServer]:
    """A second server on this host, with a data dir of its own."""
    server = DockyardServer(tmp_path_factory.mktemp("other") / "data")
    server.start()
    for bucket in ("results", "data"):
        (server.data_dir / "s3" / bucket).mkdir(parents=True, exist_ok=True)
    yield server
    server.stop()


def test_no_two_tenants_share_a_uid_or_a_key(
    box: DockyardServer, other_server: DockyardServer
) -> None:
    """One job stores a key in its user keyring and waits; another account's job on the
    same server, and the first account's namesake on a second server (which numbered its
    users from the same start before the host registry), look for it."""
    keeper = box.client()
    keeper.create_training_job(
        **job(
            box,
            "key-keeper",
            attack(
                KEYRINGS
                + """
    import pathlib, time
    attempt("add_key", store)
    REPORT["uid"] = os.getuid()
    pathlib.Path("/opt/ml/output/stored").touch()
    while not pathlib.Path("/opt/ml/input/go").exists():
        time.sleep(0.05)
    """
            ),
        )
    )
    home = instance_root(box, "key-keeper")
    deadline = time.monotonic() + 60
    while not (home / "opt" / "ml" / "output" / "stored").exists():
        assert time.monotonic() < deadline, "the keeper never stored its key"
        time.sleep(0.05)
    seeker = attack(KEYRINGS + '    attempt("search", search)\n    REPORT["uid"] = os.getuid()\n')
    _, other_key = box.new_account("key-seeker")
    box.own_bucket("seeker-space", key=other_key)
    same_server = run(box, "key-seeker", seeker, key=other_key, bucket="seeker-space")
    assert same_server["TrainingJobStatus"] == "Completed", why(same_server)
    on_other = run(other_server, "key-seeker-2", seeker)
    assert on_other["TrainingJobStatus"] == "Completed", why(on_other)
    open_gate(box, "key-keeper")
    kept = finish(keeper, "key-keeper")
    assert kept["TrainingJobStatus"] == "Completed", why(kept)

    stored = report(box, "key-keeper")
    found_here = report(box, "key-seeker", bucket="seeker-space")
    found_there = report(other_server, "key-seeker-2")
    assert stored["add_key"] == "denied: PermissionError", stored
    assert found_here["search"].startswith("denied"), found_here
    assert found_there["search"].startswith("denied"), found_there
    uids = {stored["uid"], found_here["uid"], found_there["uid"]}
    assert len(uids) == 3, f"two tenants share a uid: {stored}, {found_here}, {found_there}"


def _host_address() -> str | None:
    """One of this host's own non-loopback IPv4 addresses."""
    for network in sandbox_routes.host_addresses():
        if isinstance(network, ipaddress.IPv4Network) and network.prefixlen == 32:
            return str(network.network_address)
    return None


def test_a_job_cannot_reach_the_host_or_link_local_addresses(box: DockyardServer) -> None:
    host = _host_address()
    if host is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    # A service of the host's on all its addresses, as a database or a dashboard is.
    listener = socket.create_server(("0.0.0.0", 0))
    port = listener.getsockname()[1]
    listener.settimeout(0.2)
    reached: list[str] = []
    done_listening = threading.Event()

    def listen() -> None:
        while not done_listening.is_set():
            try:
                connection, peer = listener.accept()
                reached.append(str(peer))
                connection.close()
            except OSError:
                continue

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    code = attack(
        f"""
        def tcp(host, port):
            socket.create_connection((host, port), timeout=5).close()
            return "connected"

        def routed(host):
            # A UDP connect sends nothing: it only asks the namespace's routing.
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect((host, 9))
            return "routed"

        attempt("metadata", lambda: tcp("169.254.169.254", 80))
        attempt("metadata route", lambda: routed("169.254.169.254"))
        attempt("link-local route", lambda: routed("169.254.1.1"))
        attempt("host", lambda: tcp({host!r}, {port}))
        attempt("host route", lambda: routed({host!r}))
        attempt("gateway", lambda: tcp("10.0.2.2", {port}))
        attempt("dns's other port", lambda: tcp("10.0.2.3", {port}))
        attempt("pypi", lambda: tcp("pypi.org", 443))
        attempt("outside route", lambda: routed("151.101.0.223"))
        """
    )
    try:
        done = run(box, "host-prober", code)
    finally:
        done_listening.set()
        thread.join()
        listener.close()
    assert done["TrainingJobStatus"] == "Completed", why(done)
    got = report(box, "host-prober")
    for refused in ("metadata", "metadata route", "link-local route", "host", "host route"):
        assert got[refused] == "denied: PermissionError", got  # the namespace's refusal
    assert got["gateway"].startswith("denied") and got["dns's other port"].startswith("denied")
    assert not reached, reached
    # The way out still works: PyPI, and any other outside address.
    assert got["pypi"] == "connected", got
    assert got["outside route"] == "routed", got


def _is(pid: int, name: bytes) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return name in command and state != "Z"


def _wait_until(test: Any, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_slirp4netns_ends_with_a_killed_agent(box: DockyardServer) -> None:
    client = box.client()
    code = """
        import pathlib, time
        pathlib.Path("/opt/ml/output/running").touch()
        while not pathlib.Path("/opt/ml/input/go").exists():
            time.sleep(0.05)
    """
    client.create_training_job(**job(box, "orphan-maker", code))
    home = instance_root(box, "orphan-maker")
    _wait_until(lambda: (home / "opt/ml/output/running").exists(), "the job never ran")
    agent = int((home / "agent.pid").read_text())
    slirp = int((home.parent / "network" / "slirp.pid").read_text())
    assert _is(agent, b"dockyard.compute.agent") and _is(slirp, b"slirp4netns")
    os.kill(agent, signal.SIGKILL)
    _wait_until(lambda: not _is(slirp, b"slirp4netns"), "slirp4netns outlived its agent")
    assert box.process is not None
    serving = (box.process.pid,)
    _wait_until(lambda: not _processes_of(home.parent, but=serving), "a process outlived it")


def _processes_of(tree: Path, but: tuple[int, ...] = ()) -> list[tuple[int, str]]:
    """Live processes that have anything to do with `tree`: in their command line, as
    their working directory, or open (pid, command line)."""
    found = []
    mark = str(tree)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in (os.getpid(), *but):
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if not command or (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            links = [os.readlink(entry / "cwd")]
            links += [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except (OSError, IndexError):
            continue
        if mark in command or any(link.startswith(mark) for link in links):
            found.append((int(entry.name), command[:200]))
    return found


def test_nothing_of_a_ray_instance_outlives_its_cluster(tmp_path: Path) -> None:
    """A running job on a one-node Ray cluster: once the cluster is shut down, none of
    the data dir's fork server, agent, sandbox or slirp4netns runs on."""
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    from tests.e2e.test_ray import job as ray_job

    cluster = cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False}
    )
    server = DockyardServer(tmp_path / "data")
    shut_down = False
    try:
        cluster.add_node(
            num_cpus=1, resources={"dockyard/ml.m5.xlarge": 1, "dockyard/az/us-east-1a": 1}
        )
        server.extra_args = ["--backend", "ray", "--ray-address", str(cluster.address)]
        server.start(timeout=120)
        code = (
            "import pathlib, time; pathlib.Path('/opt/ml/output/running').touch(); time.sleep(600)"
        )
        server.client().create_training_job(**ray_job("outlived", code))
        instances = server.data_dir / "instances"
        _wait_until(
            lambda: list(instances.glob("*-outlived-*/algo-1/opt/ml/output/running")),
            "the job never ran",
            timeout=180,
        )
        [network] = instances.glob("*-outlived-*/network")
        assert _is(int((network / "slirp.pid").read_text()), b"slirp4netns")
        assert server.process is not None
        serving = (server.process.pid,)
        running = _processes_of(server.data_dir, but=serving)
        assert any("--fork-server" in command for _, command in running), running
        assert any("bwrap" in command for _, command in running), running

        cluster.shutdown()
        shut_down = True
        deadline = time.monotonic() + 120
        while left := _processes_of(server.data_dir, but=serving):
            assert time.monotonic() < deadline, f"left running: {left}"
            time.sleep(0.2)
    finally:
        if not shut_down:
            cluster.shutdown()
        server.stop()
