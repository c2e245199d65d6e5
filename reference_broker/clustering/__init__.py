"""Artemis-style clusters of reference brokers (artemis-clusters.md)."""
