"""rumor-run: start the peers of a swarm as torchrun starts the ranks of a job.

    rumor-run --nproc 4 train.py ARGS              4 local peers of any script
    rumor-run --nproc 4 -- rumor-peer ARGS         4 native peers
    rumor-run --join HOST:PORT train.py ARGS       one more peer, joining a running swarm
    srun rumor-run train.py ARGS                   one peer per Slurm task (several with --nproc)

Each process it starts gets, in its environment (rumor.Peer() and rumor.Peer.from_env() read
them; a rumor-peer child gets the same values as flags, unless ARGS already give that flag):

    RUMOR_SHARD=K/N        its share of the training set (--shard)
    RUMOR_NAME=pK          its name in log lines (--name)
    RUMOR_LISTEN=HOST:PORT where it accepts peers (--listen)
    RUMOR_JOIN=A,B         members to join through (--join); empty: a swarm of one
    RUMOR_MIN_PEERS=N      only when this launch starts a new swarm: train once N are in view,
                           from a shared initialisation (--min-peers)
    RUMOR_METRICS=FILE     with --metrics-dir: DIR/pK.jsonl (--metrics)
    RUMOR_METRICS_LISTEN=HOST:PORT  with --metrics-port BASE: its Prometheus endpoint and swarm
                           page at BASE + i, i its place among this launch's peers (under srun
                           BASE + SLURM_LOCALID x nproc + i) (--metrics-listen)
    RUMOR_RUN=1            a Python peer then takes SIGTERM as a graceful leave

A new swarm's join list is its two founders, peers 1 and 2 (each in its own list: they join each
other, and everyone else joins through either), as examples/slurm/rumor.sbatch builds it. Under
srun (SLURM_STEP_NODELIST and SLURM_PROCID set) the peers are numbered across the job's tasks
(K = SLURM_PROCID x nproc + i + 1, N = SLURM_NTASKS x nproc), listen on their node's address
(the node name resolved to IPv4, as every task resolves it, so ids agree) at port
BASE + SLURM_LOCALID x nproc + i, and the founders are the first peer of the first two nodes
(of a one-node step: its ports BASE and BASE+1).

Every line a peer prints comes out prefixed with its name ("[p2] ..."), on the stream it used.
SIGINT or SIGTERM to rumor-run: SIGTERM to every peer (a graceful leave: rumor-peer and Python
peers hand their model over and exit 0), SIGKILL to those still running --grace seconds later;
a second signal kills them at once. A peer that exits is reported at once with its code.
A peer that fails (a non-zero exit, a signal) does not stop the others by default
(--on-failure continue): a swarm drops a dead member from every view and the survivors finish,
which is the point of gossip; torchrun instead stops every rank when one fails, which
--on-failure stop does (SIGTERM to the others, SIGKILL after --grace). rumor-run never waits on
a dead peer: it watches the processes, not their pipes. Exit code: 0 when every peer exited 0
(finished, or left gracefully), else the first failure's (128 + N for a signal N); 124 after
--timeout; 2 for bad usage.
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

__all__ = ["main", "plan", "expand_hostlist"]


class UsageError(Exception):
    pass


def expand_hostlist(spec):
    """Slurm's compressed host list ("node[01-03,7],gpu1") as names, in order."""
    out = []
    for item in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", spec or ""):
        out.extend(_expand_one(item))
    return out


def _expand_one(item):
    m = re.search(r"\[([^\]]*)\]", item)
    if not m:
        return [item]
    head, tail = item[:m.start()], item[m.end():]
    names = []
    for part in m.group(1).split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            width = len(lo)
            for n in range(int(lo), int(hi) + 1):
                names.extend(_expand_one(f"{head}{n:0{width}d}{tail}"))
        else:
            names.extend(_expand_one(f"{head}{part}{tail}"))
    return names


def _ipv4(name):
    try:
        return socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except (socket.gaierror, IndexError) as e:
        raise UsageError(f"cannot resolve node '{name}' to an IPv4 address ({e})") from None


