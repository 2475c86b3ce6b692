#!/usr/bin/env python3
"""Aggregate decode throughput of an OpenAI-compatible server under N concurrent conversations.

Starts the server command given after `--`, waits until it answers, sends one warm-up request,
then runs N conversations at once (one thread each, standard library only). Each conversation
sends the same kind of request: a chat-templated prompt (distinct per conversation, ~40 tokens)
through /v1/completions, greedy, exactly MAX_TOKENS new tokens (end-of-turn ignored:
`ignore_eos` for dojo serve and llama-server, a logit bias for servers that only know that).
Prints one JSON line: wall time, completion tokens, aggregate tokens/s, and the server's peak
RSS (VmHWM of the server process and its children). Loopback only.

Usage: bench-engine-batch.py --label NAME --conversations N [--max-tokens 128] [--port P]
       [--context WORDS] [--same-prompt] -- SERVER COMMAND ... (the string {port} in it is replaced by the port)
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
TOPICS = [
    "the water cycle", "how a bicycle works", "the history of the printing press",
    "why the sky is blue", "how vaccines work", "the rules of chess", "photosynthesis",
    "how a compiler works", "the French revolution", "black holes", "how bees make honey",
    "plate tectonics", "the invention of the telephone", "how rainbows form",
    "the life of a star", "how a refrigerator works", "the Roman empire", "ocean tides",
    "how airplanes fly", "the human heart", "volcanoes", "the internet", "glaciers", "tea",
]
# SmolLM2's end-of-turn / end-of-text ids, for servers without `ignore_eos`.
EOS_BIAS = {"0": -100, "2": -100}


# Words of shared filler put in the system prompt (--context): an agent's prompt is a long shared
# system prompt and tool list followed by the task, so decode runs over a long KV cache.
CONTEXT_WORDS = 0


def prompt(i):
    topic = TOPICS[i % len(TOPICS)]
    filler = " ".join(f"rule{k % 97} applies." for k in range(CONTEXT_WORDS // 2))
    return (f"<|im_start|>system\n{SYSTEM} {filler}<|im_end|>\n<|im_start|>user\n"
            f"Explain {topic} to a curious ten-year-old, in detail.<|im_end|>\n"
            "<|im_start|>assistant\n")


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def complete(base, model, i, max_tokens):
    out = post(f"{base}/v1/completions", {
        "model": model, "prompt": prompt(i), "max_tokens": max_tokens, "temperature": 0,
        "ignore_eos": True, "logit_bias": EOS_BIAS, "cache_prompt": False, "stream": False,
    })
    return out["usage"]["completion_tokens"]


def wait_ready(base, proc, limit=300):
    """The served model's name, once the server answers."""
    t0 = time.time()
    while time.time() - t0 < limit:
        if proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode} before answering")
        try:
            with urllib.request.urlopen(f"{base}/v1/models", timeout=5) as r:
                if r.status == 200:
                    return json.loads(r.read())["data"][0]["id"]
        except Exception:
            pass
        time.sleep(0.5)
    sys.exit(f"server did not answer within {limit} s")


def peak_rss_kib(pid):
    """VmHWM of the process and its direct children (the python server forks nothing)."""
    pids = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", required=True)
    ap.add_argument("--conversations", type=int, required=True)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--port", type=int, default=18471)
    ap.add_argument("--context", type=int, default=0,
                    help="words of shared filler in the system prompt (long-context decode)")
    ap.add_argument("--same-prompt", action="store_true",
                    help="every conversation sends the same prompt (samples of one task, as an "
                         "RL group)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    global CONTEXT_WORDS
    CONTEXT_WORDS = a.context
    cmd = [c.replace("{port}", str(a.port)) for c in a.cmd if c != "--"]
    base = f"http://127.0.0.1:{a.port}"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        model = wait_ready(base, proc)
        complete(base, model, 999, 8)  # warm-up: first-touch of the weights, thread pools
        tokens = [0] * a.conversations
        errors = []

        def run(i):
            try:
                tokens[i] = complete(base, model, 0 if a.same_prompt else i, a.max_tokens)
            except Exception as e:  # reported, never counted as throughput
                errors.append(f"conversation {i}: {e}")

        threads = [threading.Thread(target=run, args=(i,)) for i in range(a.conversations)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        if errors:
            sys.exit("; ".join(errors))
        print(json.dumps({
            "label": a.label, "conversations": a.conversations, "max_tokens": a.max_tokens,
            "context_words": a.context, "same_prompt": a.same_prompt,
            "completion_tokens": sum(tokens), "wall_s": round(wall, 3),
            "tokens_per_s": round(sum(tokens) / wall, 1),
            "peak_rss_mib": round(peak_rss_kib(proc.pid) / 1024, 1),
            "load_avg": os.getloadavg()[0],
        }), flush=True)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
