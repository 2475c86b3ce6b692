"""dojo's verl agent loop inside verl's own machinery, on a CPU.

What runs for real: verl 0.9.1's ``AgentLoopWorker`` (built from verl's own ``ppo_trainer``
config, the agent loop instantiated from ``agent_loop.yaml`` through verl's registry), its
``generate_sequences`` → ``DojoAgentLoop.run`` → ``POST /v1/episodes`` on a real ``dojo env
serve`` (real sandboxes, tools, grading, shaping) → the episode's agent calls this process's
token bridge → ``server_manager.generate``; then verl's post-processing (padding, masks,
``rm_scores``) and ``compute_advantage`` with verl's ``rloo`` and dojo's ``dojo_rloo``.

What does not: the inference servers. verl's ``LLMServerClient`` drives vLLM/SGLang replicas,
which need a GPU; ``ScriptedServerManager`` stands in for it (same ``generate`` signature and
``TokenOutput``), answering each episode's turns from a script (`scripts/verl-gpu-check.sh` runs
the same path against a real vLLM on a GPU machine).

Opt in: ``DOJO_BIN=target/debug/dojo $DOJO_VERL_PYTHON -m pytest python/dojo-verl/tests``
(``scripts/test-verl.sh``). Skipped, with the reason, without verl or the dojo binary.
"""

import asyncio
import json
import os
import pathlib
import subprocess
import tempfile

import pytest

verl = pytest.importorskip("verl", reason="verl is not importable; run under DOJO_VERL_PYTHON (scripts/test-verl.sh)")

import numpy as np  # noqa: E402
import torch  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[3]
TASKS = REPO / "tasksets" / "mini" / "tasks.jsonl"
TASK = "gweis__isodate-1"
TOKENIZER = pathlib.Path(
    os.environ.get("DOJO_VERL_TOKENIZER", pathlib.Path.home() / ".cache/dojo/models/qwen3-tokenizer-npm-3.7.2")
)
DOJO_BIN = os.environ.get("DOJO_BIN")

FIX = (
    "I'll fix the sign of the minutes.\n\n<function=str_replace_editor>\n"
    "<parameter=command>str_replace</parameter>\n"
    "<parameter=path>/testbed/src/isodate/isotzinfo.py</parameter>\n"
    "<parameter=old_str>return FixedOffset(tzsign * tzhour, tzmin, tzname)</parameter>\n"
    "<parameter=new_str>return FixedOffset(tzsign * tzhour, tzsign * tzmin, tzname)</parameter>\n"
    "</function>"
)
WRONG = (
    "Let me add a file.\n\n<function=str_replace_editor>\n<parameter=command>create</parameter>\n"
    "<parameter=path>/testbed/wrong.py</parameter>\n<parameter=file_text>x = 1</parameter>\n</function>"
)
SUBMIT = "Done.\n\n<function=submit>\n</function>"
# By the row's index: 0 fixes and submits, 1 edits the wrong file and submits, 2 fixes but has
# one step (a forced submission, shaped to 0.5); 3 has a task whose environment cannot be built.
SCRIPTS = {0: [FIX, SUBMIT], 1: [WRONG, SUBMIT], 2: [FIX], 3: [SUBMIT]}


def task_row(instance_id: str) -> dict:
    for line in TASKS.read_text().splitlines():
        t = json.loads(line)
        if t["instance_id"] == instance_id:
            return t
    raise KeyError(instance_id)


