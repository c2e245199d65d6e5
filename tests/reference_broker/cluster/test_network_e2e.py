"""Two in-process reference brokers over real loopback STOMP: a connector whose peer is not up yet
retries with its static: reconnect options and forms the bridge once the peer listens."""


from machinery.process import free_ports
from conformance.targets.reference.network import ReferenceNode
from conformance.waiting import settle
from machinery.waiting import poll


def test_static_connector_reconnects_until_the_peer_listens():
    (port,) = free_ports(1)
    a, b = ReferenceNode("A", "rn-A"), ReferenceNode("B", "rn-B")
    try:
        a.listen()
        a.start_network([{"uri": f"static:(tcp://127.0.0.1:{port})?initialReconnectDelay=100"
                                 "&useExponentialBackOff=false", "name": "retry"}])
        settle()  # the connector retries every 100 ms meanwhile: none of its attempts may bridge
        assert a.bridges_up() == 0
        attempts_before = a.call(lambda: a.network.bridges[0].connections)
        b.config_data["stomp"] = f"127.0.0.1:{port}"
        b.listen()
        b.start_network([])
        assert poll(a.bridges_up, lambda up: up == 1, timeout=10) == 1, \
            "the connector did not reconnect once its peer listened"
        assert attempts_before == 0 and a.call(lambda: a.network.bridges[0].remote_name) == "rn-B"
    finally:
        b.stop()
        a.stop()
