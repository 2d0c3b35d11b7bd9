"""Writes rllib_2_60_defaults.json beside this file: every config key of RLlib's algorithms
and its default, as ``XConfig().to_dict()`` reports it. Run with RLlib's own venv
(``make .venv-rllib/.installed``): ``.venv-rllib/bin/python tests/conformance/dump_rllib_defaults.py``.
The file is data RLlib reports about itself; the tests read it, so CI needs no Ray."""

import json
import sys
from pathlib import Path

ALGORITHMS = {"PPO": "ppo:PPOConfig", "APPO": "appo:APPOConfig", "IMPALA": "impala:IMPALAConfig",
              "DQN": "dqn:DQNConfig", "SAC": "sac:SACConfig", "BC": "bc:BCConfig",
              "MARWIL": "marwil:MARWILConfig"}


def plain(value):
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def main() -> None:
    import importlib

    import ray

    out = {"ray": ray.__version__, "defaults": {}}
    for name, path in ALGORITHMS.items():
        module, _, cls = path.partition(":")
        config = getattr(importlib.import_module(f"ray.rllib.algorithms.{module}"), cls)()
        out["defaults"][name] = {k: v for k, v in config.to_dict().items() if plain(v)}
    target = Path(__file__).with_name("rllib_2_60_defaults.json")
    target.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