class ScriptedServerManager:
    """verl's ``LLMServerClient.generate`` without vLLM (GPU-only): each episode's n-th turn is
    its script's n-th text, tokenized, with the chat template's end-of-turn token."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.calls: list[tuple[str, int, dict]] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        turn = sum(1 for c in self.calls if c[0] == request_id)
        self.calls.append((request_id, len(prompt_ids), dict(sampling_params)))
        index = int(request_id.rsplit("-r", 1)[1].split("-", 1)[0])
        script = SCRIPTS[index]
        text = script[min(turn, len(script) - 1)]
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        ids.append(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids), stop_reason="completed")


@pytest.fixture(scope="module")
def env_serve():
    if not DOJO_BIN or not pathlib.Path(DOJO_BIN).exists():
        pytest.skip("DOJO_BIN does not name the dojo binary (scripts/test-verl.sh sets it)")
    out = tempfile.TemporaryDirectory(prefix="dojo-verl-")
    p = subprocess.Popen(
        [DOJO_BIN, "env", "serve", "--port", "0", "--out", out.name, "--max-episodes", "4",
         "--tasks", str(TASKS)],
        stdout=subprocess.PIPE,
        stderr=open(os.path.join(out.name, "serve.log"), "w"),
        text=True,
    )
    line = p.stdout.readline()
    assert "listening on" in line, line
    url = line.strip().rsplit(" ", 1)[1]
    yield url
    p.terminate()
    assert p.wait() == 0
    out.cleanup()


def model_dir(tmp: pathlib.Path) -> str:
    """A model directory verl's HFModelConfig accepts: the tokenizer and a tiny config (no
    weights are loaded on this path)."""
    if not (TOKENIZER / "tokenizer.json").exists():
        pytest.skip(f"no tokenizer at {TOKENIZER} (set DOJO_VERL_TOKENIZER to a Qwen-style tokenizer directory)")
    for f in TOKENIZER.iterdir():
        (tmp / f.name).write_bytes(f.read_bytes())
    cfg = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
        "max_position_embeddings": 40960, "eos_token_id": 151645, "tie_word_embeddings": True,
    }
    (tmp / "config.json").write_text(json.dumps(cfg))
    return str(tmp)


def verl_config(model: str):
    from hydra import compose, initialize_config_dir

    import verl.trainer.config as vc

    import dojo_verl

    with initialize_config_dir(config_dir=os.path.dirname(vc.__file__), version_base=None):
        return compose(
            config_name="ppo_trainer",
            overrides=[
                f"actor_rollout_ref.model.path={model}",
                "actor_rollout_ref.rollout.name=vllm",
                "actor_rollout_ref.rollout.prompt_length=8192",
                "actor_rollout_ref.rollout.response_length=8192",
                "actor_rollout_ref.rollout.calculate_log_probs=true",
                f"actor_rollout_ref.rollout.agent.agent_loop_config_path={dojo_verl.AGENT_LOOP_CONFIG}",
                "actor_rollout_ref.rollout.agent.default_agent_loop=dojo_swe",
                "algorithm.adv_estimator=dojo_rloo",
                "algorithm.norm_adv_by_std_in_grpo=false",
                "data.train_files=[]",
                "data.val_files=[]",
            ],
        )


def test_dojo_rloo_matches_verl_rloo_and_drops_masked():
    from verl.trainer.ppo import core_algos

    import dojo_verl  # noqa: F401

    scores = torch.tensor([1.0, 0.0, 0.5, 0.0])
    mask = torch.ones(4, 3)
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = scores
    index = np.array(["g"] * 4, dtype=object)
    ours, _ = core_algos.get_adv_estimator_fn("dojo_rloo")(rewards, mask, index)
    theirs, _ = core_algos.get_adv_estimator_fn("rloo")(rewards, mask, index)
    assert torch.allclose(ours, theirs)
    mask[3] = 0  # masked: out of the baseline, advantage 0
    ours, _ = core_algos.get_adv_estimator_fn("dojo_rloo")(rewards, mask, index)
    assert torch.allclose(ours[:, 0], torch.tensor([0.75, -0.75, 0.0, 0.0]))


def test_agent_loop_in_verl_worker(env_serve, tmp_path, monkeypatch):
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    monkeypatch.setenv("DOJO_ENV_URL", env_serve)
    monkeypatch.setenv("DOJO_BRIDGE_LISTEN", "127.0.0.1")
    cfg = verl_config(model_dir(tmp_path))
    worker = AgentLoopWorker(cfg, llm_client=None)
    sm = ScriptedServerManager(worker.tokenizer)
    worker.llm_client = sm

    broken = task_row(TASK)
    broken.update(instance_id="nobody__nothing-1", repo="nobody/nothing")
    tasks = [task_row(TASK), task_row(TASK), task_row(TASK), broken]
    # As `dojo tasks export --format verl` writes them: the task as JSON text.
    extra = [{"task": json.dumps(t), "instance_id": t["instance_id"]} for t in tasks]
    extra[2]["budgets"] = {"max_steps": 1}
    n = len(tasks)
    batch = DataProto(
        batch=None,
        non_tensor_batch={
            "agent_name": np.array(["dojo_swe"] * n, dtype=object),
            "raw_prompt": np.array([[{"role": "user", "content": t["problem_statement"]}] for t in tasks] + [None], dtype=object)[:n],
            "extra_info": np.array(extra, dtype=object),
            "index": np.arange(n),
            "uid": np.array(["g"] * n, dtype=object),
        },
        meta_info={"validate": False, "global_steps": 1},
    )
    out = asyncio.run(worker.generate_sequences(batch))

    stop = list(out.non_tensor_batch["dojo_stop_reason"])
    assert stop == ["submitted", "submitted", "max_steps", "env_error"], stop
    assert list(out.non_tensor_batch["dojo_masked"]) == [False, False, False, True]
    assert list(out.non_tensor_batch["dojo_raw_reward"])[:3] == [1.0, 0.0, 1.0]
    rm = out.batch["rm_scores"].sum(-1)
    assert torch.allclose(rm, torch.tensor([1.0, 0.0, 0.5, 0.0])), rm
    mask = out.batch["response_mask"]
    assert mask[3].sum() == 0
    # Sampled tokens (mask 1) carry the sampling logprobs; observation tokens (mask 0) in between.
    lp = out.batch["rollout_log_probs"]
    assert torch.all(lp[mask == 1] == -0.25)
    first = (mask[0] == 1).nonzero()[:, 0]
    assert (mask[0, first.min() : first.max()] == 0).any(), "no observation tokens between the two turns"
    # Sticky: each episode's turns share one request id.
    ids = [c[0] for c in sm.calls]
    assert len(set(ids)) == 3 and sorted(ids.count(i) for i in set(ids)) == [1, 2, 2], ids

    out.batch["token_level_rewards"] = out.batch["rm_scores"]
    adv = {}
    for est in ("dojo_rloo", "rloo"):
        d = compute_advantage(out, adv_estimator=est, norm_adv_by_std_in_grpo=False, config=cfg.algorithm)
        a = d.batch["advantages"]
        adv[est] = [float(a[i][mask[i] == 1][0]) if mask[i].sum() else 0.0 for i in range(n)]
    assert np.allclose(adv["dojo_rloo"], [0.75, -0.75, 0.0, 0.0]), adv
    # verl's rloo counts the masked sample's 0 in the baseline.
    assert np.allclose(adv["rloo"], [2.5 / 3, -0.5, 0.5 / 3, 0.0]), adv


def test_example_config_uses_real_keys():
    """examples/verl/dojo_swe_master.yaml composes over verl's ppo_trainer and every key it sets
    exists there (no key silently ignored), with SWE-Master's values."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import verl.trainer.config as vc

    example = REPO / "examples" / "verl"
    with initialize_config_dir(config_dir=str(example), version_base=None):
        cfg = compose(
            config_name="dojo_swe_master",
            overrides=["data.train_files=a", "data.val_files=b", "actor_rollout_ref.model.path=m"],
        )
    with initialize_config_dir(config_dir=os.path.dirname(vc.__file__), version_base=None):
        base = compose(config_name="ppo_trainer")
    ours = OmegaConf.load(example / "dojo_swe_master.yaml")

    def leaves(node, prefix=""):
        for k, v in node.items():
            if k in ("hydra", "defaults"):
                continue
            path = f"{prefix}{k}"
            if isinstance(v, dict):
                yield from leaves(v, path + ".")
            else:
                yield path

    for key in leaves(OmegaConf.to_container(ours, resolve=False)):
        if key == "ray_kwargs.ray_init.runtime_env.worker_process_setup_hook":
            continue  # Ray's runtime_env field, passed through to ray.init
        parent, _, last = key.rpartition(".")
        node = OmegaConf.select(base, parent) if parent else base
        assert node is not None and last in node.keys(), key
    a = cfg.actor_rollout_ref.actor
    assert (a.clip_ratio_low, a.clip_ratio_high, a.use_kl_loss, a.loss_agg_mode) == (
        0.2, 0.28, False, "seq-mean-token-sum-norm")
    assert cfg.algorithm.adv_estimator == "dojo_rloo" and not cfg.algorithm.norm_adv_by_std_in_grpo
    assert not cfg.algorithm.use_kl_in_reward
    r = cfg.actor_rollout_ref.rollout
    assert 4 <= r.n <= 8 and r.calculate_log_probs and r.agent.default_agent_loop == "dojo_swe"
    agent_loops = OmegaConf.load(example / "agent_loop.yaml")
    assert agent_loops[0]._target_ == "dojo_verl.agent_loop.DojoAgentLoop"


