"""Is anything there? A bounded check of ``execution.ray_address`` before Ray is asked.

``ray.init(address=...)`` on an address where no cluster runs does not fail: Ray's GCS client
retries for as long as the process lives (an unreachable address hung ``run`` for over 270 s
with no line, and Ray's C++ wait did not even let a SIGTERM through). So before Ray is called,
the address gets a plain TCP connection and the HTTP/2 connection preface every gRPC server (a
Ray head's GCS, a Ray client server) answers with its SETTINGS frame, each bounded by a timeout.
Standard library only.
"""

from __future__ import annotations

import socket

#: The client connection preface of HTTP/2 (RFC 9113, 3.4) and an empty SETTINGS frame.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
#: An HTTP/2 frame header is 9 bytes; byte 3 is the frame type, 4 is SETTINGS.
FRAME_HEADER = 9
SETTINGS = 4
#: The GCS port of a head started with ``ray start --head`` and no ``--port``.
DEFAULT_GCS_PORT = 6379
#: Addresses Ray resolves itself (the local machine's running cluster): not probed.
RESOLVED_BY_RAY = frozenset({"", "auto", "local"})


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``ray://`` and IPv6 brackets allowed; no port: Ray's GCS default).

    >>> split_address("ray://10.0.0.5:10001"), split_address("[::1]:6380"), split_address("head")
    (('10.0.0.5', 10001), ('::1', 6380), ('head', 6379))
    """
    target = address.strip().removeprefix("ray://")
    host, colon, port_text = target.rpartition(":")
    if not colon or host.endswith(":") or (host.count(":") and not host.startswith("[")):
        host, port_text = target, str(DEFAULT_GCS_PORT)
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"port {port_text!r} is not a number") from None
    if not 0 < port < 65536:
        raise ValueError(f"port {port} is outside 1..65535")
    return host, port


def address_problem(address: str, timeout_s: float = 5.0) -> str | None:
    """Why no Ray cluster can be reached at ``address``, or None when a gRPC server answers
    there within ``timeout_s`` (what Ray's head and client servers are)."""
    if address.strip().removeprefix("ray://") in RESOLVED_BY_RAY:
        return None
    try:
        host, port = split_address(address)
    except ValueError as error:
        return f"{address!r} is not HOST:PORT ({error})"
    where = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            conn.settimeout(timeout_s)
            conn.sendall(HTTP2_PREFACE)
            head = b""
            while len(head) < FRAME_HEADER:
                chunk = conn.recv(FRAME_HEADER - len(head))
                if not chunk:
                    break
                head += chunk
    except socket.gaierror as error:
        return f"cannot resolve the host {host!r} ({error.strerror or error})"
    except TimeoutError:
        return f"nothing answered at {where} within {timeout_s:g} s"
    except OSError as error:
        return f"cannot connect to {where} ({error.strerror or error})"
    if len(head) < FRAME_HEADER or head[3] != SETTINGS:
        return f"{where} accepts connections but does not answer as a Ray cluster (no gRPC server)"
    return None


__all__ = ["address_problem", "split_address"]
