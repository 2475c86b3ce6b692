"""The curation pipeline in plain Python, for the side-by-side benchmark with `dojo curate`.

Same stages and rules as dojo-curate on the same JSONL: dedup (sha256 of task, messages, tools),
difficulty (0 < task mean < 1), format (resolved, submitted, no limit stop or forced submit, no
format-error reminder, turn budget, bare submit), tokenization of the survivors with the target
template + tokenizer (transformers, tokenizer built from the GGUF as in tests/py/hf_oracle.py),
token budget, cap 2 (fewest turns, then tokens), then masks for the kept samples by the same
incremental-prefix method, written as pre-tokenized Parquet with pyarrow. Single process, as a
user's script would be.

    python curate_baseline.py GGUF OUT_DIR INPUT.jsonl...
"""

import hashlib
import json
import os
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "py"))
from hf_oracle import load  # noqa: E402

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

MARKERS = ["You forgot to use a function call"]


def portable(m):
    out = {"role": m["role"], "content": m.get("content") or ""}
    if m.get("tool_calls"):
        calls = []
        for c in m["tool_calls"]:
            a = c["function"].get("arguments") or "{}"
            calls.append({"id": c.get("id"), "type": "function",
                          "function": {"name": c["function"]["name"], "arguments": json.loads(a) if isinstance(a, str) else a}})
        out["tool_calls"] = calls
    if m.get("tool_call_id"):
        out["tool_call_id"] = m["tool_call_id"]
    return out


TOOLS_INTRO = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
TOOLS_OUTRO = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
               "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
               "<args-json-object>}\n</tool_call>")


def hermes(msgs, tools):
    """Tools and calls written Hermes-style for a template without tool support (SmolLM2's), as
    dojo-chat (and Qwen2.5's template) do."""
    dumps = lambda v: json.dumps(v, ensure_ascii=False)  # noqa: E731
    out = []
    for m in msgs:
        content = m["content"]
        if m.get("tool_calls"):
            calls = "\n".join(f'<tool_call>\n{{"name": {dumps(c["function"]["name"])}, "arguments": '
                              f'{dumps(c["function"]["arguments"])}}}\n</tool_call>' for c in m["tool_calls"])
            content = f"{content}\n{calls}" if content else calls
        if m["role"] == "tool":
            block = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1].get("_tool"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_tool": True})
            continue
        out.append({"role": m["role"], "content": content})
    for m in out:
        m.pop("_tool", None)
    if tools:
        block = TOOLS_INTRO + "".join("\n" + dumps(t) for t in tools) + TOOLS_OUTRO
        if out and out[0]["role"] == "system":
            out[0]["content"] = f"{out[0]['content']}\n\n{block}" if out[0]["content"] else block
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


def turns(t):
    return sum(1 for m in t["messages"] if m["role"] == "assistant")


def format_ok(t):
    if not (t.get("resolved") and t.get("reward", 0) >= 1.0):
        return False
    if t.get("stop_reason", "") != "submitted" or t.get("forced_submission") or t.get("format_errors", 0) > 0:
        return False
    for m in t["messages"]:
        if m["role"] in ("user", "tool") and any(k in (m.get("content") or "") for k in MARKERS):
            return False
    if turns(t) > 100:
        return False
    last = [m for m in t["messages"] if m["role"] == "assistant"][-1:]
    if not last or not last[0].get("tool_calls") or len(last[0]["tool_calls"]) != 1:
        return False
    c = last[0]["tool_calls"][0]["function"]
    return c["name"] == "submit" and json.loads(c.get("arguments") or "{}") == {}


def main():
    gguf, out_dir = sys.argv[1:3]
    inputs = sys.argv[3:]
    tok = load(gguf)
    template = tok.chat_template
    t0 = time.time()
    trajs, nbytes = [], 0
    for path in inputs:
        with open(path, "rb") as f:
            for line in f:
                nbytes += len(line)
                try:
                    trajs.append(json.loads(line))
                except ValueError:
                    pass
    n_in = len(trajs)
    seen, kept = set(), []
    for t in trajs:
        h = hashlib.sha256(json.dumps([t["task_id"], t["messages"], t.get("tools")]).encode()).digest()
        if h not in seen:
            seen.add(h)
            kept.append(t)
    sums = defaultdict(lambda: [0, 0.0])
    for t in kept:
        sums[t["task_id"]][0] += 1
        sums[t["task_id"]][1] += t.get("reward", 0.0)
    kept = [t for t in kept if 0.0 < sums[t["task_id"]][1] / sums[t["task_id"]][0] < 1.0]
    kept = [t for t in kept if format_ok(t)]

    def render(msgs, tools, gen=False):
        return tok.apply_chat_template(hermes(msgs, tools), chat_template=template, tokenize=False,
                                       add_generation_prompt=gen)

    for t in kept:
        t["_msgs"] = [portable(m) for m in t["messages"]]
        t["_n"] = len(tok(render(t["_msgs"], t.get("tools")), add_special_tokens=False)["input_ids"])
    kept = [t for t in kept if t["_n"] <= 81920]
    by_task = defaultdict(list)
    for t in kept:
        by_task[t["task_id"]].append(t)
    final = []
    for task in sorted(by_task):
        final += sorted(by_task[task], key=lambda t: (turns(t), t["_n"], t.get("sample_index", 0)))[:2]
    t_filter = time.time() - t0
    rows = {"task_id": [], "sample": [], "input_ids": [], "labels": [], "assistant_masks": []}
    eot = "<|im_end|>"
    for t in final:
        msgs, tools = t["_msgs"], t.get("tools")
        text = render(msgs, tools)
        spans = []
        for i, m in enumerate(msgs):
            if m["role"] != "assistant":
                continue
            a = len(render(msgs[:i], tools, gen=True))
            b = len(render(msgs[: i + 1], tools))
            p = text.rfind(eot, a, b)
            spans.append((a, p + len(eot) if p >= 0 else b))
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        mask, k = [], 0
        for s, e in enc["offset_mapping"]:
            while k < len(spans) and spans[k][1] <= s:
                k += 1
            mask.append(1 if k < len(spans) and max(e, s + 1) > spans[k][0] else 0)
        ids = enc["input_ids"]
        rows["task_id"].append(t["task_id"])
        rows["sample"].append(t.get("sample_index", 0))
        rows["input_ids"].append(ids)
        rows["labels"].append([i if k else -100 for i, k in zip(ids, mask)])
        rows["assistant_masks"].append(mask)
    os.makedirs(out_dir, exist_ok=True)
    pq.write_table(pa.table(rows), os.path.join(out_dir, "tokens.parquet"), compression="zstd")
    total = time.time() - t0
    print(json.dumps({"trajectories": n_in, "bytes": nbytes, "kept": len(final), "filter_s": round(t_filter, 2),
                      "total_s": round(total, 2), "traj_per_s": round(n_in / total, 1),
                      "mb_per_s": round(nbytes / 1e6 / total, 2)}))


if __name__ == "__main__":
    main()
