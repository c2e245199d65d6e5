package brokerconf.driver;

import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.activemq.ActiveMQConnection;
import org.apache.activemq.ActiveMQConnectionFactory;
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
            return failover.getConnectedTransportURI() == null ? null : failover.getConnectedTransportURI().toString();
        }
        return connection.getTransport().getRemoteAddress();
    }

    @Override
    public Map<String, Object> address(String name) {
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("address", addressOf((ActiveMQConnection) get(name).connection));
        return result;
    }
}
