"""The activemq target: its native configuration from the scenario, launcher(s) and target."""
