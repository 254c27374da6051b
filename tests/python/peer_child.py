#!/usr/bin/python3
"""A Python peer in its own process, for the tests that kill, stop or abandon one.

usage: peer_child.py MODE JOIN STALENESS SECONDS OUT N SEED
  MODE  raw: averaging only (no training) of N float32 values drawn from SEED, for SECONDS
        (0: until killed); then the final buffer goes to OUT (.npy) unless OUT is "-".
        noclose: binds, joins, then leaves main() without closing (atexit must do it).
  JOIN  HOST:PORT or "-" (a new swarm).
Prints "listening on HOST:PORT" once bound, "done" at the end.
"""
import math
import sys
import time

import numpy as np

import rumor


def main():
    mode, join, staleness, seconds, out, n, seed = sys.argv[1:8]
    n, seconds = int(n), float(seconds)
    peer = rumor.Peer(join=[] if join == "-" else [join], staleness=float(staleness), exchange_timeout=1.0,
                      seed=int(seed))
    flat = peer.bind(f"raw:test/p{n}/f32", n)
    flat[:] = np.random.default_rng(int(seed)).normal(size=n).astype(np.float32)
    print("listening on", peer.address, flush=True)
    peer.join(30)
    if mode == "noclose":
        time.sleep(0.5)
        print("done", flush=True)
        return 0
    live = flat.copy()
    end = time.monotonic() + seconds if seconds > 0 else math.inf
    while time.monotonic() < end:
        d = peer.begin_step()
        if d is not None:
            live += d
        flat[:] = live
        d = peer.end_step()
        if d is not None:
            live += d
        time.sleep(0.003)
    if out != "-":
        np.save(out, live)
    peer.close(settle=False)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
