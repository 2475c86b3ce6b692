#!/usr/bin/env python3
"""Cost of the HTTP path: `dojo env serve` against `dojo rollout` in process, same tasks, same
policy (gold-replay: no model, so what differs is the service itself).

1. Per-episode overhead: the bundled tasks one at a time, in process (`--workers 1`) and over
   HTTP (`--max-episodes 1`, one request after the other); (HTTP - in process) / episodes.
2. Throughput with C concurrent episodes (default 32): 2 episodes of every bundled task,
   `--workers C` in process vs `--max-episodes C` with C client threads; episodes per minute.
3. Memory per live episode: the service's RSS (its process tree: sandboxes, agents, tests)
   sampled while the C episodes run, peak minus idle, divided by the peak number running.

Usage: python3 scripts/bench-env-serve.py [--dojo target/debug/dojo] [--concurrency 32]
Environments are prepared once first (cached in $DOJO_HOME) so neither side pays for it.
Standard library only.
"""
import argparse, http.client, json, os, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASKS = os.path.join(ROOT, "tasksets/mini/tasks.jsonl")


def tree_rss_kib(pid):
    """RSS of pid and all its descendants, KiB (from /proc)."""
    children = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(p))
        except (OSError, ValueError, IndexError):
            pass
    total, todo = 0, [pid]
    while todo:
        q = todo.pop()
        try:
            with open(f"/proc/{q}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
        todo.extend(children.get(q, []))
    return total


def post(addr, body):
    host, port = addr.split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=3600)
    c.request("POST", "/v1/episodes", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data)


def get(addr, path):
    host, port = addr.split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=60)
    c.request("GET", path)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def in_process(dojo, policy, out, workers, samples):
    t0 = time.monotonic()
    subprocess.run([dojo, "rollout", "--tasks", TASKS, "--policy", policy, "-n", str(samples),
                    "--workers", str(workers), "--out", out], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def start_service(dojo, out, max_episodes):
    p = subprocess.Popen([dojo, "env", "serve", "--port", "0", "--max-episodes", str(max_episodes),
                          "--queue", "1000", "--out", out, "--tasks", TASKS], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    addr = p.stdout.readline().strip().rsplit("http://", 1)[1]
    while True:
        try:
            if get(addr, "/health")[0] == 200:
                return p, addr
        except OSError:
            time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dojo", default=os.path.join(ROOT, "target/debug/dojo"))
    ap.add_argument("--concurrency", type=int, default=32)
    a = ap.parse_args()
    rows = [json.loads(l) for l in open(TASKS)]
    gold = {"kind": "gold-replay", "run_tests": False}
    with tempfile.TemporaryDirectory() as tmp:
        # The same policy on both sides: gold-replay without its pre-submit test run.
        policy = f"{tmp}/gold.toml"
        with open(policy, "w") as f:
            f.write('kind = "gold-replay"\nrun_tests = false\n')
        in_process(a.dojo, policy, f"{tmp}/warm", 2, 1)  # environments prepared and cached

        t_in = in_process(a.dojo, policy, f"{tmp}/seq", 1, 1)
        svc, addr = start_service(a.dojo, f"{tmp}/svc-seq", 1)
        t0 = time.monotonic()
        for i, t in enumerate(rows):
            s, r = post(addr, {"episode_id": f"s{i}", "task": t, "policy": gold})
            assert s == 200 and not r["masked"], r
        t_http = time.monotonic() - t0
        svc.terminate(); svc.wait()
        n = len(rows)
        print(f"sequential, {n} episodes: in process {t_in:.1f} s ({t_in / n:.2f} s/episode), "
              f"HTTP {t_http:.1f} s ({t_http / n:.2f} s/episode), "
              f"overhead {(t_http - t_in) / n * 1000:+.0f} ms/episode")

        c = a.concurrency
        t_in_c = in_process(a.dojo, policy, f"{tmp}/conc", c, 2)
        svc, addr = start_service(a.dojo, f"{tmp}/svc-conc", c)
        idle = tree_rss_kib(svc.pid)
        peak = {"rss": idle, "running": 0}
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                rss = tree_rss_kib(svc.pid)
                try:
                    running = json.loads(get(addr, "/health")[1])["running"]
                except OSError:
                    running = 0
                if rss > peak["rss"]:
                    peak["rss"], peak["running"] = rss, max(running, peak["running"])
                time.sleep(0.5)

        sampler = threading.Thread(target=sample)
        sampler.start()
        bodies = [{"episode_id": f"c{i}-{k}", "task": t, "policy": gold}
                  for k in range(2) for i, t in enumerate(rows)]
        results = [None] * len(bodies)

        def worker(j):
            while j < len(bodies):
                results[j] = post(addr, bodies[j])
                j += c

        t0 = time.monotonic()
        ts = [threading.Thread(target=worker, args=(j,)) for j in range(c)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        t_http_c = time.monotonic() - t0
        stop.set(); sampler.join()
        svc.terminate(); svc.wait()
        bad = [r for r in results if r[0] != 200 or r[1]["masked"]]
        m = len(bodies)
        print(f"{c} concurrent, {m} episodes: in process {m / t_in_c * 60:.1f} episodes/min, "
              f"HTTP {m / t_http_c * 60:.1f} episodes/min; {len(bad)} failed")
        per = (peak["rss"] - idle) / max(peak["running"], 1) / 1024
        print(f"memory: service idle {idle / 1024:.0f} MiB, peak {peak['rss'] / 1024:.0f} MiB "
              f"with {peak['running']} running: {per:.0f} MiB per live episode")


if __name__ == "__main__":
    sys.exit(main())