def test_bridge_refuses_bad_requests(tmp_path):
    """The token bridge: unknown episodes 404, malformed bodies 400, a registered episode's turn
    answered with vLLM's token fields under its sticky request id."""
    import aiohttp
    from transformers import AutoTokenizer

    from dojo_verl.bridge import TokenBridge

    tok = AutoTokenizer.from_pretrained(model_dir(tmp_path))
    sm = ScriptedServerManager(tok)

    async def go():
        b = TokenBridge(sm, tok)
        await b.start(host="127.0.0.1")
        b.register("t-r0-x", {"temperature": 1.0})
        base = f"http://127.0.0.1:{b.port}"
        msgs = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{base}/episodes/nobody/v1/chat/completions", json=msgs) as r:
                assert r.status == 404 and "nobody" in (await r.json())["error"]["message"]
            async with s.post(f"{base}/episodes/t-r0-x/v1/chat/completions", data="{not json") as r:
                assert r.status == 400
            async with s.post(f"{base}/episodes/t-r0-x/v1/chat/completions", json={"messages": []}) as r:
                assert r.status == 400
            async with s.post(f"{base}/episodes/t-r0-x/v1/chat/completions", json=msgs) as r:
                assert r.status == 200
                body = await r.json()
        await b.stop()
        return body

    body = asyncio.run(go())
    ch = body["choices"][0]
    assert body["prompt_token_ids"] and ch["token_ids"]
    assert len(ch["logprobs"]["content"]) == len(ch["token_ids"])
    assert "<function=str_replace_editor>" in ch["message"]["content"]
    assert sm.calls[-1][0] == "t-r0-x" and sm.calls[-1][2]["max_tokens"] == 64
