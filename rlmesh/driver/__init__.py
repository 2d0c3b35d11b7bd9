"""rlmesh.driver: Algorithm, the mesh (the wiring, the event loop and a pool per role kind
making every remote call), the runner and learner groups, checkpoints, evaluation,
results and the registry of algorithm names."""
