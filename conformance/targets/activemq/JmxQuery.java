// Reads MBean attributes from a JVM's JMX connector and prints them as JSON lines.
//
// Run with Java 11+'s single-file source launcher (no build step, only the JDK):
//
//   java JmxQuery.java SERVICE_URL                       serve: one request per stdin line
//   java JmxQuery.java SERVICE_URL PATTERN ATTRS         one query, then exit
//
// A request line is  ID <TAB> OBJECT_NAME_PATTERN <TAB> ATTRS  where ATTRS is a comma list of
// attribute names or "*" (every readable attribute the MBean declares). Each request gets one
// answer line:
//   {"id":"7","ok":true,"mbeans":[{"name":"...","attributes":{...},"missing":[...]}]}
//   {"id":"7","ok":false,"error":"..."}
// After connecting, serve mode prints {"ready":true,"connect_ms":N}; a connection failure prints
// {"ready":false,"error":"..."} and exits 2. Used by conformance/targets/activemq/jmx.py, which keeps one
// helper per broker so a query costs a JMX round trip, not a JVM start.
//
// Only java.base / java.management / java.management.rmi are used, so this runs on a plain JRE.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Array;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import javax.management.Attribute;
import javax.management.AttributeList;
import javax.management.MBeanAttributeInfo;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.openmbean.CompositeData;
import javax.management.openmbean.TabularData;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

public class JmxQuery {

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        if (args.length != 1 && args.length != 3) {
            System.err.println("usage: java JmxQuery.java SERVICE_URL [OBJECT_NAME_PATTERN ATTR1,ATTR2|*]");
            System.exit(64);
        }
        long started = System.nanoTime();
        JMXConnector connector;
        try {
            connector = JMXConnectorFactory.connect(new JMXServiceURL(args[0]));
        } catch (Exception e) {
            out.println("{\"ready\":false,\"error\":" + str("cannot connect to " + args[0] + ": " + describe(e)) + "}");
            System.exit(2);
            return;
        }
        MBeanServerConnection server = connector.getMBeanServerConnection();
        if (args.length == 3) {
            out.println(answer("1", server, args[1], args[2]));
            connector.close();
            return;
        }
        out.println("{\"ready\":true,\"connect_ms\":" + (System.nanoTime() - started) / 1_000_000 + "}");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {  // EOF on stdin: the owner is done with us
            if (line.isBlank()) {
                continue;
            }
            String[] parts = line.split("\t", -1);
            if (parts.length != 3) {
                out.println("{\"id\":null,\"ok\":false,\"error\":" + str("malformed request (want ID<TAB>PATTERN<TAB>ATTRS): " + line) + "}");
                continue;
            }
            out.println(answer(parts[0], server, parts[1], parts[2]));
        }
        try {
            connector.close();
        } catch (Exception ignored) {
            // the broker may already be gone; nothing to release on our side
        }
    }

    static String answer(String id, MBeanServerConnection server, String pattern, String attrs) {
        try {
            StringBuilder sb = new StringBuilder("{\"id\":").append(str(id)).append(",\"ok\":true,\"mbeans\":[");
            // sorted, so answers are stable between calls
            Set<ObjectName> names = new TreeSet<>(server.queryNames(new ObjectName(pattern), null));
            boolean first = true;
            for (ObjectName name : names) {
                String[] wanted = wantedAttributes(server, name, attrs);
                AttributeList got = server.getAttributes(name, wanted);
                Set<String> seen = new TreeSet<>();
                if (!first) {
                    sb.append(',');
                }
                first = false;
                sb.append("{\"name\":").append(str(name.getCanonicalName())).append(",\"attributes\":{");
                boolean firstAttr = true;
                for (Attribute a : got.asList()) {
                    seen.add(a.getName());
                    if (!firstAttr) {
                        sb.append(',');
                    }
                    firstAttr = false;
                    sb.append(str(a.getName())).append(':').append(json(a.getValue()));
                }
                sb.append("},\"missing\":[");
                boolean firstMissing = true;
                for (String w : wanted) {
                    if (!seen.contains(w)) {
                        if (!firstMissing) {
                            sb.append(',');
                        }
                        firstMissing = false;
                        sb.append(str(w));
                    }
                }
                sb.append("]}");
            }
            return sb.append("]}").toString();
        } catch (Exception e) {
            return "{\"id\":" + str(id) + ",\"ok\":false,\"error\":" + str(describe(e)) + "}";
        }
    }

    static String[] wantedAttributes(MBeanServerConnection server, ObjectName name, String attrs) throws Exception {
        if (!attrs.trim().equals("*")) {
            List<String> list = new ArrayList<>();
            for (String a : attrs.split(",")) {
                if (!a.isBlank()) {
                    list.add(a.trim());
                }
            }
            return list.toArray(new String[0]);
        }
        List<String> all = new ArrayList<>();
        for (MBeanAttributeInfo info : server.getMBeanInfo(name).getAttributes()) {
            if (info.isReadable()) {
                all.add(info.getName());
            }
        }
        return all.toArray(new String[0]);
    }

    static String describe(Throwable e) {
        StringBuilder sb = new StringBuilder(e.getClass().getSimpleName() + ": " + e.getMessage());
        Throwable cause = e.getCause();
        for (int depth = 0; cause != null && depth < 3; depth++, cause = cause.getCause()) {
            sb.append(" <- ").append(cause.getClass().getSimpleName()).append(": ").append(cause.getMessage());
        }
        return sb.toString();
    }

    static String json(Object v) {
        if (v == null) {
            return "null";
        }
        if (v instanceof Boolean) {
            return v.toString();
        }
        if (v instanceof Double || v instanceof Float) {
            double d = ((Number) v).doubleValue();
            return Double.isFinite(d) ? Double.toString(d) : "null";
        }
        if (v instanceof Number) {
            return v.toString();
        }
        if (v instanceof CompositeData) {
            CompositeData cd = (CompositeData) v;
            StringBuilder sb = new StringBuilder("{");
            boolean first = true;
            for (String key : new TreeSet<>(cd.getCompositeType().keySet())) {
                if (!first) {
                    sb.append(',');
                }
                first = false;
                sb.append(str(key)).append(':').append(json(cd.get(key)));
            }
            return sb.append('}').toString();
        }
        if (v instanceof TabularData) {
            return json(((TabularData) v).values());
        }
        if (v instanceof Map) {
            StringBuilder sb = new StringBuilder("{");
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!first) {
                    sb.append(',');
                }
                first = false;
                sb.append(str(String.valueOf(e.getKey()))).append(':').append(json(e.getValue()));
            }
            return sb.append('}').toString();
        }
        if (v instanceof Collection) {
            return json(((Collection<?>) v).toArray());
        }
        if (v.getClass().isArray()) {
            StringBuilder sb = new StringBuilder("[");
            for (int i = 0; i < Array.getLength(v); i++) {
                if (i > 0) {
                    sb.append(',');
                }
                sb.append(json(Array.get(v, i)));
            }
            return sb.append(']').toString();
        }
        return str(v.toString());  // ObjectName, String, enums, anything else: its text
    }

    static String str(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
            }
        }
        return sb.append('"').toString();
    }
}
