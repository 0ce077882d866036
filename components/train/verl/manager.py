"""The agent loop manager verl's driver loads (`rollout.agent.agent_loop_manager_class`).

It is verl's own V1 manager; naming it from this module makes the driver import our registrations (the
`grpo_process` estimator, the agent loop) before it computes advantages.
"""

from __future__ import annotations

from verl.trainer.ppo.v1 import AgentLoopManagerTQ

from components.train.local import grpo_process  # noqa: F401  (registers on import)
from components.train.verl import agent_loop  # noqa: F401  (registers on import)


class AgentR1AgentLoopManager(AgentLoopManagerTQ):
    pass
