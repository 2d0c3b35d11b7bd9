"""A sweep run as its own program, for the test that interrupts it: argv[1] the results
folder, argv[2] "resume" to go on with it."""

import sys

from rlmesh import tune

if __name__ == "__main__":
    analysis = tune.run(
        "tests.integration.tune_trainables:counter",
        config={"quality": tune.grid_search([1.0, 2.0, 3.0, 4.0]), "iterations": 8,
                "sleep": 0.25},
        metric="score", name="resumable", local_dir=sys.argv[1], max_concurrent_trials=2,
        resume=len(sys.argv) > 2 and sys.argv[2] == "resume", print_every_s=1)
    sys.exit(130 if analysis.interrupted else 0)
