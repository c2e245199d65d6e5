"""The rabbitmq target: its native configuration from the scenario, launcher(s) and target."""
