"""examples/torch_quickstart.py end to end, shortened: a swarm of Python and C++ peers in one run
(--mixed), with the quickstart's own recipe flags reaching both kinds of peer."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
from conftest import RUMOR_PEER  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
QUICKSTART = os.path.join(HERE, "..", "..", "examples", "torch_quickstart.py")
DATA = "/usr/share/datasets/fashion-mnist"


@pytest.mark.skipif(not os.path.exists(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz")),
                    reason="Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
def test_the_torch_quickstart_runs_a_swarm_of_python_and_cpp_peers(tmp_path):
    if not os.path.exists(RUMOR_PEER):
        pytest.skip(f"{RUMOR_PEER} is not built")
    out = tmp_path / "qs"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, QUICKSTART, "--out", str(out), "--peers", "2", "--mixed", "1",
                        "--steps", "60", "--eval-every", "30", "--settle", "0.5", "--settle-max", "10",
                        "--build", os.path.dirname(os.path.dirname(RUMOR_PEER)), "--timeout", "70"],
                       capture_output=True, text=True, env=env, timeout=80)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert (out / "accuracy.png").stat().st_size > 1000
    # The Python peer (the nn.Sequential equivalent of mlp:256,128) trained its 60 steps and
    # learnt; the C++ peer, with the same recipe flags (wsd schedule, samples weights), trained
    # with it: it exchanged with the Python peer and rejected nothing.
    summary = json.loads((out / "summary.json").read_text())
    assert summary["p1"]["steps"] == 60 and summary["p1"]["test_acc"] > 0.6
    cpp = [json.loads(line) for line in (out / "c2.jsonl").read_text().splitlines()]
    done = [r for r in cpp if r["event"] == "done"]
    assert done and done[0]["steps"] == 60 and done[0]["test_acc"] > 0.6
    evals = [r for r in cpp if r["event"] == "eval"]
    assert evals[-1]["exchanges"] > 0
    assert not [r for r in cpp if r["event"] == "rejected"]
    assert "p1" in p.stdout and "c2" in p.stdout  # report.py's table names both peers
    assert "final test_acc of the 2 peers that finished: " in p.stdout and " points" in p.stdout  # their spread
    assert "rumor-run: started 1 peer(s)" in (out / "python-peers.log").read_text()  # started by rumor-run
    # One Runtime writes both peers' metrics: a Python peer's lines carry the daemon's fields.
    py = [json.loads(line) for line in (out / "p1.jsonl").read_text().splitlines()]

    def fields(rows, event):
        return set().union(*(r.keys() for r in rows if r["event"] == event))

    for event in ("start", "eval", "settled", "done"):
        assert fields(py, event) and fields(py, event) == fields(cpp, event), event
