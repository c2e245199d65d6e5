"""The lock-loss experiment suites load chaos/experiments/<kind>-<experiment>.toml by name
(suites/experiment_support.py EXPERIMENTS). Those suites are slow and run only against real
brokers, so a wrong directory would first show as a dozen failures in the main job (it did,
once, when the suites moved out of conformance/): every file they name is checked here."""

from __future__ import annotations

import pytest

from chaos.experiment_file import load_experiment
from suites.experiment_support import EXPERIMENTS

#: the files the suites build from: test_nfs_lock_loss_experiments.py ({kind}-{experiment}: nfs-lock-loss, nfs-lease-expiry) and
#: test_jdbc_lock_loss_experiments.py ({kind}-jdbc-lock-loss), for the kinds they run on
NAMED = [f"{kind}-{experiment}.toml" for kind in ("reference", "activemq", "artemis")
         for experiment in ("nfs-lock-loss", "nfs-lease-expiry", "jdbc-lock-loss")]


@pytest.mark.parametrize("name", NAMED)
def test_every_experiment_file_the_suites_name_loads(name):
    assert (EXPERIMENTS / name).is_file(), f"{EXPERIMENTS / name} is missing"
    assert load_experiment(EXPERIMENTS / name).name
