#!/bin/bash
# Healthy when the broker accepts TCP connections on any transport port it binds in the container
# (ACTIVEMQ_HEALTH_PORTS, default: STOMP 61613, OpenWire 61616, MQTT 1883).
for port in ${ACTIVEMQ_HEALTH_PORTS:-61613 61616 1883}; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        exit 0
    fi
done
echo "no transport port of ${ACTIVEMQ_HEALTH_PORTS:-61613 61616 1883} accepts connections" >&2
exit 1
