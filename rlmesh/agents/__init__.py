"""RLlib's Trainer-era module paths, ``ray.rllib.agents.<algo>``: each subpackage names
today's algorithm classes ``XTrainer`` and their defaults ``DEFAULT_CONFIG`` (one table and
the module maker: _exports.py); ``rlmesh.agents.trainer`` has Trainer and with_common_config.
Nothing here imports torch until a Trainer class is touched."""
