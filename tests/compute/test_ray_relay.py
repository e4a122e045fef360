"""The relay a Ray node's actor opens for one shell session (`backends.ray_host.relay_one`):
only a connection that starts with the one-time token is joined to the agent's
session, and each direction's end is passed on without cutting the other."""

from __future__ import annotations

import secrets
import socket
import threading

from dockyard.compute.backends.ray_host import TOKEN_BYTES, relay_one


def test_only_the_token_gets_through_and_ends_pass_on() -> None:
    agent, upstream = socket.socketpair()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    token = secrets.token_bytes(TOKEN_BYTES)
    relay = threading.Thread(target=relay_one, args=(listener, token, upstream))
    relay.start()

    intruder = socket.create_connection(("127.0.0.1", port), timeout=10)
    intruder.sendall(secrets.token_bytes(TOKEN_BYTES) + b"let me in")
    try:
        assert intruder.recv(100) == b""  # cut off ...
    except ConnectionResetError:
        pass  # ... with what it sent unread
    intruder.close()

    client = socket.create_connection(("127.0.0.1", port), timeout=10)
    client.sendall(token + b"hello")
    agent.settimeout(10)
    assert agent.recv(100) == b"hello"
    agent.sendall(b"back")
    assert client.recv(100) == b"back"
    client.shutdown(socket.SHUT_WR)  # the client is done sending ...
    assert agent.recv(100) == b""
    agent.sendall(b"exit status")  # ... and still gets the rest
    assert client.recv(100) == b"exit status"
    agent.close()
    assert client.recv(100) == b""
    relay.join(timeout=10)
    assert not relay.is_alive()
    client.close()
