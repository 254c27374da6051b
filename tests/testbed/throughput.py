#!/usr/bin/python3
"""A TCP sender and receiver for the testbed's shaping test: `recv PORT SECONDS` accepts one
connection and prints the bytes/s it received between its first byte plus WARMUP and the end;
`send HOST PORT SECONDS` sends zeros as fast as the socket takes them."""
import socket
import sys
import time

WARMUP = 0.5  # seconds skipped: TCP slow start and htb's initial burst


def recv(port, seconds):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(1)
    srv.settimeout(30)
    c, _ = srv.accept()
    c.settimeout(30)
    first = None
    counted = 0
    t_count = None
    end = None
    while True:
        b = c.recv(1 << 16)
        now = time.monotonic()
        if not b:
            break
        if first is None:
            first = now
            end = first + seconds
        if now - first >= WARMUP:
            if t_count is None:
                t_count = now
            else:
                counted += len(b)
        if now >= end:
            break
    c.close()
    el = time.monotonic() - t_count if t_count else 0
    print(f"{counted / el if el > 0 else 0:.0f}")


def send(host, port, seconds):
    s = socket.create_connection((host, port), timeout=30)
    buf = bytes(1 << 16)
    end = time.monotonic() + seconds + 1
    try:
        while time.monotonic() < end:
            s.sendall(buf)
    except (BrokenPipeError, ConnectionResetError):
        pass
    s.close()


if __name__ == "__main__":
    if sys.argv[1] == "recv":
        recv(int(sys.argv[2]), float(sys.argv[3]))
    else:
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
