#!/usr/bin/python3
"""examples/report.py's accuracy plot (the quickstart's accuracy.png) puts every peer on one time
axis, seconds since the first peer began training, and shows each whole curve: a peer that waited
2.5 s for the others (--min-peers) and started its clock earlier is not drawn 2.5 s behind them,
a resumed peer's second life continues on the same axis, and the y axis starts at 0, not at the
first accuracy above 0.3. Metrics files written here by hand; the PNG is made and checked to be
one. Under a second.

usage: test_report.py SOURCE_DIR"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

src = os.path.abspath(sys.argv[1])
spec = importlib.util.spec_from_file_location("report", os.path.join(src, "examples", "report.py"))
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def lines(start_unix, evals, t_offset=0.01, more=()):
    rows = [{"t": t_offset, "event": "start", "peer": "x", "unix_time": start_unix, "t_offset": t_offset}]
    rows += [{"t": t, "event": "eval", "step": i * 100, "test_acc": a, "loss": 1.0} for i, (t, a) in enumerate(evals)]
    rows += list(more)
    return rows


# p1 started at 1000 and waited 2.5 s for the others; p2 and p3 started at 1002.5. All three began
# training at 1002.59 (their first evaluation; the start lines come 0.01 s into each life) and improve together.
p1 = lines(1000.0, [(2.6, 0.10), (3.6, 0.78), (4.6, 0.84)])
p2 = lines(1002.5, [(0.1, 0.11), (1.1, 0.79), (2.1, 0.85)])
p3 = lines(1002.5, [(0.1, 0.09), (1.1, 0.77), (2.1, 0.83)])
# p4 is resumed: its second life's start line restarts t.
p4 = lines(1002.5, [(0.1, 0.10), (1.1, 0.78)]) + lines(1010.0, [(0.6, 0.86)])
curves, t0 = report.accuracy_curves([("p1", p1), ("p2", p2), ("p3", p3), ("p4", p4)])
check(abs(t0 - 1002.59) < 1e-9, f"t0 {t0}, want the first evaluation's wall time 1002.59 (unix_time - t_offset + t)")
by = {name: (xs, ys) for name, xs, ys, _ in curves}
for name in ("p1", "p2", "p3"):
    xs = by[name][0]
    check([round(x, 6) for x in xs] == [0.0, 1.0, 2.0], f"{name} at {xs}, want 0, 1, 2 (one axis)")
check([round(x, 6) for x in by["p4"][0]] == [0.0, 1.0, 8.0], f"resumed p4 at {by['p4'][0]}, want 0, 1, 8")
lo, hi = report.accuracy_ylim(curves)
check(lo == 0.0 and 0.86 <= hi <= 1.0, f"y axis {lo}..{hi}: the whole curve, from 0 to just above 0.86")

# Files without start lines (written before the start line existed): each peer's own clock, said so.
curves_old, t0_old = report.accuracy_curves([("a", [r for r in p1 if r["event"] != "start"])])
check(t0_old is None and curves_old[0][1] == [2.6, 3.6, 4.6], "files without start lines keep their own t")

with tempfile.TemporaryDirectory() as d:
    paths = []
    for name, rows in (("p1", p1), ("p2", p2), ("p3", p3)):
        paths.append(os.path.join(d, name + ".jsonl"))
        with open(paths[-1], "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    png = os.path.join(d, "accuracy.png")
    r = subprocess.run([sys.executable, os.path.join(src, "examples", "report.py"), "--png", png] + paths,
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"report.py failed: {r.stderr[-500:]}")
    check(os.path.exists(png) and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n", "no PNG written")

print(f"test_report: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
