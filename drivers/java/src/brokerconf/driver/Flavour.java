package brokerconf.driver;

import java.util.Map;

/** One client library under test. Every connection has a name the harness chose; the library's
 *  transport events are reported through {@link Main#event}. */
interface Flavour {
    /** Opens connection {@code name} with {@code uri} and returns at least {"address": ...}, the
     *  broker address it is connected to. */
    Map<String, Object> connect(String name, String uri, Map<String, Object> options) throws Exception;

    Map<String, Object> send(String name, String queue, String body, Map<String, Object> options) throws Exception;

    /** {"body": text} or {"body": null} when nothing came within timeoutMs. */
    Map<String, Object> receive(String name, String queue, long timeoutMs) throws Exception;

    /** Acknowledges the last message received on a client-acknowledge connection. */
    Map<String, Object> ack(String name) throws Exception;

    /** {"address": the broker address the connection is on now, or null}. */
    Map<String, Object> address(String name) throws Exception;

    void close(String name) throws Exception;

    /** Makes a connection factory for {@code uri} now, under {@code factoryName}, for connections
     *  that name it later (option "factory"); answers {"created_mono", "created_wall_ms"}: when it
     *  was made. Only clients whose factory keeps state between connections answer it. */
    default Map<String, Object> factory(String factoryName, String uri) throws Exception {
        throw new UnsupportedOperationException("factory: not offered by this client");
    }

    /** {"connected": uri, "updated": [the URIs the broker supplied], "uris": [the client's own]}:
     *  what a failover transport knows; only clients with such a transport answer it. */
    default Map<String, Object> transportUris(String name) throws Exception {
        throw new UnsupportedOperationException("transport_uris: not a failover client");
    }
}
