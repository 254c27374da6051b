#!/usr/bin/python3
"""rumor-peer --metrics-listen, scraped directly (no Prometheus server): a 2-peer loopback swarm
of synthetic-data peers; /metrics parsed with prometheus_client's strict text parser and checked
for every series docs/metrics.md lists, its type, its labels and values a user relies on; then
/status.json, /, the HTTP errors, the flag errors (a port in use, a bad address) and, where the
Python module is built, rumor.Peer(metrics_listen=...). About 10 s.

usage: test_metrics_endpoint.py BUILD_DIR"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swarm import Swarm, http_get, skip  # noqa: E402

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    skip("python3-prometheus-client is not installed (examples/setup.sh installs it)")

build = os.path.abspath(sys.argv[1])
binary = os.path.join(build, "peer", "rumor-peer")

# Every family of docs/metrics.md with its type. prometheus_client names counters without _total.
FAMILIES = {
    "rumor_steps": "counter", "rumor_samples": "counter", "rumor_exchanges": "counter",
    "rumor_sent_bytes": "counter", "rumor_received_bytes": "counter", "rumor_staleness_waits": "counter",
    "rumor_staleness_wait_seconds": "counter", "rumor_stale_exchanges": "counter",
    "rumor_state_transfers": "counter", "rumor_handovers": "counter", "rumor_robust": "counter",
    "rumor_peers_in_view": "gauge", "rumor_clock": "gauge", "rumor_slowest_clock": "gauge",
    "rumor_test_accuracy": "gauge", "rumor_test_loss": "gauge", "rumor_samples_per_second": "gauge",
    "rumor_consensus_distance": "gauge", "rumor_phase": "gauge",
    "rumor_exchange_duration_seconds": "histogram", "rumor_exchange_payload_bytes": "histogram",
}
SYNTHETIC_PARAMS = 50826  # mlp:64-256-128-10 on --data synthetic: each snapshot is 4 bytes a parameter

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def scrape(address):
    status, headers, body = http_get(f"http://{address}/metrics")
    check(status == 200, f"/metrics status {status}")
    check(headers.get("Content-Type", "").startswith("text/plain"), f"/metrics content type {headers.get('Content-Type')}")
    fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
    return fams


def one(fams, name, **labels):
    vals = [s.value for s in fams[name].samples
            if s.name == name or s.name == name + "_total"
            if all(s.labels.get(k) == v for k, v in labels.items())]
    check(len(vals) == 1, f"{name}{labels}: {len(vals)} samples")
    return vals[0] if vals else float("nan")


def check_scrape(peer, fams):
    for name, kind in FAMILIES.items():
        check(name in fams, f"{peer.name}: family {name} missing")
        if name in fams:
            check(fams[name].type == kind, f"{name} is a {fams[name].type}, not a {kind}")
            check(bool(fams[name].documentation), f"{name} has no HELP")
            for s in fams[name].samples:
                check(s.labels.get("peer") == peer.address and s.labels.get("name") == peer.name,
                      f"{s.name}{s.labels}: want peer={peer.address} name={peer.name}")
    results = {s.labels["result"] for s in fams["rumor_exchanges"].samples if s.name == "rumor_exchanges_total"}
    check(results == {"done", "declined", "failed", "rejected"}, f"exchange results {results}")
    done = one(fams, "rumor_exchanges", result="done")
    check(done > 0, f"{peer.name}: no exchange done after seconds of training ({done})")
    check(one(fams, "rumor_peers_in_view", state="alive") == 2, f"{peer.name}: alive != 2")
    check(one(fams, "rumor_peers_in_view", state="suspect") == 0, f"{peer.name}: suspect != 0")
    phases = {s.labels["phase"]: s.value for s in fams["rumor_phase"].samples}
    check(sorted(v for v in phases.values()) == [0] * (len(phases) - 1) + [1], f"phase gauge {phases}")
    check(phases.get("training") == 1, f"{peer.name} not in phase training: {phases}")
    check(set(phases) >= {"joining", "training", "settling", "leaving"}, f"phases {sorted(phases)}")
    clock = one(fams, "rumor_clock")
    check(clock > 0 and one(fams, "rumor_steps") == clock, f"steps_total vs clock {clock}")
    check(one(fams, "rumor_samples") == 64 * clock, "samples_total != 64 x steps (batch 64)")
    check(one(fams, "rumor_slowest_clock") <= clock + 10**6, "slowest clock")
    acc = one(fams, "rumor_test_accuracy")
    check(0 < acc <= 1, f"test accuracy {acc}")
    check(one(fams, "rumor_test_loss") > 0, "test loss")
    check(one(fams, "rumor_samples_per_second") > 0, "samples/s gauge is 0 after seconds of training")
    check(one(fams, "rumor_sent_bytes") > 0 and one(fams, "rumor_received_bytes") > 0, "bytes counters")
    for h in ("rumor_exchange_duration_seconds", "rumor_exchange_payload_bytes"):
        buckets = [(float(s.labels["le"]), s.value) for s in fams[h].samples if s.name == h + "_bucket"]
        counts = [v for _, v in sorted(buckets)]
        check(counts == sorted(counts), f"{h}: buckets not cumulative {counts}")
        total = [s.value for s in fams[h].samples if s.name == h + "_count"][0]
        check(counts and counts[-1] == total, f"{h}: +Inf bucket {counts[-1:]} != count {total}")
    pay_n = [s.value for s in fams["rumor_exchange_payload_bytes"].samples if s.name.endswith("_count")][0]
    pay_sum = [s.value for s in fams["rumor_exchange_payload_bytes"].samples if s.name.endswith("_sum")][0]
    # One observation per exchange done; a scrape of a live peer can land between an exchange's
    # payload observation and its counter (a CI run saw 3307 against 3306), at most one per
    # exchange in flight (2).
    check(0 <= pay_n - done <= 2, f"payload histogram count {pay_n} vs exchanges done {done}")
    check(abs(pay_sum - pay_n * SYNTHETIC_PARAMS * 4) < 1e-6 * pay_sum + 1, f"payload bytes {pay_sum}/{pay_n}")
    dur_n = [s.value for s in fams["rumor_exchange_duration_seconds"].samples if s.name.endswith("_count")][0]
    check(0 < dur_n <= done, f"duration histogram count {dur_n} (initiators only) vs done {done}")
    return done


def check_status_and_page(peer, others):
    time.sleep(1.2)  # the first read asks for snapshots; the next one within a second gets one
    deadline = time.time() + 5
    while True:
        status, headers, body = http_get(f"http://{peer.metrics_address}/status.json")
        st = json.loads(body)
        if st.get("ready") or time.time() > deadline:
            break
        time.sleep(0.3)
    check(headers.get("Content-Type") == "application/json", f"status.json type {headers.get('Content-Type')}")
    check(headers.get("Access-Control-Allow-Origin") == "*", "status.json has no CORS header")
    check(st.get("ready") is True, f"status.json not ready: {st}")
    check(st.get("peer") == peer.address and st.get("metrics") == peer.metrics_address, "status.json ids")
    ids = sorted(m["id"] for m in st.get("members", []))
    check(ids == sorted([peer.address] + [o.address for o in others]), f"members {ids}")
    check([m["self"] for m in st["members"] if m["id"] == peer.address] == [True], "self flag")
    check(st.get("members_total") == len(others) + 1, f"members_total {st.get('members_total')}")
    check(all(m["state"] == "alive" and m["clock"] >= 0 for m in st["members"]), f"member rows {st['members']}")
    check(len(st["evals"]["rows"]) >= 2, f"eval history {st['evals']}")
    check(len(st["history"]["rows"]) >= 1, "rate history empty")
    check("unknown" in st.get("members_accuracy", ""), "status.json must say members' accuracy is unknown")
    status, headers, body = http_get(f"http://{peer.metrics_address}/")
    page = body.decode()
    check(headers.get("Content-Type", "").startswith("text/html"), "/ is not html")
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", page, re.I)
    check("<script>" in page and "<style>" in page and all(r.startswith("data:") for r in refs),
          f"the page must inline its script and style: it refers to {refs}")
    check("http://" not in page and "https://" not in page and "@import" not in page, "the page refers to an outside address")
    for path, method, want in (("/nope", "GET", 404), ("/", "POST", 405)):
        req = urllib.request.Request(f"http://{peer.metrics_address}{path}", method=method, data=b"" if method == "POST" else None)
        try:
            code = urllib.request.urlopen(req, timeout=5).status
        except urllib.error.HTTPError as e:
            code = e.code
        check(code == want, f"{method} {path}: {code}, want {want}")


def check_flag_errors(work):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        r = subprocess.run([binary, "--data", "synthetic", "--steps", "10", "--metrics-listen", f"127.0.0.1:{port}"],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 2, f"port in use: exit {r.returncode}, want 2")
        check("--metrics-listen" in r.stderr and "in use" in r.stderr, f"port in use, message: {r.stderr[-300:]}")
        check("step 0" not in r.stderr, "trained although its endpoint could not listen")
    for bad in ("127.0.0.1", "127.0.0.1:99999", "nosuch.invalid:9100"):
        r = subprocess.run([binary, "--data", "synthetic", "--steps", "10", "--metrics-listen", bad],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 2 and "--metrics-listen" in r.stderr, f"{bad}: exit {r.returncode}: {r.stderr[-300:]}")
    h = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    check("--metrics-listen" in h.stdout, "--help does not list --metrics-listen")


def check_python():
    try:
        import rumor
    except ImportError as e:
        print(f"note: the Python module is not built ({e}); rumor.Peer(metrics_listen=) not checked", flush=True)
        return
    p = rumor.Peer(metrics_listen="127.0.0.1:0", name="py")
    try:
        p.bind("test:metrics", 10)
        p_address = p.metrics_address
        fams = scrape(p.metrics_address)
        labels = [s.labels for s in fams["rumor_clock"].samples]
        check(labels == [{"peer": p.address, "name": "py"}], f"python peer labels {labels}")
        q = rumor.Peer(metrics_listen=p.metrics_address)
        try:
            q.bind("test:metrics", 10)
            check(False, "a second Python peer bound a metrics port in use")
        except ValueError as e:
            check("metrics_listen" in str(e), f"python error names the keyword: {e}")
    finally:
        p.close(2)
    # close() stops the endpoint with the network: the port is free for the next peer.
    r = rumor.Peer(metrics_listen=p_address)
    try:
        r.bind("test:metrics", 10)
        check(r.metrics_address == p_address, f"after close, a new peer got {r.metrics_address}, want {p_address}")
    finally:
        r.close(2)


with tempfile.TemporaryDirectory(prefix="rumor-metrics-") as work:
    t0 = time.time()
    with Swarm(binary, work, 2, ["--duration", "5", "--throttle", "3", "--eval-every", "100"]) as swarm:
        # Until both train and have exchanged (a scrape before that sees phase min_peers).
        deadline = time.time() + 20
        while time.time() < deadline:
            fams = [scrape(p.metrics_address) for p in swarm.peers]
            if all(one(f, "rumor_phase", phase="training") == 1 and one(f, "rumor_exchanges", result="done") > 0
                   and one(f, "rumor_samples_per_second") > 0 for f in fams):
                break
            time.sleep(0.3)
        failures.clear()  # the polling above may have failed checks while the swarm was starting
        dones = [check_scrape(p, scrape(p.metrics_address)) for p in swarm.peers]
        check_status_and_page(swarm.peers[0], swarm.peers[1:])
        codes = swarm.wait(60)
        check(codes == [0, 0], f"exit codes {codes}")
        for p, done in zip(swarm.peers, dones):
            final = [x for x in p.lines() if x["event"] == "done"]
            check(len(final) == 1 and final[0]["exchanges"] >= done,
                  f"{p.name}: scraped {done} exchanges, its done line says {final and final[0]['exchanges']}")
            lines = sum(1 for x in p.lines() if x["event"] == "exchange")
            check(lines == final[0]["exchanges"], f"{p.name}: {lines} exchange lines, done says {final[0]['exchanges']}")
    check_flag_errors(work)
    check_python()
    print(f"test_metrics_endpoint: {time.time() - t0:.1f} s, {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
