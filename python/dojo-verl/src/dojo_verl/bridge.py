"""The token bridge: an OpenAI ``/v1/chat/completions`` endpoint served inside the verl worker
process, which a dojo episode uses as its policy. It tokenizes the messages with the worker's
tokenizer and chat template, samples through verl's ``server_manager.generate`` (token ids in,
token ids and logprobs out) with the episode id as the sticky request id, so every turn of an
episode lands on the same inference server and its prefix cache holds. It answers with vLLM's
``return_token_ids`` fields (``prompt_token_ids``, ``choices[].token_ids``, ``logprobs``), which
is what dojo records as the episode's token streams.

One bridge per worker process; episodes register their sampling parameters under their id
(``/episodes/{id}/v1``) and unregister when they end.
"""

import asyncio
import json
import time
from typing import Any, Optional

from aiohttp import web


def _plain_messages(messages: list[dict]) -> list[dict]:
    """dojo's wire messages as chat templates expect them: tool-call arguments as objects."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("content") is None:
            m["content"] = ""
        calls = m.get("tool_calls")
        if calls:
            fixed = []
            for c in calls:
                c = json.loads(json.dumps(c))
                fn = c.get("function", {})
                if isinstance(fn.get("arguments"), str):
                    try:
                        fn["arguments"] = json.loads(fn["arguments"])
                    except ValueError:
                        pass
                fixed.append(c)
            m["tool_calls"] = fixed
        out.append(m)
    return out


class TokenBridge:
    def __init__(self, server_manager, tokenizer, chat_template_kwargs: Optional[dict] = None, tool_parser=None):
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.tool_parser = tool_parser
        self.episodes: dict[str, dict[str, Any]] = {}
        self.calls: dict[str, int] = {}
        self._runner: Optional[web.AppRunner] = None
        self.port: Optional[int] = None

    async def start(self, host: str = "0.0.0.0", port: int = 0) -> int:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/episodes/{eid}/v1/chat/completions", self._chat)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def base_url(self, host: str, episode_id: str) -> str:
        return f"http://{host}:{self.port}/episodes/{episode_id}/v1"

    def register(self, episode_id: str, sampling_params: dict[str, Any], max_tokens: Optional[int] = None) -> None:
        self.episodes[episode_id] = {"sampling_params": dict(sampling_params), "max_tokens": max_tokens}
        self.calls[episode_id] = 0

    def unregister(self, episode_id: str) -> None:
        self.episodes.pop(episode_id, None)
        self.calls.pop(episode_id, None)

    async def _health(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "episodes": len(self.episodes)})

    async def _chat(self, request: web.Request) -> web.Response:
        eid = request.match_info["eid"]
        ep = self.episodes.get(eid)
        if ep is None:
            return _error(404, f"no episode {eid} is registered with this bridge")
        try:
            body = await request.json()
            messages = body["messages"]
            if not isinstance(messages, list) or not messages:
                raise ValueError("messages must be a non-empty list")
        except (ValueError, KeyError, TypeError) as e:
            return _error(400, f"bad request body: {e}")
        tools = body.get("tools") or None
        prompt_ids = self.tokenizer.apply_chat_template(
            _plain_messages(messages),
            tools=tools,
            add_generation_prompt=True,
            tokenize=True,
            **self.chat_template_kwargs,
        )
        if hasattr(prompt_ids, "input_ids"):
            prompt_ids = prompt_ids["input_ids"]
        prompt_ids = list(prompt_ids)
        sampling = dict(ep["sampling_params"])
        sampling["logprobs"] = True
        caps = [c for c in (body.get("max_completion_tokens"), body.get("max_tokens"), ep["max_tokens"]) if c]
        if caps:
            sampling["max_tokens"] = int(min(caps))
        self.calls[eid] = self.calls.get(eid, 0) + 1
        # The episode id is the sticky request id: every turn goes to the same server.
        out = await self.server_manager.generate(request_id=eid, prompt_ids=prompt_ids, sampling_params=sampling)
        token_ids = list(out.token_ids)
        logprobs = list(out.log_probs) if out.log_probs else [0.0] * len(token_ids)
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tools and self.tool_parser is not None:
            content, calls = await self.tool_parser.extract_tool_calls(token_ids)
            if calls:
                message["content"] = content or None
                message["tool_calls"] = [
                    {
                        "id": f"call_{eid}_{self.calls[eid]}_{i}",
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for i, c in enumerate(calls)
                ]
        hit_cap = "max_tokens" in sampling and len(token_ids) >= sampling["max_tokens"]
        finish = "length" if hit_cap or out.stop_reason == "aborted" else "stop"
        content = [
            {"token": self.tokenizer.convert_ids_to_tokens(t), "logprob": float(lp), "top_logprobs": []}
            for t, lp in zip(token_ids, logprobs)
        ]
        return web.json_response(
            {
                "id": f"chatcmpl-{eid}-{self.calls[eid]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", ""),
                "prompt_token_ids": prompt_ids,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": finish,
                        "token_ids": token_ids,
                        "logprobs": {"content": content},
                    }
                ],
                "usage": {
                    "prompt_tokens": len(prompt_ids),
                    "completion_tokens": len(token_ids),
                    "total_tokens": len(prompt_ids) + len(token_ids),
                },
            }
        )


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "bridge"}}, status=status)


_BRIDGES: dict[int, TokenBridge] = {}
_LOCK = asyncio.Lock()


async def shared_bridge(server_manager, tokenizer, host: str = "0.0.0.0", **kwargs) -> TokenBridge:
    """The worker process's bridge (one per server manager), started on first use."""
    key = id(server_manager)
    async with _LOCK:
        b = _BRIDGES.get(key)
        if b is None:
            b = TokenBridge(server_manager, tokenizer, **kwargs)
            await b.start(host=host)
            _BRIDGES[key] = b
    return b
