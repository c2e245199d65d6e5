"""What is left of the Spark SQL checkers: topic fan-out and slow consumer, which the analysis
(reports/pipeline/fused/engine.py) still runs as SQL jobs for runs with topic subscriptions.
Every other checker is one function in reports/checkers (issue 17)."""
