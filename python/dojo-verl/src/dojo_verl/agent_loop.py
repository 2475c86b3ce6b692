"""``DojoAgentLoop``: one verl sample = one ``dojo env serve`` episode.

verl calls ``run(sampling_params, **row)`` per sample. The loop registers the episode with this
worker's token bridge, posts ``/v1/episodes`` (the task from ``extra_info.task``, the bridge as
the episode's ``openai`` policy, budgets, shaping) and maps dojo's answer one to one onto
``AgentLoopOutput``: the token stream the policy saw and sampled (never re-templated), the
shaped reward, turns; stop reason, raw reward and the masked flag go to ``extra_fields``. A
masked episode (infrastructure failure) gets an all-zero response mask, so it carries no loss;
``dojo_rloo`` (``dojo_verl.advantage``) also keeps it out of its group's baseline.
"""

import asyncio
import hashlib
import json
import logging
import os
import time
import uuid
from typing import Any, Optional

import aiohttp
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from dojo_verl import advantage as _advantage  # noqa: F401  (registers dojo_rloo)
from dojo_verl.bridge import shared_bridge

logger = logging.getLogger(__name__)


def _plain(v: Any) -> Any:
    """OmegaConf containers and numpy scalars as JSON-able Python values."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(v, (DictConfig, ListConfig)):
            return OmegaConf.to_container(v, resolve=True)
    except ImportError:
        pass
    if hasattr(v, "item") and not isinstance(v, (list, dict, str)):
        try:
            return v.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


class DojoEpisodeError(RuntimeError):
    """``dojo env serve`` refused the episode (a bad request): a configuration error."""


class DojoAgentLoop(AgentLoopBase):
    def __init__(
        self,
        *args,
        dojo_url: Optional[str] = None,
        agent: Optional[dict] = None,
        budgets: Optional[dict] = None,
        shaping: Optional[dict] = None,
        lease_s: Optional[float] = None,
        bridge_host: Optional[str] = None,
        bridge_listen: str = "0.0.0.0",
        model_name: str = "policy",
        request_timeout_s: float = 7200.0,
        tool_parser: Optional[str] = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        urls = os.environ.get("DOJO_ENV_URL") or dojo_url or "http://127.0.0.1:8700"
        self.dojo_urls = [u.strip().rstrip("/") for u in str(urls).split(",") if u.strip()]
        # `dojo env serve --api-key` (required beyond loopback): the same key on every node.
        key = os.environ.get("DOJO_API_KEY", "").strip()
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.agent = _plain(agent) or {}
        self.budgets = _plain(budgets) or {}
        self.shaping = _plain(shaping) or {}
        self.lease_s = lease_s
        self.bridge_host = os.environ.get("DOJO_BRIDGE_HOST") or bridge_host or "127.0.0.1"
        self.bridge_listen = os.environ.get("DOJO_BRIDGE_LISTEN") or bridge_listen
        self.model_name = model_name
        self.request_timeout_s = request_timeout_s
        self.tool_parser_name = tool_parser
        self.prompt_length = self.rollout_config.prompt_length
        self.response_length = self.rollout_config.response_length

    def _dojo_url(self, episode_id: str) -> str:
        h = int(hashlib.sha256(episode_id.encode()).hexdigest(), 16)
        return self.dojo_urls[h % len(self.dojo_urls)]

    async def _bridge(self):
        parser = None
        if self.tool_parser_name:
            from verl.experimental.agent_loop.tool_parser import ToolParser

            parser = ToolParser.get_tool_parser(self.tool_parser_name, self.tokenizer)
        return await shared_bridge(
            self.server_manager,
            self.tokenizer,
            host=self.bridge_listen,
            chat_template_kwargs=self.apply_chat_template_kwargs,
            tool_parser=parser,
        )

    async def _post_episode(self, body: dict) -> dict:
        url = self._dojo_url(body["episode_id"]) + "/v1/episodes"
        timeout = aiohttp.ClientTimeout(total=self.request_timeout_s)
        delay = 1.0
        async with aiohttp.ClientSession(timeout=timeout, headers=self.headers) as s:
            while True:
                async with s.post(url, json=body) as r:
                    text = await r.text()
                    if r.status == 200:
                        return json.loads(text)
                    if r.status in (429, 409, 503):
                        # Busy (or this id still running after a retry): wait and ask again;
                        # the same id never runs twice.
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, 30.0)
                        continue
                    raise DojoEpisodeError(f"dojo env serve {url}: HTTP {r.status}: {text[:2000]}")

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        extra = _plain(kwargs.get("extra_info")) or {}
        task = extra.get("task") or _plain(kwargs.get("task"))
        if isinstance(task, str):
            # `dojo tasks export --format verl` keeps the row as JSON text (rows may differ in
            # fields, which a Parquet struct cannot hold).
            try:
                task = json.loads(task)
            except ValueError as e:
                raise DojoEpisodeError(f"extra_info.task is not JSON: {e}") from e
        if not isinstance(task, dict):
            raise DojoEpisodeError("the row has no extra_info.task (write rows with `dojo tasks export --format verl`)")
        index = _plain(kwargs.get("index"))
        tag = f"-r{index}" if index is not None else ""
        episode_id = f"{task.get('instance_id', 'task')}{tag}-{uuid.uuid4().hex[:16]}"
        group_id = kwargs.get("uid") or kwargs.get("index")
        bridge = await self._bridge()
        bridge.register(episode_id, sampling_params)
        t0 = time.time()
        try:
            agent = dict(self.agent)
            agent.setdefault("sampling", {})
            agent["sampling"] = {**agent["sampling"], "logprobs": True}
            policy = {
                "kind": "openai",
                "model": self.model_name,
                "base_url": bridge.base_url(self.bridge_host, episode_id),
                "agent": agent,
            }
            body = {
                "episode_id": episode_id,
                "task": task,
                "policy": policy,
                # A row may tighten the loop's budgets (extra_info.budgets).
                "budgets": {**self.budgets, **(extra.get("budgets") or {})},
                "shaping": self.shaping,
            }
            if group_id is not None:
                body["group_id"] = str(_plain(group_id))
            if self.lease_s:
                body["lease_s"] = float(self.lease_s)
            rec = await self._post_episode(body)
        finally:
            bridge.unregister(episode_id)
        return self.to_output(rec, time.time() - t0)

    def to_output(self, rec: dict, wall_s: float = 0.0) -> AgentLoopOutput:
        """dojo's episode record as verl's ``AgentLoopOutput``."""
        masked = bool(rec.get("masked"))
        streams = rec.get("streams") or []
        eos = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
        if streams:
            # One context window per stream; verl trains on one sequence per sample: the last
            # window (the whole episode when dojo's context manager did not rewrite history).
            st = streams[-1]
            prompt_ids = list(st["prompt_ids"])
            response_ids = list(st["response_ids"])
            response_mask = [int(m) for m in st["response_mask"]]
            logprobs = [float(x) for x in st["response_logprobs"]]
        else:
            # No token ids (the policy never answered): nothing to train on.
            masked = True
            prompt_ids, response_ids, response_mask, logprobs = [eos], [eos], [0], [0.0]
        truncated = len(response_ids) > self.response_length or len(prompt_ids) > self.prompt_length
        prompt_ids = prompt_ids[-self.prompt_length :]
        response_ids = response_ids[: self.response_length]
        response_mask = response_mask[: self.response_length]
        logprobs = logprobs[: self.response_length]
        if masked:
            response_mask = [0] * len(response_mask)
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=response_mask,
            response_logprobs=logprobs,
            reward_score=0.0 if masked else float(rec.get("reward") or 0.0),
            num_turns=int(rec.get("num_turns") or 0),
            metrics=AgentLoopMetrics(generate_sequences=float(rec.get("wall_s") or wall_s)),
            extra_fields={
                "turn_scores": [],
                "tool_rewards": [],
                "dojo_episode_id": rec.get("episode_id"),
                "dojo_task_id": rec.get("task_id"),
                "dojo_stop_reason": rec.get("stop_reason"),
                "dojo_masked": masked,
                "dojo_raw_reward": rec.get("raw_reward"),
                "dojo_forced_submission": bool(rec.get("forced_submission")),
                "dojo_windows": len(streams),
                "dojo_truncated": truncated,
            },
        )
