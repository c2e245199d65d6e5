"""The NFS mount options the A-MQ guide recommends, with their NFS meaning, and the retry schedule
they imply.

Meanings as nfs(5) ("Options supported by all versions", "timeo" and "retrans"; "soft" / "hard";
"lookupcache"; "sync"):
- ``hard`` (default): a request that gets no answer is retried for ever; ``soft``: after ``retrans``
  retransmissions it fails and the application gets EIO.
- ``timeo`` (deciseconds): how long the client waits for an answer before the first
  retransmission. Over TCP the wait grows *linearly*: after each retransmission it is increased by
  ``timeo``, up to 600 deciseconds (nfs(5): "linear backoff").
- ``retrans``: how many retransmissions before a soft mount gives up (nfs(5) default 2 over TCP).
- ``lookupcache=none``: no cached name lookups (positive or negative): every lookup asks the server.
- ``sync``: writes are sent and committed before the write system call returns.
- ``intr``: ignored (nfs(5): deprecated, ignored since kernel 2.6.25); ``proto=tcp``: the only
  transport modelled (the linear backoff above is the TCP rule).
- ``vers``: 4 (leases: a client that stops renewing loses its locks after the lease time) or 3
  (NLM locks: held until the client reboots and says so, so a crashed or cut-off client's lock is
  never released).

So with ``soft,timeo=20,retrans=2`` a request waits 2 s, then 4 s, then 6 s before it fails:
12 s, the figure the guide (Red Hat A-MQ 6.2 Fault Tolerant Messaging, 3.1, the shared file system
master/slave mount options) gives for failure detection. `soft_failure_after` computes it from the
options; nothing here holds the number 12.
"""

from __future__ import annotations

from dataclasses import dataclass

#: nfs(5): the wait between retransmissions is capped at 600 deciseconds (60 s)
MAX_TIMEO_DS = 600
#: nfs(5) defaults over TCP
DEFAULT_TIMEO_DS = 600
DEFAULT_RETRANS = 2
LOOKUPCACHE = ("all", "positive", "pos", "none")


class MountOptionError(ValueError):
    """A bad ``-o`` option; the message names it."""


@dataclass(frozen=True)
class MountOptions:
    soft: bool = False
    timeo: int = DEFAULT_TIMEO_DS      # deciseconds
    retrans: int = DEFAULT_RETRANS
    lookupcache: str = "all"
    sync: bool = False
    vers: int = 4

    @classmethod
    def parse(cls, text: str) -> "MountOptions":
        """``"soft,timeo=20,retrans=2,lookupcache=none,sync"`` -> MountOptions; an unknown or bad
        option raises `MountOptionError` naming it."""
        fields: dict = {}
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            key, sep, value = item.partition("=")
            if key in ("soft", "hard", "sync", "async") and sep:
                raise MountOptionError(f"mount option {key!r} takes no value (got {item!r})")
            if key == "soft":
                fields["soft"] = True
            elif key == "hard":
                fields["soft"] = False
            elif key == "sync":
                fields["sync"] = True
            elif key == "async":
                fields["sync"] = False
            elif key in ("timeo", "retrans"):
                if not value.isdigit():
                    raise MountOptionError(f"mount option {key}={value!r}: needs a non-negative integer")
                number = int(value)
                if key == "timeo" and number == 0:
                    raise MountOptionError("mount option timeo=0: needs at least 1 (decisecond)")
                fields[key] = number
            elif key == "lookupcache":
                if value not in LOOKUPCACHE:
                    raise MountOptionError(f"mount option lookupcache={value!r}: use one of {', '.join(LOOKUPCACHE)}")
                fields["lookupcache"] = "positive" if value == "pos" else value
            elif key in ("intr", "nointr"):
                if sep:
                    raise MountOptionError(f"mount option {key!r} takes no value (got {item!r})")
                # accepted and ignored, as the kernel has done since 2.6.25 (nfs(5), "intr / nointr")
            elif key == "proto":
                if value not in ("tcp", "tcp6"):
                    raise MountOptionError(f"mount option proto={value!r}: the store speaks TCP only (proto=tcp)")
            elif key in ("vers", "nfsvers"):
                if value.split(".")[0] not in ("3", "4"):
                    raise MountOptionError(f"mount option {key}={value!r}: this model knows NFS versions 3 and 4")
                fields["vers"] = int(value.split(".")[0])
            else:
                raise MountOptionError(f"unknown mount option {item!r} (known: soft, hard, timeo=DS, retrans=N, "
                                       f"lookupcache=all|positive|none, sync, async, intr, nointr, proto=tcp, "
                                       f"vers=3|4)")
        return cls(**fields)

    def render(self) -> str:
        return ",".join(["soft" if self.soft else "hard", f"timeo={self.timeo}", f"retrans={self.retrans}",
                         f"lookupcache={self.lookupcache}", "sync" if self.sync else "async", f"vers={self.vers}"])

    def waits(self, attempts: int | None = None) -> list[float]:
        """Seconds the client waits for an answer on each try: the first transmission and then each
        retransmission, the wait growing by ``timeo`` each time, capped at 600 ds (nfs(5)). A soft
        mount makes 1 + ``retrans`` tries; for a hard mount pass how many to list."""
        count = (1 + self.retrans) if attempts is None else attempts
        return [min(self.timeo * (n + 1), MAX_TIMEO_DS) / 10.0 for n in range(count)]

    def soft_failure_after(self) -> float:
        """Seconds from sending a request to a soft mount's EIO when the server never answers."""
        return sum(self.waits(1 + self.retrans))
