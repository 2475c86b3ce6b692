"""Leave-one-out (RLOO) advantages whose baselines leave masked samples out.

dojo masks a sample whose episode failed on infrastructure (sandbox died, policy unreachable):
the agent loop zeroes its ``response_mask``, so it carries no loss. verl's ``rloo`` would still
count its reward of 0 in the group's baseline and push the other samples' advantages up; here a
masked sample (all-zero response mask) is not in any baseline and gets advantage 0. With nothing
masked, this is exactly verl's ``rloo``: A_i = r_i - mean_{j != i} r_j.
"""

from collections import defaultdict

import torch
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

NAME = "dojo_rloo"


def compute_dojo_rloo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    epsilon: float = 1e-6,
    config=None,
    **kwargs,
):
    scores = token_level_rewards.sum(dim=-1)
    live = response_mask.sum(dim=-1) > 0
    groups = defaultdict(list)
    for i in range(scores.shape[0]):
        if live[i]:
            groups[index[i]].append(i)
    adv = torch.zeros_like(scores)
    with torch.no_grad():
        for members in groups.values():
            n = len(members)
            if n < 2:
                continue  # no one to compare with: no signal
            total = scores[members].sum()
            for i in members:
                adv[i] = scores[i] - (total - scores[i]) / (n - 1)
    adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


def register_all() -> None:
    """Register dojo's estimator in verl's registry (idempotent). Also usable as Ray's
    ``runtime_env.worker_process_setup_hook`` so the trainer's processes have it."""
    if ADV_ESTIMATOR_REGISTRY.get(NAME) is not compute_dojo_rloo_advantage:
        register_adv_est(NAME)(compute_dojo_rloo_advantage)


register_all()
