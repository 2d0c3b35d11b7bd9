"""The policy contract: what acts in the env runners and what learns in the learners, one
object per policy id (``Policy``), its torch implementation (``TorchPolicy``) and the
``build_policy`` template."""