def _free_ports(host, n):
    """n distinct free TCP ports on `host`, all held open together while they are picked."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def plan(a, environ):
    """The peers to start: a list of dicts (index K, total N, name, listen, join, min_peers)."""
    slurm = a.slurm == "yes" or (a.slurm == "auto" and "SLURM_PROCID" in environ and "SLURM_STEP_NODELIST" in environ)
    if slurm:
        try:
            procid, ntasks = int(environ["SLURM_PROCID"]), int(environ["SLURM_NTASKS"])
            localid = int(environ.get("SLURM_LOCALID", "0"))
        except (KeyError, ValueError) as e:
            raise UsageError(f"under Slurm, SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID must be integers ({e})")
        nodes = expand_hostlist(environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST", ""))
        if not nodes:
            raise UsageError("under Slurm, SLURM_STEP_NODELIST is empty")
        if a.host:
            addr = {n: a.host for n in nodes}
        else:
            addr = {n: _ipv4(n) for n in nodes}
            if len(nodes) > 1 and any(v.startswith("127.") for v in addr.values()):
                raise UsageError("a node name resolves to a loopback address in a job of several nodes: fix the "
                                 "hosts' name resolution (/etc/hosts), or give --host for a one-node job")
        node = environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
        host = a.host or addr.get(node) or _ipv4(node)
        base = a.port or int(environ.get("RUMOR_PORT_BASE", "7000"))
        first, total = procid * a.nproc, ntasks * a.nproc
        ports = [base + localid * a.nproc + i for i in range(a.nproc)]
        if len(nodes) >= 2:
            founders = [f"{addr[nodes[0]]}:{base}", f"{addr[nodes[1]]}:{base}"]
        else:
            founders = [f"{addr[nodes[0]]}:{base}", f"{addr[nodes[0]]}:{base + 1}"][:min(2, total)]
    else:
        host = a.host or "127.0.0.1"
        first, total = 0, a.nproc
        ports = [a.port + i for i in range(a.nproc)] if a.port else _free_ports(host, a.nproc)
        founders = [f"{host}:{p}" for p in ports[:2]]
    founders = list(dict.fromkeys(founders))  # --host for several nodes: one address
    if a.join:
        join, min_peers = a.join, None  # a running swarm: take its model (no min_peers)
    else:
        join, min_peers = (founders if total >= 2 else []), total
    # The HTTP endpoints: on the peers' host at --metrics-port + the peer's place on this node.
    first_local = localid * a.nproc if slurm else 0
    peers = []
    for i, port in enumerate(ports):
        k = first + i + 1
        metrics = _host_port(host, a.metrics_port + first_local + i) if a.metrics_port else None
        peers.append(dict(k=k, n=total, name=f"{a.name_prefix}{k}", listen=_host_port(host, port), join=join,
                          min_peers=min_peers, metrics_listen=metrics))
    return peers


def _host_port(host, port):
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _has_flag(args, flag):
    return any(x == flag or x.startswith(flag + "=") for x in args)


def command_for(a, peer, rumor_peer):
    """The argv of one peer's process."""
    cmd = list(a.command)
    if cmd[0] == "-m" or cmd[0].endswith(".py"):
        return [sys.executable, "-u"] + cmd
    if os.path.basename(cmd[0]) == "rumor-peer":
        if os.sep not in cmd[0] and shutil.which(cmd[0]) is None and rumor_peer and os.path.exists(rumor_peer):
            cmd[0] = rumor_peer  # the build tree's, when none is on PATH
        args = cmd[1:]
        extra = [("--listen", peer["listen"]), ("--shard", f"{peer['k']}/{peer['n']}"), ("--name", peer["name"])]
        if peer["join"]:
            extra.append(("--join", ",".join(peer["join"])))
        if peer["min_peers"] and peer["min_peers"] > 1:
            extra.append(("--min-peers", str(peer["min_peers"])))
        if a.metrics_dir:
            extra.append(("--metrics", os.path.join(a.metrics_dir, peer["name"] + ".jsonl")))
        if peer.get("metrics_listen"):
            extra.append(("--metrics-listen", peer["metrics_listen"]))
        for flag, value in extra:
            if not _has_flag(args, flag):
                cmd += [flag, value]
    return cmd


def environment_for(a, peer, base):
    env = dict(base)
    env.update(RUMOR_SHARD=f"{peer['k']}/{peer['n']}", RUMOR_NAME=peer["name"], RUMOR_LISTEN=peer["listen"],
               RUMOR_JOIN=",".join(peer["join"]), RUMOR_RUN="1", PYTHONUNBUFFERED="1")
    env.pop("RUMOR_MIN_PEERS", None)
    env.pop("RUMOR_METRICS", None)
    env.pop("RUMOR_METRICS_LISTEN", None)
    if peer.get("metrics_listen"):
        env["RUMOR_METRICS_LISTEN"] = peer["metrics_listen"]
    if peer["min_peers"] and peer["min_peers"] > 1:
        env["RUMOR_MIN_PEERS"] = str(peer["min_peers"])
    if a.metrics_dir:
        env["RUMOR_METRICS"] = os.path.join(a.metrics_dir, peer["name"] + ".jsonl")
    # Python scripts import the same rumor package as this launcher.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        env["PYTHONPATH"] = os.pathsep.join([root] + paths)
    return env


