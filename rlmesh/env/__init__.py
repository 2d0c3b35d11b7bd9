"""Multi-agent environments: ``MultiAgentEnv``, ``make_multi_agent`` and the PettingZoo
wrappers (``ParallelPettingZooEnv``, ``PettingZooEnv``; pettingzoo is the ``multiagent``
extra, imported only when a wrapper is built)."""

from rlmesh.env.multi_agent_env import ALL, MultiAgentEnv, is_multi_agent, make_multi_agent

__all__ = ["ALL", "MultiAgentEnv", "is_multi_agent", "make_multi_agent",
           "ParallelPettingZooEnv", "PettingZooEnv"]


def __getattr__(name: str):
    if name in ("ParallelPettingZooEnv", "PettingZooEnv"):
        from rlmesh.env import pettingzoo

        return getattr(pettingzoo, name)
    raise AttributeError(name)
