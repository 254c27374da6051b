#!/usr/bin/python3
"""The live swarm page (rumor-peer --metrics-listen: /) in headless Chromium through Selenium:
a 4-peer loopback swarm trains; p1's page, opened with ?peers= the other three endpoints, must
list the 4 members with their states and clocks, draw 4 accuracy curves with points, draw the
traffic and staleness charts, refresh itself (its clocks move), and log no script error. The same
page without ?peers must say that other members' accuracy is not known to this peer. Saves a
screenshot (default BUILD_DIR/swarm_page.png; docs/img/swarm_page.png is one). Skips (77) where
chromium, chromedriver or python3-selenium is missing. About 25 s.

usage: test_swarm_page.py BUILD_DIR [SCREENSHOT.png]"""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swarm import Swarm, skip  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
if not (os.access(CHROMIUM, os.X_OK) and os.access(DRIVER, os.X_OK)):
    skip("chromium and chromium-driver are not installed (examples/setup.sh installs them)")
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
except ImportError:
    skip("python3-selenium is not installed (examples/setup.sh installs it)")

build = os.path.abspath(sys.argv[1])
shot = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else os.path.join(build, "swarm_page.png")
binary = os.path.join(build, "peer", "rumor-peer")
N = 4

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def wait_for(driver, cond, timeout, what):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = driver.execute_script("return window.rumorPage")
        if last and cond(last):
            return last
        time.sleep(0.3)
    check(False, f"{what} within {timeout} s; the page has {last}")
    return last


t_begin = time.time()
with tempfile.TemporaryDirectory(prefix="rumor-page-") as work:
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1450", f"--user-data-dir={os.path.join(work, 'chromium')}"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = None
    try:
        with Swarm(binary, work, N, ["--duration", "25", "--throttle", "4", "--eval-every", "100"]) as swarm:
            driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
            driver.set_page_load_timeout(20)
            p1 = swarm.peers[0]
            others = ",".join(p.metrics_address for p in swarm.peers[1:])
            driver.get(f"http://{p1.metrics_address}/?peers={others}")
            addresses = sorted(p.address for p in swarm.peers)
            page = wait_for(driver, lambda pg: len(pg["members"]) == N and len(pg["curves"]) == N
                            and all(v >= 3 for v in pg["curves"].values()), 30,
                            f"{N} members and {N} accuracy curves of 3+ points")
            # The table as a user sees it.
            rows = driver.find_elements(By.CSS_SELECTOR, "#members tbody tr")
            listed = sorted(r.find_elements(By.TAG_NAME, "td")[0].text.replace("(this peer)", "").strip() for r in rows)
            check(listed == addresses, f"member table lists {listed}, want {addresses}")
            states = [r.find_elements(By.TAG_NAME, "td")[1].text for r in rows]
            check(states == ["alive"] * N, f"member states {states}")
            accs = [r.find_elements(By.TAG_NAME, "td")[4].text for r in rows]
            check(all(a != "unknown" and 0 < float(a) <= 1 for a in accs), f"accuracies in the table {accs}")
            acc_canvas = driver.find_element(By.ID, "c-acc")
            check(acc_canvas.get_attribute("data-series") == str(N), f"accuracy chart series {acc_canvas.get_attribute('data-series')}")
            for cid in ("c-loss", "c-bytes", "c-ex", "c-stale", "c-clocks"):
                pts = int(driver.find_element(By.ID, cid).get_attribute("data-points") or 0)
                check(pts >= 2, f"chart {cid} has {pts} points")
            # It refreshes itself: a later update, with the clocks moved on.
            clocks = {m["id"]: m["clock"] for m in page["members"]}
            updates = page["updates"]
            later = wait_for(driver, lambda pg: pg["updates"] >= updates + 2, 10, "two more refreshes")
            moved = {m["id"] for m in later["members"] if m["clock"] > clocks.get(m["id"], 1 << 62)}
            check(len(moved) == N, f"clocks moved for {sorted(moved)} only")
            driver.save_screenshot(shot)
            print(f"screenshot: {shot}", flush=True)
            severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
            check(not severe, f"script errors: {severe}")
            # Without ?peers the page says what it does not know, and shows only this peer's curve.
            driver.get(f"http://{p1.metrics_address}/")
            wait_for(driver, lambda pg: len(pg["members"]) == N and len(pg["curves"]) == 1, 15, "the page without ?peers")
            note = driver.find_element(By.ID, "members-note").text
            check("not known to this peer" in note, f"the note without ?peers: {note!r}")
            cells = [r.find_elements(By.TAG_NAME, "td")[4].text for r in driver.find_elements(By.CSS_SELECTOR, "#members tbody tr")]
            check(sorted(cells)[-1] == "unknown" and cells.count("unknown") == N - 1, f"accuracy cells without ?peers {cells}")
    finally:
        if driver:
            driver.quit()
    print(f"test_swarm_page: {time.time() - t_begin:.1f} s, {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
