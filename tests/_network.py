"""Network helpers shared by the tests that start several processes."""

import socket


def free_ports(count):
    """``count`` TCP ports free on 127.0.0.1 right now (bound once, then released)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
