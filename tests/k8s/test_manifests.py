#!/usr/bin/python3
"""Offline checks of the Kubernetes manifests in examples/k8s (no cluster, no kubectl).

For every manifest file: it parses (python3-yaml); the headless Service, the StatefulSet and the
PodDisruptionBudget agree with each other (selectors match the pod labels, serviceName is the
headless Service, publishNotReadyAddresses, Parallel pod management, ports by name and number,
the PDB selects the peers); and the pod's start-up script, run here by /bin/sh with a stand-in
rumor-peer, execs rumor-peer (same PID: SIGTERM reaches it) with --listen POD_IP:PORT, a join
list of the StatefulSet's pods 0 and 1 through the Service's DNS names (the pod itself by its
own address), the shard from the ordinal, and --device cuda:0 exactly where a GPU is requested.

Usage: test_manifests.py DIR   (exit 0 pass, 1 fail, 77 skipped: python3-yaml missing)
"""
import os
import re
import shlex
import stat
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:
    print("SKIPPED: python3-yaml is not installed (apt-get install python3-yaml)")
    sys.exit(77)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def field_ref(container, name):
    for e in container.get("env", []):
        if e["name"] == name:
            return e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    return None


def run_start_script(path, container, ordinal, sts_name):
    """Runs the container's command with a stand-in rumor-peer; returns (args, same_pid)."""
    with tempfile.TemporaryDirectory() as d:
        fake = os.path.join(d, "rumor-peer")
        out = os.path.join(d, "args")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\necho $$ > %s.pid\nfor a in \"$@\"; do printf '%%s\\n' \"$a\"; done > %s\n"
                    % (shlex.quote(out), shlex.quote(out)))
        os.chmod(fake, stat.S_IRWXU)
        env = {"PATH": d + ":/usr/bin:/bin", "POD_IP": "10.1.2.%d" % (10 + ordinal),
               "POD_NAME": "%s-%d" % (sts_name, ordinal)}
        for k, v in env_of(container).items():
            if v is not None:
                env[k] = v
        cmd = container["command"] + container.get("args", [])
        p = subprocess.Popen(cmd, env=env, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            _, err = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            return None, False, "timed out"
        if p.returncode != 0 or not os.path.exists(out):
            return None, False, "exit %d: %s" % (p.returncode, err.decode(errors="replace"))
        args = open(out).read().splitlines()
        same_pid = open(out + ".pid").read().strip() == str(p.pid)
        return args, same_pid, ""


def flag(args, name):
    return args[args.index(name) + 1] if name in args else None


def check_file(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    by_kind = {}
    for d in docs:
        check("kind" in d and "apiVersion" in d and "metadata" in d, "%s: a document without kind/apiVersion/metadata" % path)
        by_kind.setdefault(d.get("kind"), []).append(d)
    f = os.path.basename(path)
    if not (check(len(by_kind.get("Service", [])) == 1, f + ": one Service")
            and check(len(by_kind.get("StatefulSet", [])) == 1, f + ": one StatefulSet")
            and check(len(by_kind.get("PodDisruptionBudget", [])) == 1, f + ": one PodDisruptionBudget")):
        return
    svc, sts, pdb = by_kind["Service"][0], by_kind["StatefulSet"][0], by_kind["PodDisruptionBudget"][0]
    check(svc["apiVersion"] == "v1" and sts["apiVersion"] == "apps/v1" and pdb["apiVersion"] == "policy/v1",
          f + ": apiVersions v1, apps/v1, policy/v1")

    # The headless Service.
    s = svc["spec"]
    check(s.get("clusterIP") == "None", f + ": the Service is headless (clusterIP: None)")
    check(s.get("publishNotReadyAddresses") is True, f + ": publishNotReadyAddresses: true (starting peers are joinable)")

    # The StatefulSet and its pods.
    ss = sts["spec"]
    name = sts["metadata"]["name"]
    labels = ss["template"]["metadata"].get("labels", {})
    sel = ss["selector"].get("matchLabels", {})
    check(sel and all(labels.get(k) == v for k, v in sel.items()), f + ": StatefulSet selector matches its pod labels")
    check(s.get("selector") and all(labels.get(k) == v for k, v in s["selector"].items()),
          f + ": Service selector matches the pod labels")
    check(ss.get("serviceName") == svc["metadata"]["name"], f + ": serviceName is the headless Service")
    check(ss.get("podManagementPolicy") == "Parallel", f + ": podManagementPolicy: Parallel")
    replicas = ss.get("replicas", 1)
    check(replicas >= 2, f + ": at least 2 replicas (peer-0 and peer-1 are the join list)")
    pod = ss["template"]["spec"]
    check(pod.get("terminationGracePeriodSeconds", 30) >= 30,
          f + ": terminationGracePeriodSeconds >= 30 (graceful leave, checkpoint, last evaluation)")
    containers = pod["containers"]
    check(len(containers) == 1, f + ": one container")
    c = containers[0]
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    env = env_of(c)
    port = int(env.get("RUMOR_PORT", "0"))
    check(ports.get("gossip") == port, f + ": container port 'gossip' == RUMOR_PORT (%s vs %s)" % (ports.get("gossip"), port))
    sp = s["ports"][0]
    check(sp.get("port") == port and sp.get("targetPort") in ("gossip", port), f + ": Service port -> the gossip port")
    # The HTTP endpoint (docs/cluster.md): a named container port, on the Service and in the
    # scrape annotations, that rumor-peer --metrics-listen is given.
    mport = int(env.get("RUMOR_METRICS_PORT", "0"))
    check(mport and ports.get("metrics") == mport, f + ": container port 'metrics' == RUMOR_METRICS_PORT (%s vs %s)" % (ports.get("metrics"), mport))
    check(any(p.get("port") == mport and p.get("targetPort") in ("metrics", mport) for p in s["ports"]), f + ": Service port -> the metrics port")
    ann = ss["template"].get("metadata", {}).get("annotations", {})
    check(ann.get("prometheus.io/port") == str(mport) and ann.get("prometheus.io/scrape") == "true", f + ": scrape annotations name the metrics port")
    probe = c.get("readinessProbe", {}).get("tcpSocket", {})
    check(probe.get("port") in ("gossip", port), f + ": readiness = the gossip port accepts connections (tcpSocket)")
    check(field_ref(c, "POD_IP") == "status.podIP", f + ": POD_IP from the downward API (status.podIP)")
    check(field_ref(c, "POD_NAME") == "metadata.name", f + ": POD_NAME from the downward API (metadata.name)")
    check(env.get("RUMOR_SERVICE") == svc["metadata"]["name"], f + ": RUMOR_SERVICE is the headless Service")
    check(env.get("RUMOR_STATEFULSET") == name, f + ": RUMOR_STATEFULSET is the StatefulSet's name")
    shards = int(env.get("RUMOR_SHARDS", "0"))
    check(shards == replicas, f + ": RUMOR_SHARDS == replicas (%d vs %d)" % (shards, replicas))
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
    claims = [v["metadata"]["name"] for v in ss.get("volumeClaimTemplates", [])]
    check("checkpoints" in mounts and "checkpoints" in claims, f + ": a per-pod checkpoints volume")
    gpus = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")

    # The start-up script, for the two founders and two later ordinals (one beyond replicas).
    dns = ["%s-%d.%s:%d" % (name, i, svc["metadata"]["name"], port) for i in (0, 1)]
    for ordinal in (0, 1, 2, replicas + 1):
        args, same_pid, err = run_start_script(path, c, ordinal, name)
        if not check(args is not None, "%s: the start-up script of ordinal %d failed: %s" % (f, ordinal, err)):
            continue
        me = "10.1.2.%d:%d" % (10 + ordinal, port)
        want_join = ",".join(me if i == ordinal else dns[i] for i in (0, 1))
        check(same_pid, f + ": the script execs rumor-peer (SIGTERM must reach it)")
        check(flag(args, "--listen") == me, "%s: ordinal %d --listen %s, want %s" % (f, ordinal, flag(args, "--listen"), me))
        check(flag(args, "--join") == want_join, "%s: ordinal %d --join %s, want %s" % (f, ordinal, flag(args, "--join"), want_join))
        want_shard = "%d/%d" % (ordinal % shards + 1, shards)
        check(flag(args, "--shard") == want_shard, "%s: ordinal %d --shard %s, want %s" % (f, ordinal, flag(args, "--shard"), want_shard))
        want_metrics = "10.1.2.%d:%d" % (10 + ordinal, mport)
        check(flag(args, "--metrics-listen") == want_metrics, "%s: ordinal %d --metrics-listen %s, want %s" % (f, ordinal, flag(args, "--metrics-listen"), want_metrics))
        jt = flag(args, "--join-timeout")
        check(jt is not None and float(jt) >= 60, f + ": --join-timeout >= 60 s (DNS records can lag ~30 s)")
        check(flag(args, "--checkpoint") == mounts.get("checkpoints"), f + ": --checkpoint is the mounted volume")
        dev = flag(args, "--device")
        if gpus:
            check(dev == "cuda:0", f + ": a GPU pod runs --device cuda:0 (got %s)" % dev)
        else:
            check(dev in (None, "cpu"), f + ": a CPU pod does not ask for a GPU (got --device %s)" % dev)

    # The PodDisruptionBudget.
    p = pdb["spec"]
    psel = p.get("selector", {}).get("matchLabels", {})
    check(psel and all(labels.get(k) == v for k, v in psel.items()), f + ": PDB selector matches the pod labels")
    check(("maxUnavailable" in p) != ("minAvailable" in p), f + ": PDB has exactly one of maxUnavailable/minAvailable")
    if "maxUnavailable" in p:
        check(isinstance(p["maxUnavailable"], int) and 1 <= p["maxUnavailable"] < replicas,
              f + ": PDB maxUnavailable in 1..replicas-1")
    print("%s: %d documents (Service %s, StatefulSet %s x%d%s, PDB %s) checked"
          % (f, len(docs), svc["metadata"]["name"], name, replicas, ", %s GPU/pod" % gpus if gpus else "",
             pdb["metadata"]["name"]))
    return bool(gpus)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../examples/k8s")
    files = sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith((".yaml", ".yml")))
    check(len(files) >= 2, "expected the CPU and the GPU manifests in " + d)
    gpu_files = [f for f in files if check_file(f)]
    check(len(gpu_files) >= 1, "no manifest requests nvidia.com/gpu")
    for m in failures:
        print("FAILED: " + m)
    if failures:
        return 1
    print("PASSED: %d manifests" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
