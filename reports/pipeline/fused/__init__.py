"""Reading histories inside Spark tasks, and the Spark job around the checkers (issue 6; since
issue 17 the only engine):

* `load.py`   a history file into flat Arrow rows (one per message): the C scanner (`_scan.c`)
              for plain client lines with every other line taken by the reference rules, or
              pyarrow's typed read where the scanner is not built; lean Parquet written and read;
* `engine.py` the Spark job: a task per history computes every checker's facts with
              reports/checkers (registry.facts_of; topic_fanout.facts for topic runs), and the
              driver judges them with the same modules;
* `split_job.py` a history too big for one task: read in pieces, its rows shuffled to parts by
              each checker's own key (reports/checkers/split.py), the parts' facts combined.
"""
