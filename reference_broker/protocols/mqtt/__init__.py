"""MQTT 3.1.1 and 5.0: a sans-IO packet codec (`codec`)."""
