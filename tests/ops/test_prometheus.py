#!/usr/bin/python3
"""A real Prometheus server scrapes a 4-peer loopback swarm (rumor-peer --metrics-listen) every
second; through its HTTP API the test reads sum(rumor_exchanges_total), each series with the
time of its scrape, and count(rumor_peers_in_view{state="alive"}), and checks them against the
peers' own JSON-lines metrics files: every counter equals the lines its peer had written by the
time of that scrape (a small slack either side for the two clocks' reading), and the count is the
number of peers, each of which sees all of them. Skips (77) where /usr/bin/prometheus is missing.
Everything started is killed on the way out. About 25 s (the peers train 18 s, so that they are still
training when it queries, however slowly Prometheus starts).

usage: test_prometheus.py BUILD_DIR"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swarm import Swarm, free_port, http_get, skip  # noqa: E402

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
if not os.access(PROMETHEUS, os.X_OK):
    skip("prometheus is not installed (Debian package prometheus; examples/setup.sh installs it)")

build = os.path.abspath(sys.argv[1])
binary = os.path.join(build, "peer", "rumor-peer")
N = 4
# Which metrics lines each result of rumor_exchanges_total counts (docs/metrics.md).
LINE_OF = {"done": "exchange", "failed": "exchange_failed", "declined": "exchange_declined", "rejected": "rejected"}
# A counter is incremented just before its line is written, so every line timed before a scrape's
# timestamp (its start) is in the value; the value is read before the scrape times out (0.9 s), so
# no line timed later than that is. 0.05 s either way for the two clocks' reading (the lines carry
# a steady-clock time converted through the start line's wall-clock reading; Prometheus may align
# a timestamp by 2 ms).
SLACK_BEFORE, SLACK_AFTER = 0.05, 0.9 + 0.05

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


class Prometheus:
    def __init__(self, work, targets):
        self.work, self.port = work, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: rumor\n    static_configs:\n      - targets: ["
                    + ", ".join(f"'{t}'" for t in targets) + "]\n")
        self.log_path = os.path.join(work, "prometheus.log")
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={os.path.join(work, 'tsdb')}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def ready(self, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}:\n{open(self.log_path).read()}")
            try:
                if http_get(self.url + "/-/ready", timeout=1)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready in {timeout} s:\n{open(self.log_path).read()}")

    def query(self, q, at):
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": q, "time": f"{at:.3f}"})
        body = json.loads(http_get(url)[2])
        if body.get("status") != "success":
            raise RuntimeError(f"query {q}: {body}")
        return body["data"]["result"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


t_begin = time.time()
with tempfile.TemporaryDirectory(prefix="rumor-prometheus-") as work:
    prom = None
    try:
        with Swarm(binary, work, N, ["--duration", "18", "--throttle", "4", "--eval-every", "200"]) as swarm:
            prom = Prometheus(work, [p.metrics_address for p in swarm.peers])
            prom.ready(20)
            # Until every target is up and every peer sees the whole swarm (it scrapes every second).
            deadline = time.time() + 20
            while time.time() < deadline:
                now = time.time()
                up = prom.query("sum(up)", now)
                alive = prom.query('min(rumor_peers_in_view{state="alive"})', now)
                if up and float(up[0]["value"][1]) == N and alive and float(alive[0]["value"][1]) == N:
                    break
                time.sleep(0.5)
            time.sleep(3)  # a few scrapes of a training swarm
            # The queries below are separate requests: at `now`, a scrape stamped just before it
            # (its start) may be ingested between two of them, and sum() would not match the
            # series (CI saw it under load). A scrape ends within its 0.9 s timeout, so every
            # sample stamped before now - 1.5 s is in: all the queries see the same samples.
            at = time.time() - 1.5
            total = prom.query("sum(rumor_exchanges_total)", at)
            series = prom.query("rumor_exchanges_total", at)
            stamps = {(s["metric"]["peer"], s["metric"]["result"]): float(s["value"][1])
                      for s in prom.query("timestamp(rumor_exchanges_total)", at)}
            count = prom.query('count(rumor_peers_in_view{state="alive"})', at)
            alive = prom.query('rumor_peers_in_view{state="alive"}', at)
            training = prom.query('sum(rumor_phase{phase="training"})', at)
            codes = swarm.wait(60)
            check(codes == [0] * N, f"exit codes {codes}")

            # The peers' own files, read once they are complete.
            by_address = {p.address: p for p in swarm.peers}
            check(count and int(float(count[0]["value"][1])) == N, f'count(rumor_peers_in_view{{state="alive"}}) = {count}')
            check(sorted(s["metric"]["peer"] for s in alive) == sorted(by_address), f"peers labelled {alive}")
            check(all(float(s["value"][1]) == N for s in alive), f"a peer does not see all {N}: {alive}")
            check(training and float(training[0]["value"][1]) == N, f"peers in phase training: {training}")
            check(len(series) == 4 * N, f"{len(series)} rumor_exchanges_total series, want {4 * N}")
            total_value = float(total[0]["value"][1]) if total else -1
            check(total_value == sum(float(s["value"][1]) for s in series), "sum() differs from its series")
            low_sum = high_sum = 0
            for s in series:
                peer, result = s["metric"]["peer"], s["metric"]["result"]
                p = by_address[peer]
                lines = p.lines()
                unix = p.unix_of(lines)
                ts = stamps[(peer, result)]
                times = [unix(x["t"]) for x in lines if x["event"] == LINE_OF[result]]
                low = sum(1 for t in times if t <= ts - SLACK_BEFORE)
                high = sum(1 for t in times if t <= ts + SLACK_AFTER)
                value = float(s["value"][1])
                low_sum += low
                high_sum += high
                check(at - ts < 2.5, f"{p.name} {result}: last scrape {at - ts:.1f} s before the query")
                check(low <= value <= high,
                      f"{p.name} {result}: Prometheus has {value:g}, its file {low}..{high} lines by that scrape")
                if result == "done":
                    check(value > 0, f"{p.name}: no exchange done")
            check(low_sum <= total_value <= high_sum,
                  f"sum(rumor_exchanges_total) {total_value:g}, the files {low_sum}..{high_sum}")
            print(f"sum(rumor_exchanges_total) = {total_value:g} (files: {low_sum}..{high_sum} lines at the scrapes); "
                  f"count(rumor_peers_in_view{{state=\"alive\"}}) = {count and count[0]['value'][1]}", flush=True)
    finally:
        if prom:
            prom.stop()
    print(f"test_prometheus: {time.time() - t_begin:.1f} s, {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
