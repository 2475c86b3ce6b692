"""mini-swe-agent side of `benches/vs_mini_swe_agent.rs` (issue 4, section 11).

Runs mini-swe-agent's own `DefaultAgent` with its `LocalEnvironment` and its in-process
`DeterministicToolcallModel` (no LLM, no HTTP) over a scripted list of bash commands, the same
commands the Rust side gives dojo's agent. Prints one JSON object: wall and CPU time of
`agent.run` (this process only; the commands' own CPU is in children and excluded) and the
number of steps. Usage: python mini_swe_agent_30.py WORKDIR COMMANDS.json REPEATS
"""

import json
import resource
import sys
import time
from importlib import resources

import_start = time.perf_counter()
import yaml  # noqa: E402
from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.environments.local import LocalEnvironment  # noqa: E402
from minisweagent.models.test_models import (  # noqa: E402
    DeterministicToolcallModel,
    make_toolcall_output,
)

import_secs = time.perf_counter() - import_start


def cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def outputs(commands):
    out = []
    for i, cmd in enumerate(commands):
        call_id = f"call_{i}"
        tool_calls = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": cmd})},
            }
        ]
        out.append(
            make_toolcall_output(
                "I will run a command.", tool_calls, [{"command": cmd, "tool_call_id": call_id}]
            )
        )
    return out


def main():
    workdir, commands_file, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
    commands = json.load(open(commands_file))
    commands = commands + ["echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    cfg = yaml.safe_load(
        resources.files("minisweagent.config").joinpath("mini.yaml").read_text()
    )["agent"]
    runs = []
    for _ in range(repeats):
        agent = DefaultAgent(
            DeterministicToolcallModel(outputs=outputs(commands)),
            LocalEnvironment(cwd=workdir),
            system_template=cfg["system_template"],
            instance_template=cfg["instance_template"],
            step_limit=len(commands) + 1,
            cost_limit=0,
        )
        c0, w0 = cpu(), time.perf_counter()
        result = agent.run("Fix get_in so that a missing index returns the default.")
        wall, c = time.perf_counter() - w0, cpu() - c0
        if result.get("exit_status") != "Submitted":
            sys.exit(f"mini-swe-agent did not submit: {result}")
        runs.append({"wall_s": wall, "cpu_s": c, "steps": agent.n_calls})
    print(json.dumps({"import_s": import_secs, "runs": runs}))


main()
