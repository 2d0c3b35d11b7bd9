"""rlmesh.driver: Algorithm, the mesh (the event loop and every remote call behind a
synchronous facade), the runner and learner groups, checkpoints, evaluation, results and
the registry of algorithm names."""
