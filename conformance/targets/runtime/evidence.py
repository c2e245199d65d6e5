"""The evidence a handle that wraps a launcher (``self.process``) shows for a failed test: the
broker's config file (or, before it is written, the config the launcher would write) and the
tail of its log. Shared by the handles and nodes of every broker (BrokerHandle.config_text /
log_tail in conformance/targets/base.py)."""

from __future__ import annotations

from typing import Any

__all__ = ["ProcessEvidence"]


class ProcessEvidence:
    """Mixin: ``config_text`` and ``log_tail`` read from ``self.process`` (a launcher with
    ``config_path``, ``render_config()`` and ``log_tail(lines)``)."""

    process: Any

    def config_text(self) -> str:
        try:
            return self.process.config_path.read_text(encoding="utf-8")
        except OSError:
            return self.process.render_config()

    def log_tail(self, lines: int = 80) -> str:
        return self.process.log_tail(lines)
