"""The lock-loss nemesis's own contract (chaos/nemesis/lock.py), on our fault proxy in front of a
store server, without FUSE: which proxy each step touches, what heal and teardown undo, what it
refuses. The faults' effect on mounts is tested in test_sharedstore_fuse.py."""

import pytest

from chaos.history import History, read_history
from chaos.nemesis import LockLossNemesis, Nemesis, NemesisError
from machinery.faultproxy import FaultProxyServer
from machinery.faultproxy.client import ToxiproxyClient
from machinery.sharedstore.harness import StoreServerProcess, control


@pytest.fixture
def rig(tmp_path):
    proxy = FaultProxyServer("127.0.0.1", 0).start()
    try:
        with StoreServerProcess(lease=30) as server:
            api = ToxiproxyClient(proxy.api_url)
            for host in ("A", "B"):
                api.create_proxy(f"store-{host}", server.address)
            with History(tmp_path / "h.jsonl", run="t", target="sharedstore") as history:
                yield api, server, history
    finally:
        proxy.stop()


def nemesis_for(api, server, history):
    return LockLossNemesis(history, proxy_api=api.api_url, store=server.address,
                           links={"A": "store-A", "B": "store-B"})


def test_faults_touch_only_the_named_hosts_proxy_and_heal_undoes_them(rig):
    api, server, history = rig
    with nemesis_for(api, server, history) as nemesis:
        assert isinstance(nemesis, Nemesis)
        nemesis.invoke("partition", host="A")
        nemesis.invoke("latency", host="B", latency=300, jitter=10)
        assert api.proxy("store-A")["enabled"] is False and api.proxy("store-B")["enabled"] is True
        toxics = {t["name"]: t for t in api.toxics("store-B")}
        assert set(toxics) == {"bc_lockloss_latency_upstream", "bc_lockloss_latency_downstream"}
        assert toxics["bc_lockloss_latency_upstream"]["attributes"]["latency"] == 300
        assert api.toxics("store-A") == []
        healed = nemesis.invoke("heal", host="A")
        assert [w["fault"] for w in healed["fault_window"]] == ["A/partition"]
        assert api.proxy("store-A")["enabled"] is True and len(api.toxics("store-B")) == 2
        nemesis.invoke("reset", host="A", timeout=50)
        assert {t["type"] for t in api.toxics("store-A")} == {"reset_peer"}
    # teardown healed what was left: B's latency and A's reset
    assert api.toxics("store-A") == [] and api.toxics("store-B") == []
    ends = [e for e in read_history(history.path) if e["value"].get("phase") == "end" and e["f"] == "teardown"]
    assert sorted(w["fault"] for w in ends[0]["value"]["fault_window"]) == ["A/reset", "B/latency"]


def test_expire_ends_the_hosts_session_on_the_store(rig):
    api, server, history = rig
    a = control(server.address, {"op": "hello", "client": "A"})["session"]
    with nemesis_for(api, server, history) as nemesis:
        assert nemesis.invoke("expire", host="A") == {"expired_sessions": [a]}
        assert nemesis.active == {}, "an expiry is an event, not a fault to heal"
    assert [s["expired"] for s in server.state()["sessions"]] == [True]


def test_bad_steps_are_refused_naming_the_problem(rig):
    api, server, history = rig
    with nemesis_for(api, server, history) as nemesis:
        with pytest.raises(ValueError, match="host='C' is not one of"):
            nemesis.invoke("partition", host="C")
        with pytest.raises(ValueError, match="unknown step 'lose_lock'"):
            nemesis.invoke("lose_lock", host="A")
        nemesis.invoke("partition", host="A")
        with pytest.raises(NemesisError, match="already active"):
            nemesis.invoke("partition", host="A")
    with pytest.raises(NemesisError, match=r"proxies \['store-Z'\] do not exist"):
        LockLossNemesis(history, proxy_api=api.api_url, store=server.address, links={"Z": "store-Z"}).setup()
    with pytest.raises(ValueError, match="at least one host"):
        LockLossNemesis(history, proxy_api=api.api_url, store=server.address, links={})
