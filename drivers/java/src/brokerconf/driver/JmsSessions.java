package brokerconf.driver;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import javax.jms.Connection;
import javax.jms.DeliveryMode;
import javax.jms.Message;
import javax.jms.MessageConsumer;
import javax.jms.MessageProducer;
import javax.jms.Session;
import javax.jms.TextMessage;

/** The JMS part both flavours share: one session per connection, producers and consumers cached
 *  per queue. The build rewrites javax.jms to jakarta.jms for a client on the Jakarta API. */
abstract class JmsSessions implements Flavour {
    static final class Open {
        final Connection connection;
        final Session session;
        final Map<String, MessageProducer> producers = new ConcurrentHashMap<>();
        final Map<String, MessageConsumer> consumers = new ConcurrentHashMap<>();
        volatile Message last;

        Open(Connection connection, Session session) {
            this.connection = connection;
            this.session = session;
        }
    }

    final Map<String, Open> open = new ConcurrentHashMap<>();

    Open get(String name) {
        Open o = open.get(name);
        if (o == null) {
            throw new IllegalStateException("no connection named " + name);
        }
        return o;
    }

    /** Starts {@code connection}, opens its session (options: "ack": "client" or "auto") and
     *  registers it under {@code name}. */
    void register(String name, Connection connection, Map<String, Object> options) throws Exception {
        connection.start();
        boolean clientAck = "client".equals(options.get("ack"));
        Session session = connection.createSession(false, clientAck ? Session.CLIENT_ACKNOWLEDGE : Session.AUTO_ACKNOWLEDGE);
        open.put(name, new Open(connection, session));
    }

    @Override
    public Map<String, Object> send(String name, String queue, String body, Map<String, Object> options) throws Exception {
        Open o = get(name);
        MessageProducer producer = o.producers.computeIfAbsent(queue, q -> {
            try {
                return o.session.createProducer(o.session.createQueue(q));
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        boolean persistent = !Boolean.FALSE.equals(options.get("persistent"));
        producer.setDeliveryMode(persistent ? DeliveryMode.PERSISTENT : DeliveryMode.NON_PERSISTENT);
        TextMessage message = o.session.createTextMessage(body);
        producer.send(message);
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("message_id", message.getJMSMessageID());
        return result;
    }

    @Override
    public Map<String, Object> receive(String name, String queue, long timeoutMs) throws Exception {
        Open o = get(name);
        MessageConsumer consumer = o.consumers.get(queue);
        if (consumer == null) {
            consumer = o.session.createConsumer(o.session.createQueue(queue));
            o.consumers.put(queue, consumer);
        }
        Message message = timeoutMs < 0 ? consumer.receiveNoWait() : consumer.receive(Math.max(1, timeoutMs));
        Map<String, Object> result = new LinkedHashMap<>();
        if (message == null) {
            result.put("body", null);
            return result;
        }
        o.last = message;
        result.put("body", message instanceof TextMessage text ? text.getText() : null);
        result.put("message_id", message.getJMSMessageID());
        result.put("redelivered", message.getJMSRedelivered());
        return result;
    }

    /** Creates the consumer of {@code queue} without waiting for a message (a subscription). */
    public Map<String, Object> subscribe(String name, String queue) throws Exception {
        return receive(name, queue, -1);
    }

    @Override
    public Map<String, Object> ack(String name) throws Exception {
        Open o = get(name);
        if (o.last == null) {
            throw new IllegalStateException("nothing received to acknowledge on " + name);
        }
        o.last.acknowledge();
        return new LinkedHashMap<>();
    }

    @Override
    public void close(String name) throws Exception {
        Open o = open.remove(name);
        if (o != null) {
            o.connection.close();
        }
    }
}
