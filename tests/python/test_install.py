"""`pip install --no-build-isolation ./python` (python/setup.py) into a fresh virtual environment,
offline: the installed package imports without PYTHONPATH, rumor-run is on the environment's
PATH and starts peers that import that same installed package. The CMake build is the checkout's
(RUMOR_CMAKE_BUILD_DIR: already built, so only the packaging runs here; a fresh directory would
compile the whole extension)."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import BINARY_DIR

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "python"))


def have(module):
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, timeout=60).returncode == 0


@pytest.mark.skipif(not have("pip"), reason="pip is missing (apt-get install python3-pip)")
@pytest.mark.skipif(not have("ensurepip"), reason="venv cannot make environments (apt-get install python3-venv)")
@pytest.mark.skipif(not os.path.exists(os.path.join(BINARY_DIR, "CMakeCache.txt")), reason="no CMake build to reuse")
def test_pip_installs_the_package_and_rumor_run_offline(tmp_path):
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["RUMOR_CMAKE_BUILD_DIR"] = os.path.abspath(BINARY_DIR)
    p = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-build-isolation", "--no-index",
                        "--no-cache-dir", PYTHON_DIR], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import rumor, rumor.torch, rumor._rumor; "
                           "print(rumor.__file__)"], capture_output=True, text=True, timeout=120, env=env,
                          cwd=str(tmp_path))
    assert site.returncode == 0, site.stderr
    assert site.stdout.strip().startswith(str(venv)), site.stdout  # the installed copy, not the build tree's
    run = str(venv / "bin" / "rumor-run")
    h = subprocess.run([run, "--help"], capture_output=True, text=True, timeout=60, env=env)
    assert h.returncode == 0 and "RUMOR_SHARD" in h.stdout
    script = tmp_path / "where.py"
    script.write_text(textwrap.dedent("""
        import rumor
        print(rumor.__file__, rumor.Peer().shard)
    """))
    r = subprocess.run([run, "--nproc", "2", "--timeout", "60", str(script)], capture_output=True, text=True,
                       timeout=90, env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    for k in (1, 2):
        assert f"[p{k}] {site.stdout.strip()} ({k}, 2)" in r.stdout.splitlines(), r.stdout
