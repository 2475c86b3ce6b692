"""Generates N synthetic trajectory records of realistic size for the curation benchmark.

Records are complete dojo-trajectory v1 records (OpenAI-shaped messages, tool calls with
JSON-string arguments, observations as role "tool", steps, stop reason, reward). Sizes follow SWE-agent
runs: a ~3 KB system prompt, ~1.5 KB issue, 5-60 turns of 100-700 characters of thought plus a
call, observations of 100-4,000 characters. Deterministic for a given seed.

    python gen_trajectories.py OUT.jsonl [N=10000] [TASKS=500] [SEED=0]
"""

import json
import random
import sys

WORDS = ("the of to and in is that for it with as on be this by are from file test line def "
         "return self value error import class function module path config raise none assert "
         "pytest parser token index dict list print call args kwargs result").split()
TOOLS = [
    {"type": "function", "function": {"name": "execute_bash", "description": "Run a bash command in the repository.",
     "parameters": {"type": "object", "properties": {"command": {"type": "string", "description": "The command."}}, "required": ["command"]}}},
    {"type": "function", "function": {"name": "str_replace_editor", "description": "View, create and edit files.",
     "parameters": {"type": "object", "properties": {
         "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert"]},
         "path": {"type": "string"}, "old_str": {"type": "string"}, "new_str": {"type": "string"}},
         "required": ["command", "path"]}}},
    {"type": "function", "function": {"name": "submit", "description": "Submit the fix.",
     "parameters": {"type": "object", "properties": {}}}},
]


def text(rng, n_chars):
    out, size = [], 0
    while size < n_chars:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def code(rng, n_chars):
    lines, size = [], 0
    while size < n_chars:
        line = f"{' ' * 4 * rng.randint(0, 3)}{rng.choice(WORDS)} = {rng.choice(WORDS)}({rng.randint(0, 999)})"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def trajectory(rng, task, sample, p_pass):
    turns = rng.randint(5, 60)
    msgs = [
        {"role": "system", "content": text(rng, 3000)},
        {"role": "user", "content": f"<issue_description>\n{text(rng, 1500)}\n</issue_description>"},
    ]
    steps = []
    for i in range(turns):
        cid = f"call_{i}"
        steps.append(len(msgs))
        if rng.random() < 0.5:
            name, args = "execute_bash", {"command": f"grep -rn {rng.choice(WORDS)} src/ | head -{rng.randint(5, 50)}"}
        else:
            name, args = "str_replace_editor", {"command": "str_replace", "path": f"/testbed/src/{rng.choice(WORDS)}.py",
                                                "old_str": code(rng, 80), "new_str": code(rng, 100)}
        msgs.append({"role": "assistant", "content": text(rng, rng.randint(100, 700)),
                     "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]})
        msgs.append({"role": "tool", "tool_call_id": cid, "content": code(rng, rng.randint(100, 4000))})
    stop = "submitted"
    r = rng.random()
    if r < 0.08:
        stop = "max_steps"
    elif r < 0.1:
        stop = "timeout"
    if stop == "submitted":
        steps.append(len(msgs))
        msgs.append({"role": "assistant", "content": "",
                     "tool_calls": [{"id": "call_s", "type": "function", "function": {"name": "submit", "arguments": "{}"}}]})
        msgs.append({"role": "tool", "tool_call_id": "call_s", "content": "<<<Finished>>>"})
    reward = 1.0 if rng.random() < p_pass else 0.0
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    return {"schema_version": 1, "task_id": task, "sample_index": sample,
            "policy": {"kind": "openai", "model": "bench"}, "sampling": {"temperature": 1.0},
            "agent": {"tool_set": "r2e", "action_format": "native"}, "tools": TOOLS, "messages": msgs,
            "steps": [{"index": k + 1, "started_ms": 0, "llm_ms": 0, "tool_ms": 0, "assistant_message": a, "usage": usage}
                      for k, a in enumerate(steps)],
            "started_at_ms": 0, "wall_ms": 0, "usage": usage, "llm_calls": len(steps), "format_errors": 0,
            "stop_reason": stop, "forced_submission": stop != "submitted", "reward": reward, "resolved": reward == 1.0,
            "infra_failure": False, "environment": {"dojo_version": "bench"}}


def main():
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
    n_tasks = int(sys.argv[3]) if len(sys.argv) > 3 else 500
    rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 0)
    p_pass = [rng.choice([0.0, 1.0, rng.random()]) for _ in range(n_tasks)]
    with open(out, "w") as f:
        for k in range(n):
            t = k % n_tasks
            f.write(json.dumps(trajectory(rng, f"task-{t:05d}", k // n_tasks, p_pass[t])) + "\n")


if __name__ == "__main__":
    main()
