"""Placement: which node each bundle of resources goes to (``scheduler.place``, pure, no I/O)
and what a node offers (``node_resources``). Below tune and the launcher, which place by the
same rules: a sweep on this machine, a job or a sweep on a cluster."""
