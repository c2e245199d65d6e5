"""Nemeses: faults with setup / invoke / teardown, recorded in the history (see base.py)."""

from .base import Nemesis, NemesisError, RecordedNemesis
from .container import ContainerPartitionNemesis
from .lock import LockLossNemesis, lock_loss_nemesis
from .netns import NetnsNemesis, netns_unavailable
from .process import ProcessNemesis, process_running
from .proxy import ProxyNemesis

__all__ = ["ContainerPartitionNemesis", "LockLossNemesis", "Nemesis", "NemesisError", "NetnsNemesis", "ProcessNemesis", "ProxyNemesis",
           "RecordedNemesis", "lock_loss_nemesis", "netns_unavailable", "process_running"]
