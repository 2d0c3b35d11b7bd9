"""The streaming group (config/streaming.py): broadcast_interval and the runners' in-flight
fragments are declared once and shared by IMPALA, APPO, APEX and APEX_DDPG; an algorithm
with another default says so in its ``defaults``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import rlmesh
from rlmesh.algorithms.apex_config import ApexDDPGConfig, ApexDQNConfig, ApexSettings
from rlmesh.algorithms.appo_config import APPOConfig
from rlmesh.algorithms.dqn_config import DQNConfig
from rlmesh.algorithms.impala_config import ImpalaConfig
from rlmesh.config.streaming import StreamingSettings

SHARED = ("broadcast_interval", "max_sample_requests_in_flight_per_worker")
USERS = (ImpalaConfig, APPOConfig, ApexDQNConfig, ApexDDPGConfig)


def declarations(name: str) -> list[str]:
    """Where ``name: <type> = setting(`` is written in the package's source."""
    root = Path(rlmesh.__file__).parent
    pattern = re.compile(rf"^\s+{name}: .*= setting\(", re.M)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                  if pattern.search(p.read_text()))


def test_each_shared_setting_is_declared_once_for_every_algorithm_that_reads_it():
    for name in SHARED:
        assert declarations(name) == ["config/streaming.py"], name
        for config in USERS:
            assert name in config().to_dict()
    assert ImpalaConfig().broadcast_interval == ApexDQNConfig().broadcast_interval == 1
    assert ApexDDPGConfig().max_sample_requests_in_flight_per_worker == 2
    # RLlib's name for the in-flight window works for both families.
    cfg = ApexDQNConfig().env_runners(max_requests_in_flight_per_env_runner=3)
    assert cfg.max_sample_requests_in_flight_per_worker == 3
    assert ImpalaConfig().training(broadcast_interval=4).broadcast_interval == 4


def test_an_algorithm_sets_its_own_default_for_a_mixed_in_setting():
    # As ApexDQNConfig is written: the group mixed in next to the algorithm's base.
    @dataclass(kw_only=True)
    class SlowBroadcast(DQNConfig, ApexSettings, defaults={"broadcast_interval": 8}):
        pass

    assert SlowBroadcast().broadcast_interval == 8
    assert ApexDQNConfig().broadcast_interval == 1
    doc = {f.name: f.metadata for f in SlowBroadcast.__dataclass_fields__.values()}
    assert doc["broadcast_interval"] == StreamingSettings.__dataclass_fields__[
        "broadcast_interval"].metadata
