"""Ray's ``ray.experimental`` as RLlib's docs used it: ``named_actors``."""
