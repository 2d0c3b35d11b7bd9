"""The observation-filter calls of the sampling roles (env, ES and policy-server runners),
written once: the driver merges each runner's new statistics into one global filter
(RLlib's ``observation_filter``) and hands the result back to every runner."""

from __future__ import annotations

from typing import Any

from rlmesh.rl.filters import NoFilter

# The names a role using the mixin serves, for its ``Protocol(calls=...)``.
FILTER_CALLS = ("get_filter_updates", "set_filter_state", "get_filter_state")
# Those of env runners, whose samplers may run env-to-module connectors.
CONNECTOR_FILTER_CALLS = ("get_connector_filter_updates", "set_connector_filter_state",
                          "get_connector_filter_state")


class ObsFilterCalls:
    """Mixin: a role that provides ``obs_filter`` (an ``rl/filters.py`` filter, as an
    attribute or a property) serves the driver's filter calls with it."""

    obs_filter: NoFilter

    def get_filter_updates(self) -> dict[str, Any] | None:
        """The filter statistics gathered since the last call (then forgotten here)."""
        return self.obs_filter.flush()

    def set_filter_state(self, state: dict[str, Any] | None) -> None:
        """Take the driver's global filter statistics."""
        self.obs_filter.set_state(state)

    def get_filter_state(self) -> dict[str, Any] | None:
        return self.obs_filter.get_state()

    # The statistics of env-to-module connectors (MeanStdFilter; connectors/wiring.py),
    # merged by the driver as the observation filter's are.

    def get_connector_filter_updates(self) -> dict[str, Any]:
        connectors = getattr(getattr(self, "sampler", None), "connectors", None)
        return {} if connectors is None else connectors.flush_filters()

    def get_connector_filter_state(self) -> dict[str, Any]:
        connectors = getattr(getattr(self, "sampler", None), "connectors", None)
        return {} if connectors is None else connectors.filter_states()

    def set_connector_filter_state(self, state: dict[str, Any]) -> None:
        connectors = getattr(getattr(self, "sampler", None), "connectors", None)
        if connectors is not None:
            connectors.set_filter_states(state)
