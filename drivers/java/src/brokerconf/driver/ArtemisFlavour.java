package brokerconf.driver;

import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.activemq.artemis.api.core.client.ClientSessionFactory;
import org.apache.activemq.artemis.jms.client.ActiveMQConnection;
import org.apache.activemq.artemis.jms.client.ActiveMQConnectionFactory;
import org.apache.activemq.artemis.spi.core.protocol.RemotingConnection;

/** Artemis's Core client through its JMS layer (artemis-jms-client): tcp:// URLs with ha,
 *  reconnect and load-balancing parameters; FailoverEventListener callbacks reported as events.
 *  One factory per URL (and user), kept for the driver's life: a load-balancing policy's state
 *  lives in the factory's server locator, so successive connections must share it. */
final class ArtemisFlavour extends JmsSessions {
    private final Map<String, ActiveMQConnectionFactory> factories = new ConcurrentHashMap<>();

    @Override
    public Map<String, Object> connect(String name, String uri, Map<String, Object> options) throws Exception {
        String user = (String) options.get("user");
        String password = (String) options.get("password");
        ActiveMQConnectionFactory factory = factories.computeIfAbsent(uri + "\u0000" + user,
                key -> new ActiveMQConnectionFactory(uri));
        ActiveMQConnection connection = (ActiveMQConnection) (user == null
                ? factory.createConnection() : factory.createConnection(user, password));
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
        return address(name);
    }

    static String addressOf(ActiveMQConnection connection) {
        ClientSessionFactory factory = connection.getSessionFactory();
        RemotingConnection remoting = factory == null ? null : factory.getConnection();
        return remoting == null ? null : remoting.getRemoteAddress();
    }

    @Override
    public Map<String, Object> address(String name) {
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("address", addressOf((ActiveMQConnection) get(name).connection));
        return result;
    }
}
