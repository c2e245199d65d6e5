"""AMQP 1.0 front-end: python-qpid-proton's protocol engine driven sans-IO (`session`), the SASL
layer in front of it (`sasl`), and the message mapping to and from the engine (`convert`)."""