def _child_setup():
    """In the child, before exec: its own process group (a terminal's Ctrl-C reaches rumor-run,
    which forwards it once, not every peer twice) and SIGTERM when rumor-run dies (no orphans)."""
    os.setpgid(0, 0)
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class _Output:
    """Copies a child's stream to ours line by line, each line prefixed with the peer's name."""

    lock = threading.Lock()

    def __init__(self, stream, name, dest):
        self.thread = threading.Thread(target=self._copy, args=(stream, name.encode(), dest), daemon=True)
        self.thread.start()

    @classmethod
    def _copy(cls, stream, name, dest):
        out = dest.buffer if hasattr(dest, "buffer") else dest
        prefix = b"[" + name + b"] "
        for line in iter(stream.readline, b""):
            if not line.endswith(b"\n"):
                line += b"\n"
            with cls.lock:
                try:
                    out.write(prefix + line)
                    out.flush()
                except (OSError, ValueError):
                    pass
        stream.close()


def _exit_code(rc):
    return 128 - rc if rc < 0 else rc


def _describe(rc):
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit {rc}"


def say(msg):
    with _Output.lock:
        print(f"rumor-run: {msg}", file=sys.stderr, flush=True)


def run(a, rumor_peer=None, environ=None):
    environ = dict(os.environ if environ is None else environ)
    peers = plan(a, environ)
    if a.metrics_dir:
        os.makedirs(a.metrics_dir, exist_ok=True)
    stop = {"signal": None, "count": 0}

    def on_signal(signum, frame):
        stop["signal"] = signum
        stop["count"] += 1

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    procs, outputs = [], []
    t0 = time.monotonic()
    try:
        for p in peers:
            cmd = command_for(a, p, rumor_peer)
            try:
                proc = subprocess.Popen(cmd, env=environment_for(a, p, environ), stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_child_setup)
            except OSError as e:
                say(f"cannot start {p['name']}: {' '.join(cmd)}: {e}")
                for q, _ in procs:
                    q.kill()
                return 2 if isinstance(e, FileNotFoundError) else 1
            procs.append((proc, p))
            outputs += [_Output(proc.stdout, p["name"], sys.stdout), _Output(proc.stderr, p["name"], sys.stderr)]
        join = ",".join(peers[0]["join"]) or "(none: a swarm of one)"
        say(f"started {len(procs)} peer(s) {peers[0]['name']}..{peers[-1]['name']} of {peers[0]['n']}, "
            f"shards {peers[0]['k']}..{peers[-1]['k']}/{peers[0]['n']}, listening on "
            f"{','.join(p['listen'] for p in peers)}; join list {join}; "
            + (f"metrics and swarm pages on {','.join(p['metrics_listen'] for p in peers)}; "
               if peers[0].get("metrics_listen") else "")
            + f"{'pids ' + ' '.join(str(q.pid) for q, _ in procs)}")
        return _watch(a, procs, stop, t0)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for proc, _ in procs:  # whatever happened above, no peer (nor what it started) outlives rumor-run
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        for o in outputs:
            o.thread.join(timeout=2.0)


def _watch(a, procs, stop, t0):
    first_failure = None
    timed_out = False
    stopping_since = None  # when SIGTERM went to the peers still running
    killed = False
    live = {proc.pid: (proc, p) for proc, p in procs}
    while live:
        for pid, (proc, p) in list(live.items()):
            rc = proc.poll()
            if rc is None:
                continue
            del live[pid]
            seconds = time.monotonic() - t0
            if rc == 0:
                say(f"{p['name']} finished (exit 0) after {seconds:.1f} s")
                continue
            say(f"{p['name']} failed ({_describe(rc)}) after {seconds:.1f} s"
                + (f"; {len(live)} peer(s) still running" if live else ""))
            if first_failure is None:
                first_failure = _exit_code(rc)
            if a.on_failure == "stop" and live and stopping_since is None:
                say(f"--on-failure stop: stopping the other {len(live)} peer(s) (SIGTERM, SIGKILL after {a.grace:g} s)")
                stopping_since = _terminate(live)
        if not live:
            break
        if stop["signal"] is not None and stopping_since is None:
            say(f"{signal.Signals(stop['signal']).name}: the peers leave the swarm (SIGTERM; SIGKILL after "
                f"{a.grace:g} s, or at a second signal)")
            stopping_since = _terminate(live)
        if a.timeout and not timed_out and time.monotonic() - t0 > a.timeout:
            timed_out = True
            say(f"--timeout {a.timeout:g} s passed: stopping the {len(live)} peer(s) still running")
            if stopping_since is None:
                stopping_since = _terminate(live)
        if stopping_since is not None and not killed and (
                time.monotonic() - stopping_since > a.grace or stop["count"] >= 2):
            killed = True
            say(f"SIGKILL to {', '.join(p['name'] for _, p in live.values())}")
            for proc, _ in live.values():
                _signal_group(proc, signal.SIGKILL)
        time.sleep(0.05)
    if timed_out:
        return 124
    return first_failure or 0


