package brokerconf.driver;

import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.activemq.artemis.api.core.client.ClientSessionFactory;
import org.apache.activemq.artemis.jms.client.ActiveMQConnection;
import org.apache.activemq.artemis.jms.client.ActiveMQConnectionFactory;
import org.apache.activemq.artemis.spi.core.protocol.RemotingConnection;

/** Artemis's Core client through its JMS layer (artemis-jms-client): tcp:// and udp:// URLs with
 *  ha, reconnect, load-balancing and discovery parameters; FailoverEventListener callbacks reported
 *  as events. One factory per URL (and user), kept for the driver's life: a load-balancing policy's
 *  state lives in the factory's server locator, so successive connections must share it. A factory
 *  may also be made on its own under a name ({@link #factory}) and used later by connections that
 *  name it: a discovery factory's initial wait is counted from its creation, which then is not
 *  its first connection's. */
final class ArtemisFlavour extends JmsSessions {
    private final Map<String, ActiveMQConnectionFactory> factories = new ConcurrentHashMap<>();
    private final Map<String, ActiveMQConnectionFactory> named = new ConcurrentHashMap<>();

    @Override
    public Map<String, Object> factory(String factoryName, String uri) throws Exception {
        if (named.containsKey(factoryName)) {
            throw new IllegalStateException("a factory named " + factoryName + " exists already");
        }
        ActiveMQConnectionFactory factory = new ActiveMQConnectionFactory(uri);
        // the moment the constructor returned: what "since its creation" counts from
        double createdMono = System.nanoTime() / 1e9;
        long createdWallMs = System.currentTimeMillis();
        named.put(factoryName, factory);
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("created_mono", createdMono);
        result.put("created_wall_ms", createdWallMs);
        return result;
    }

    @Override
    public Map<String, Object> connect(String name, String uri, Map<String, Object> options) throws Exception {
        String user = (String) options.get("user");
        String password = (String) options.get("password");
        String factoryName = (String) options.get("factory");
        ActiveMQConnectionFactory factory = factoryName != null ? named.get(factoryName)
                : factories.computeIfAbsent(uri + "\u0000" + user, key -> new ActiveMQConnectionFactory(uri));
        if (factory == null) {
            throw new IllegalStateException("no factory named " + factoryName);
        }
        ActiveMQConnection connection = (ActiveMQConnection) (user == null
                ? factory.createConnection() : factory.createConnection(user, password));
        // the moment the library handed the connection over (before the session is opened)
        double connectedMono = System.nanoTime() / 1e9;
        connection.setFailoverListener(type -> {
            String kind = switch (type) {
                case FAILURE_DETECTED -> "interrupted";
                case FAILOVER_COMPLETED -> "resumed";
                case FAILOVER_FAILED -> "failed";
            };
            Map<String, Object> detail = new LinkedHashMap<>();
            detail.put("type", type.name().toLowerCase(Locale.ROOT));
            detail.put("address", addressOf(connection));
            Main.event(kind, name, detail);
        });
        connection.setExceptionListener(e -> Main.event("error", name, Main.error(e)));
        try {
            register(name, connection, options);
        } catch (Exception e) {
            connection.close();
            throw e;
        }
        Map<String, Object> result = address(name);
        result.put("connected_mono", connectedMono);
        return result;
    }

    private static RemotingConnection remotingOf(ActiveMQConnection connection) {
        ClientSessionFactory factory = connection.getSessionFactory();
        return factory == null ? null : factory.getConnection();
    }

    static String addressOf(ActiveMQConnection connection) {
        RemotingConnection remoting = remotingOf(connection);
        return remoting == null ? null : remoting.getRemoteAddress();
    }

    /** This end of the connection's socket as the transport reports it ("/127.0.0.1:40123"). */
    static String localAddressOf(ActiveMQConnection connection) {
        RemotingConnection remoting = remotingOf(connection);
        return remoting == null || remoting.getTransportConnection() == null ? null
                : remoting.getTransportConnection().getLocalAddress();
    }

    @Override
    public Map<String, Object> address(String name) {
        ActiveMQConnection connection = (ActiveMQConnection) get(name).connection;
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("address", addressOf(connection));
        result.put("local_address", localAddressOf(connection));
        return result;
    }
}
