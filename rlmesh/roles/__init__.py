"""Roles: one actor class per file (env_runner, paramserver, learner). Each role's decisions
are plain code tested without sockets; the actor is a thin shell around them."""
