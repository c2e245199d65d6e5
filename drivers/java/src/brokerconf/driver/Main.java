package brokerconf.driver;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * brokerconf's Java client driver: reads one JSON command a line on stdin, answers each with one
 * JSON line on stdout carrying the command's "id", and reports the client library's transport
 * events as JSON lines with an "event" key (conformance/clients/java_driver.py is the other end).
 *
 * Commands run on their own threads, so a send blocked by a failover transport waiting for a
 * broker does not stop the harness from asking for the address or closing. Times are given as
 * "mono" (System.nanoTime in seconds: CLOCK_MONOTONIC on Linux, the clock of Python's
 * time.monotonic, so the harness can line events up with its own measurements) and "wall_ms".
 */
public final class Main {
    private static final Object OUT = new Object();

    private Main() {
    }

    static void emit(Map<String, Object> message) {
        String line = Json.write(message);
        synchronized (OUT) {
            System.out.println(line);
            System.out.flush();
        }
    }

    static Map<String, Object> stamped(Map<String, Object> message) {
        message.put("mono", System.nanoTime() / 1e9);
        message.put("wall_ms", System.currentTimeMillis());
        return message;
    }

    /** Reports a transport event of connection {@code conn}; {@code detail} may be null. */
    static void event(String kind, String conn, Map<String, Object> detail) {
        Map<String, Object> message = new LinkedHashMap<>();
        message.put("event", kind);
        message.put("conn", conn);
        if (detail != null) {
            message.putAll(detail);
        }
        emit(stamped(message));
    }

    static Map<String, Object> error(Throwable e) {
        Map<String, Object> detail = new LinkedHashMap<>();
        detail.put("error", String.valueOf(e.getMessage()));
        detail.put("class", e.getClass().getName());
        Throwable cause = e.getCause();
        if (cause != null && cause != e) {
            detail.put("cause", cause.getClass().getName() + ": " + cause.getMessage());
        }
        StringWriter trace = new StringWriter();
        e.printStackTrace(new PrintWriter(trace));
        System.err.println(trace);
        return detail;
    }

    private static Flavour flavour(String name) throws Exception {
        // by name: each build compiles only its own flavour's class, against its own library
        String cls = switch (name) {
            case "activemq" -> "brokerconf.driver.ActiveMqFlavour";
            case "artemis" -> "brokerconf.driver.ArtemisFlavour";
            default -> throw new IllegalArgumentException("unknown flavour " + name);
        };
        return (Flavour) Class.forName(cls).getDeclaredConstructor().newInstance();
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> handle(Flavour client, Map<String, Object> request) throws Exception {
        String op = String.valueOf(request.get("op"));
        String conn = String.valueOf(request.getOrDefault("conn", "default"));
        Map<String, Object> options = (Map<String, Object>) request.getOrDefault("options", new LinkedHashMap<>());
        return switch (op) {
            case "connect" -> client.connect(conn, (String) request.get("uri"), options);
            case "factory" -> client.factory((String) request.get("factory"), (String) request.get("uri"));
            case "send" -> client.send(conn, (String) request.get("queue"), (String) request.get("body"), options);
            case "receive" -> client.receive(conn, (String) request.get("queue"),
                    ((Number) request.getOrDefault("timeout_ms", 5000L)).longValue());
            case "ack" -> client.ack(conn);
            case "address" -> client.address(conn);
            case "transport_uris" -> client.transportUris(conn);
            case "close" -> {
                client.close(conn);
                yield new LinkedHashMap<>();
            }
            case "ping" -> new LinkedHashMap<>();
            default -> throw new IllegalArgumentException("unknown op " + op);
        };
    }

    public static void main(String[] args) throws Exception {
        Flavour client = flavour(args.length > 0 ? args[0] : "activemq");
        ExecutorService workers = Executors.newCachedThreadPool(r -> {
            Thread t = new Thread(r, "driver-command");
            t.setDaemon(true);
            return t;
        });
        Map<String, Object> ready = new LinkedHashMap<>();
        ready.put("event", "ready");
        ready.put("flavour", args.length > 0 ? args[0] : "activemq");
        emit(stamped(ready));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            Map<String, Object> request;
            try {
                request = (Map<String, Object>) Json.parse(line);
            } catch (RuntimeException e) {
                Map<String, Object> bad = error(e);
                bad.put("event", "bad-request");
                emit(bad);
                continue;
            }
            workers.submit(() -> {
                Map<String, Object> reply = new LinkedHashMap<>();
                reply.put("id", request.get("id"));
                try {
                    Map<String, Object> result = handle(client, request);
                    reply.put("ok", true);
                    reply.putAll(result);
                } catch (Throwable e) {
                    reply.put("ok", false);
                    reply.putAll(error(e));
                }
                emit(stamped(reply));
            });
        }
        // stdin closed: the harness is gone or done; end without waiting for blocked commands
        System.exit(0);
    }
}
