#!/bin/sh
# Run ActiveMQ Classic as a plain JVM with the same flags as conformance/targets/activemq/process.py
# (ActiveMQProcess.build_command, which mirrors Debian's /usr/bin/activemq wrapper) and log to
# stdout, so `docker logs` is the broker log.
#
# Environment:
#   ACTIVEMQ_XML          broker configuration (mount it; default /etc/brokerconf/activemq.xml).
#                         When it does not exist, a default one is written: OpenWire 61616,
#                         STOMP 61613, MQTT 1883 on all interfaces, broker name ACTIVEMQ_BROKER_NAME,
#                         persistent per ACTIVEMQ_PERSISTENT (true/false).
#   ACTIVEMQ_BASE         instance directory (conf/, data/, tmp/); default /var/lib/brokerconf
#   ACTIVEMQ_HEAP_MB      -Xmx in MiB (default 1024)
#   ACTIVEMQ_LOG_LEVEL    log4j root level (default INFO)
#   ACTIVEMQ_JAVA_OPTS    extra JVM arguments (split on whitespace), before -jar
# Readiness: ActiveMQ's own line "Apache ActiveMQ <version> (<name>, <id>) started".
set -eu

HOME_DIR=/usr/share/activemq
JAVA_SHARE=/usr/share/java
BASE="${ACTIVEMQ_BASE:-/var/lib/brokerconf}"
XML="${ACTIVEMQ_XML:-/etc/brokerconf/activemq.xml}"
HEAP="${ACTIVEMQ_HEAP_MB:-1024}"
LEVEL="${ACTIVEMQ_LOG_LEVEL:-INFO}"
NAME="${ACTIVEMQ_BROKER_NAME:-brokerconf}"
PERSISTENT="${ACTIVEMQ_PERSISTENT:-false}"

say() { echo "brokerconf-activemq: $*"; }

case "$HEAP" in ''|*[!0-9]*) say "error: ACTIVEMQ_HEAP_MB must be a number of MiB, not '$HEAP'"; exit 2;; esac
case "$PERSISTENT" in true|false) ;; *) say "error: ACTIVEMQ_PERSISTENT must be true or false, not '$PERSISTENT'"; exit 2;; esac
case "$NAME" in ''|*[!A-Za-z0-9_.-]*) say "error: ACTIVEMQ_BROKER_NAME must match [A-Za-z0-9_.-]+, not '$NAME'"; exit 2;; esac

mkdir -p "$BASE/conf" "$BASE/data" "$BASE/tmp"

if [ ! -f "$XML" ]; then
    if [ -e "$XML" ]; then
        say "error: ACTIVEMQ_XML=$XML is not a file (mount the generated activemq.xml as a file)"
        exit 2
    fi
    XML="$BASE/conf/activemq.xml"
    say "no configuration at ${ACTIVEMQ_XML:-/etc/brokerconf/activemq.xml}: writing a default one to $XML"
    cat > "$XML" <<XMLEOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- default configuration written by brokerconf-activemq (no activemq.xml was mounted) -->
<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="$NAME" persistent="$PERSISTENT"
          useJmx="false" schedulerSupport="false" useShutdownHook="true" dataDirectory="$BASE/data">
    <transportConnectors>
      <transportConnector name="openwire" uri="tcp://0.0.0.0:61616"/>
      <transportConnector name="stomp" uri="stomp://0.0.0.0:61613?transport.closeAsync=false"/>
      <transportConnector name="mqtt" uri="mqtt://0.0.0.0:1883"/>
    </transportConnectors>
  </broker>
</beans>
XMLEOF
fi

# Log to the console: Debian's build logs through log4j 1.2 (slf4j-log4j12); log4j2 for upstream builds.
cat > "$BASE/conf/log4j.properties" <<EOF2
log4j.rootLogger=$LEVEL, console
log4j.logger.org.springframework=WARN
log4j.logger.org.apache.xbean=WARN
log4j.logger.org.apache.activemq.spring=WARN
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.Target=System.out
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d | %-5p | %m | %c | %t%n
EOF2
cat > "$BASE/conf/log4j2.properties" <<EOF2
rootLogger.level=$LEVEL
rootLogger.appenderRef.console.ref=Console
appender.console.type=Console
appender.console.name=Console
appender.console.layout.type=PatternLayout
appender.console.layout.pattern=%d | %-5p | %m | %c | %t%n
EOF2

JAVA=/usr/lib/jvm/default-java/bin/java
[ -x "$JAVA" ] || JAVA="$(command -v java || true)"
[ -n "$JAVA" ] || { say "error: no Java runtime in the image (install default-jre-headless)"; exit 2; }

# conf/ first so our log4j.properties wins; then the MQTT transport's client jars (as
# ActiveMQProcess._classpath does with mqtt=True).
CLASSPATH_EXTRA="$BASE/conf:$JAVA_SHARE/mqtt-client.jar:$JAVA_SHARE/hawtdispatch.jar:$JAVA_SHARE/hawtdispatch-transport.jar"

say "starting ActiveMQ Classic: config $XML, heap ${HEAP}m, base $BASE"
# shellcheck disable=SC2086  # ACTIVEMQ_JAVA_OPTS is a whitespace-separated list on purpose
exec "$JAVA" "-Xmx${HEAP}m" -Djava.awt.headless=true \
    --add-reads=java.xml=java.logging \
    --add-opens java.base/java.security=ALL-UNNAMED \
    --add-opens java.base/java.net=ALL-UNNAMED \
    --add-opens java.base/java.lang=ALL-UNNAMED \
    --add-opens java.base/java.util=ALL-UNNAMED \
    --add-opens java.naming/javax.naming.spi=ALL-UNNAMED \
    --add-opens java.rmi/sun.rmi.transport.tcp=ALL-UNNAMED \
    --add-opens java.base/java.util.concurrent=ALL-UNNAMED \
    --add-opens java.base/java.util.concurrent.atomic=ALL-UNNAMED \
    --add-exports=java.base/sun.net.www.protocol.http=ALL-UNNAMED \
    --add-exports=java.base/sun.net.www.protocol.https=ALL-UNNAMED \
    --add-exports=java.base/sun.net.www.protocol.jar=ALL-UNNAMED \
    --add-exports=jdk.xml.dom/org.w3c.dom.html=ALL-UNNAMED \
    --add-exports=jdk.naming.rmi/com.sun.jndi.url.rmi=ALL-UNNAMED \
    "-Dactivemq.home=$HOME_DIR" \
    "-Dactivemq.base=$BASE" \
    "-Dactivemq.conf=$BASE/conf" \
    "-Dactivemq.data=$BASE/data" \
    "-Djava.io.tmpdir=$BASE/tmp" \
    "-Dactivemq.classpath=$CLASSPATH_EXTRA" \
    "-Dlog4j.configuration=file:$BASE/conf/log4j.properties" \
    "-Dlog4j2.configurationFile=$BASE/conf/log4j2.properties" \
    ${ACTIVEMQ_JAVA_OPTS:-} \
    -jar "$HOME_DIR/bin/activemq.jar" start "xbean:file:$XML"