def _signal_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)  # the peer and whatever it started
    except (ProcessLookupError, PermissionError):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass


def _terminate(live):
    for proc, _ in live.values():
        _signal_group(proc, signal.SIGTERM)
    return time.monotonic()


def parser():
    ap = argparse.ArgumentParser(
        prog="rumor-run", description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="rumor-run [options] SCRIPT.py [ARGS] | -m MODULE [ARGS] | -- COMMAND [ARGS]")
    ap.add_argument("--nproc", "--nproc-per-node", type=int, default=1, metavar="N",
                    help="peers to start here (under srun: per task) (default 1)")
    ap.add_argument("--join", default=None, metavar="HOST:PORT[,...]",
                    help="join a running swarm through these members instead of starting a new one")
    ap.add_argument("--host", default=None,
                    help="the address the peers listen on (default 127.0.0.1; under srun this node's address)")
    ap.add_argument("--port", type=int, default=0, metavar="BASE",
                    help="peer i listens on BASE+i (default: free ports; under srun RUMOR_PORT_BASE or 7000, "
                         "+ SLURM_LOCALID x nproc)")
    ap.add_argument("--name-prefix", default="p", metavar="P", help="peer K is named PK (default p)")
    ap.add_argument("--metrics-dir", default=None, metavar="DIR",
                    help="each peer writes its metrics to DIR/NAME.jsonl (RUMOR_METRICS, rumor-peer --metrics)")
    ap.add_argument("--metrics-port", type=int, default=0, metavar="BASE",
                    help="peer i serves /metrics (Prometheus) and its swarm page on the peers' host at BASE+i "
                         "(under srun BASE + SLURM_LOCALID x nproc + i) (RUMOR_METRICS_LISTEN, rumor-peer "
                         "--metrics-listen) (default: none)")
    ap.add_argument("--on-failure", choices=("continue", "stop"), default="continue",
                    help="when a peer fails: the others go on (default; the swarm drops the dead one) or are "
                         "stopped as torchrun does")
    ap.add_argument("--grace", type=float, default=30.0, metavar="SEC",
                    help="seconds between SIGTERM and SIGKILL when stopping peers (default 30)")
    ap.add_argument("--timeout", type=float, default=0.0, metavar="SEC",
                    help="stop every peer after SEC seconds and exit 124 (default 0: no limit)")
    ap.add_argument("--slurm", choices=("auto", "yes", "no"), default="auto",
                    help="read Slurm's task variables (auto: when run by srun)")
    return ap


def _split(ap, argv):
    """Our options, then the command: the first word that is not one of ours (or follows --)."""
    takes_value = {s for act in ap._actions if act.nargs != 0 and act.option_strings for s in act.option_strings}
    i = 0
    while i < len(argv):
        w = argv[i]
        if w == "--":
            return argv[:i], argv[i + 1:]
        if w == "-m" or not w.startswith("-"):
            return argv[:i], argv[i:]
        i += 2 if (w in takes_value and "=" not in w) else 1
    return argv, []


def parse(argv):
    ap = parser()
    ours, command = _split(ap, list(argv))
    a = ap.parse_args(ours)
    a.command = command
    if not a.command:
        ap.error("no command: give SCRIPT.py [ARGS], -m MODULE [ARGS] or -- COMMAND [ARGS]")
    if a.command[0] == "-m" and len(a.command) < 2:
        ap.error("-m needs a module name")
    if a.nproc < 1:
        ap.error(f"--nproc {a.nproc}: at least 1")
    if a.port and not 0 < a.port < 65536:
        ap.error(f"--port {a.port}: expected 1..65535")
    if a.grace < 0 or a.timeout < 0:
        ap.error("--grace and --timeout take seconds >= 0")
    if a.join is not None:
        a.join = [j for j in a.join.split(",") if j]
        for j in a.join:
            host, sep, port = j.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                ap.error(f"--join {j!r}: expected HOST:PORT[,HOST:PORT...]")
        if not a.join:
            ap.error("--join: give at least one HOST:PORT")
    return a


def main(argv=None, rumor_peer=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    try:
        return run(a, rumor_peer=rumor_peer or os.environ.get("RUMOR_PEER"))
    except UsageError as e:
        say(str(e))
        return 2


if __name__ == "__main__":
    sys.exit(main())
