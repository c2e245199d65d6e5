package brokerconf.driver;

import java.io.IOException;
import java.lang.reflect.Field;
import java.net.URI;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.activemq.ActiveMQConnection;
import org.apache.activemq.ActiveMQConnectionFactory;
import org.apache.activemq.command.ConnectionControl;
import org.apache.activemq.transport.TransportListener;
import org.apache.activemq.transport.failover.FailoverTransport;

/** ActiveMQ Classic's OpenWire client (activemq-client): failover: and discovery: URIs, with the
 *  failover transport's TransportListener callbacks reported as events. */
final class ActiveMqFlavour extends JmsSessions {
    @Override
    public Map<String, Object> connect(String name, String uri, Map<String, Object> options) throws Exception {
        ActiveMQConnectionFactory factory = new ActiveMQConnectionFactory(uri);
        if (options.get("user") != null) {
            factory.setUserName((String) options.get("user"));
            factory.setPassword((String) options.get("password"));
        }
        // createConnection starts the transport (a failover transport starts reconnecting in the
        // background); the listener is added before start(), whose ConnectionInfo waits for the
        // first connection, so the first "resumed" is not missed
        ActiveMQConnection connection = (ActiveMQConnection) factory.createConnection();
        connection.addTransportListener(new TransportListener() {
            @Override
            public void onCommand(Object command) {
                // the broker's dynamic-failover announcements (its network's brokers, a request to
                // rebalance), as they arrive: what the broker told this client
                if (command instanceof ConnectionControl control) {
                    Map<String, Object> detail = new LinkedHashMap<>();
                    detail.put("connected_brokers", control.getConnectedBrokers());
                    detail.put("rebalance", control.isRebalanceConnection());
                    detail.put("reconnect_to", control.getReconnectTo());
                    Main.event("connection-control", name, detail);
                }
            }

            @Override
            public void onException(IOException error) {
                Main.event("exception", name, Main.error(error));
            }

            @Override
            public void transportInterupted() { // (sic: the interface's spelling)
                Main.event("interrupted", name, null);
            }

            @Override
            public void transportResumed() {
                Map<String, Object> detail = new LinkedHashMap<>();
                detail.put("address", addressOf(connection));
                Main.event("resumed", name, detail);
            }
        });
        connection.setExceptionListener(e -> Main.event("error", name, Main.error(e)));
        try {
            register(name, connection, options);
        } catch (Exception e) {
            try {
                connection.close();
            } catch (Exception ignored) {
                // the connection never worked; the first error is the one to report
            }
            throw e;
        }
        return address(name);
    }

    static String addressOf(ActiveMQConnection connection) {
        FailoverTransport failover = connection.getTransport().narrow(FailoverTransport.class);
        if (failover != null) {
            // read once: the transport drops its connected URI while it reconnects, on its own
            // thread, so a second read can be null where the first was not
            URI connected = failover.getConnectedTransportURI();
            return connected == null ? null : connected.toString();
        }
        return connection.getTransport().getRemoteAddress();
    }

    /** The failover transport's lists, read from its private fields: the library has no getter for
     *  them, and they are exactly what the client will pick its next broker from ("updated", the
     *  broker-supplied list, before "uris", its own URI's). */
    @Override
    public Map<String, Object> transportUris(String name) throws Exception {
        ActiveMQConnection connection = (ActiveMQConnection) get(name).connection;
        FailoverTransport failover = connection.getTransport().narrow(FailoverTransport.class);
        if (failover == null) {
            throw new IllegalStateException("transport_uris: " + name + " has no failover transport");
        }
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("connected", addressOf(connection));
        result.put("updated", uriField(failover, "updated"));
        result.put("uris", uriField(failover, "uris"));
        return result;
    }

    private static List<Object> uriField(FailoverTransport failover, String field) throws Exception {
        Field f = FailoverTransport.class.getDeclaredField(field);
        f.setAccessible(true);
        List<Object> out = new ArrayList<>();
        for (Object uri : (List<?>) f.get(failover)) {
            out.add(((URI) uri).toString());
        }
        return out;
    }

    @Override
    public Map<String, Object> address(String name) {
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("address", addressOf((ActiveMQConnection) get(name).connection));
        return result;
    }
}
