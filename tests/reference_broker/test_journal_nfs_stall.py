"""A reference master whose journal sits on the simulated NFS (machinery/sharedstore) and whose storage
link is cut while it serves (issue 18; the defect: journal I/O on the event loop).

A journal write on a cut soft mount blocks in the kernel until the mount's retransmissions are
spent (here soft,timeo=50,retrans=2: 5 + 10 + 15 = 30 s). The store's I/O deadline
(``store.io_timeout_ms``, reference_broker/store/bounded_io.py) must end that wait long before:
the store is failed, the master stops serving (listeners and client connections closed, as when
it loses its lock), nothing it did not write is receipted, and every message it receipted is on
the slave that takes over. Before the deadline existed the master's event loop blocked with the
write: a second client's CONNECT (which touches no store) got no answer at all while its listener
stayed open, until the kernel gave up.

Checked by waiting on conditions (the master's STOMP port closed or dropping connections; the slave
serving) with a deadline of the I/O timeout plus a generous margin that is still well inside the
30 s the kernel would block: a broker that waits on the kernel fails, one that bounds its own wait
passes however slow the machine is. FT-SHARED-9 (conformance/spec/fault_tolerance.toml): no
receipted persistent message is lost across the failover.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from chaos.nemesis.lock import lock_loss_nemesis
from machinery.sharedstore.harness import fuse_unavailable
from machinery.sharedstore.mountopts import MountOptions
from conformance.clients.stomp_client import StompClient
from conformance.requirements import missing_mark
from conformance.targets.reference.shared_store import launch_shared_store
from conformance.topology import NfsOptions, SharedStore, Topology

pytestmark = [pytest.mark.slow, missing_mark("fuse", fuse_unavailable())]

MOUNT = "soft,timeo=50,retrans=2,lookupcache=none,sync"
IO_TIMEOUT_MS = 2000
#: how long past the I/O deadline the master may take to close its doors (a loaded 2-core machine)
MARGIN_S = 10.0
QUEUE = "queue://nfs.stall.orders"


def stomp_frame(command: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    head = "".join(f"{k}:{v}\n" for k, v in headers.items())
    return f"{command}\n{head}\n".encode() + body + b"\0"


def connect_probe(port: int, wait_s: float) -> str:
    """Open a STOMP connection to ``port`` and send CONNECT: ``"refused"`` (nothing listens),
    ``"dropped"`` (the connection was closed or reset without an answer), ``"connected"``
    (CONNECTED came back) or ``"silent"`` (no answer within ``wait_s``)."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=wait_s)
    except ConnectionRefusedError:
        return "refused"
    except OSError:
        return "dropped"
    with sock:
        sock.settimeout(wait_s)
        try:
            sock.sendall(stomp_frame("CONNECT", {"accept-version": "1.2", "host": "localhost"}))
            data = sock.recv(4096)
        except socket.timeout:
            return "silent"
        except OSError:
            return "dropped"
        if not data:
            return "dropped"
        return "connected" if data.startswith(b"CONNECTED") else f"answered {data[:40]!r}"


def send_after_cut(port: int, outcome: dict) -> None:
    """A persistent SEND with a receipt on its own raw connection: records whether a RECEIPT came."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            sock.settimeout(60)
            sock.sendall(stomp_frame("CONNECT", {"accept-version": "1.2", "host": "localhost"}))
            if not sock.recv(4096).startswith(b"CONNECTED"):
                outcome["result"] = "no CONNECTED"
                return
            sock.sendall(stomp_frame("SEND", {"destination": "/queue/nfs.stall.orders", "persistent": "true",
                                              "receipt": "r-after-cut", "content-length": "9"}, b"after-cut"))
            outcome["sent_at"] = time.monotonic()
            data = sock.recv(4096)
            outcome["result"] = "receipt" if data.startswith(b"RECEIPT") else ("dropped" if not data else "other")
    except OSError as exc:
        outcome["result"] = f"dropped ({type(exc).__name__})"


@pytest.fixture
def group(tmp_path):
    store = SharedStore(lock_keep_alive_period_ms=500, lock_acquire_sleep_interval_ms=500,
                        nfs=NfsOptions(mount_options=MOUNT, version=4, lease_s=3.0))
    cluster = launch_shared_store(
        Topology(("A", "B"), shared_store=store, prefix="nfsstall"),
        lambda name: {"name": name, "store": {"io_timeout_ms": IO_TIMEOUT_MS}}, ("stomp",), tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop()


def test_master_with_a_stalled_journal_stops_serving_and_the_slave_has_every_receipt(group):
    kernel_gives_up_s = MountOptions.parse(MOUNT).soft_failure_after()
    assert IO_TIMEOUT_MS / 1000 + MARGIN_S < kernel_gives_up_s, "the test must tell the two apart"
    a, b = group["A"], group["B"]
    assert group.wait_for_master(60) is a, f"node A (started first) is not the master\n{group.log_tail(30)}"
    port_a = a.address("stomp")[1]

    receipted = []
    with StompClient("127.0.0.1", port_a, timeout=10) as client:
        for i in range(20):
            body = f"before-cut-{i}"
            client.send(QUEUE, body, persistent=True)  # returns once the RECEIPT came
            receipted.append(body)

    lock_loss_nemesis(group.rig).invoke("partition", host="A")  # the group's stop heals it
    after_cut: dict = {}
    sender = threading.Thread(target=send_after_cut, args=(port_a, after_cut), daemon=True)
    sender.start()
    deadline = time.monotonic() + 20
    while "sent_at" not in after_cut and "result" not in after_cut and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "sent_at" in after_cut, f"the persistent send after the cut never went out: {after_cut}"

    # The second client asks for something that touches no store: CONNECT.
    probes = []
    stop_by = after_cut["sent_at"] + IO_TIMEOUT_MS / 1000 + MARGIN_S
    while time.monotonic() < stop_by:
        answer = connect_probe(port_a, wait_s=max(0.2, min(2.0, stop_by - time.monotonic())))
        probes.append((round(time.monotonic() - after_cut["sent_at"], 1), answer))
        if answer in ("refused", "dropped"):
            break
        time.sleep(0.2)
    print(f"probes of the master after its storage link was cut (s after the stalled send, answer): {probes}")
    assert probes and probes[-1][1] in ("refused", "dropped"), (
        f"FT-SHARED-2 the master whose journal write stalled on the cut NFS link kept its STOMP listener open "
        f"{IO_TIMEOUT_MS / 1000 + MARGIN_S:.0f} s after the write (io_timeout_ms {IO_TIMEOUT_MS}): probes "
        f"{probes}\n{a.log_tail(40)}")

    sender.join(30)
    print(f"the persistent send after the cut: {after_cut}")
    if after_cut.get("result") == "receipt":
        receipted.append("after-cut")

    new_master = group.wait_for_master(90)
    assert new_master is b, f"FT-SHARED-3 the slave B did not take over: master {new_master}\n{group.log_tail(40)}"
    with StompClient("127.0.0.1", b.address("stomp")[1], timeout=10) as client:
        sub = client.subscribe(QUEUE, ack="client-individual")
        got = [m.body.decode() for m in sub.receive_n(len(receipted), timeout=30)]
        got += [m.body.decode() for m in sub.drain(quiet=1.0)]
    missing = [body for body in receipted if body not in got]
    assert not missing, f"FT-SHARED-9 receipted persistent messages lost in the failover: {missing} (got {got})"
