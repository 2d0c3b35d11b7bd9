"""The swarm harness (issue 50): many simulated runners that speak rlmesh's real wire protocol,
a few processes holding many of them each, against the real param server, weight relays,
aggregators and supervisor; ``python -m tests.scale.swarm --help``. A benchmark, not CI
(tests/integration/test_swarm_small.py keeps a small swarm working)."""
