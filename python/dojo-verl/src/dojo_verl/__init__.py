"""dojo environments behind verl.

- ``DojoAgentLoop`` (``dojo_verl.agent_loop``): a verl ``AgentLoopBase`` that runs each sample as
  one ``dojo env serve`` episode (``POST /v1/episodes``) and returns dojo's token streams, shaped
  reward, stop reason and masked flag as an ``AgentLoopOutput``. Registered through
  ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` (``agent_loop.yaml`` here).
- ``TokenBridge`` (``dojo_verl.bridge``): an OpenAI ``/v1/chat/completions`` endpoint inside the
  verl worker process; the episode's agent calls it, it forwards token ids to verl's
  ``server_manager.generate`` with the episode id as the sticky request id (prefix caching).
- ``dojo_rloo`` (``dojo_verl.advantage``): leave-one-out advantages whose baselines leave out
  masked samples (infrastructure failures), registered in verl's estimator registry.

Nothing here re-implements dojo: the agent loop, grading and reward shaping run in Rust, in
``dojo env serve``.
"""

from dojo_verl.advantage import compute_dojo_rloo_advantage, register_all

AGENT_LOOP_CONFIG = __file__.rsplit("/", 1)[0] + "/agent_loop.yaml"

__all__ = ["AGENT_LOOP_CONFIG", "compute_dojo_rloo_advantage", "register_all"]
