"""Inputs: how a table's landed batches are found, read and decoded into typed change records.

``sources`` holds a table's ``source:`` settings; ``formats`` the JSON-lines envelopes (changelog, upsert-kafka,
Debezium, Canal, Maxwell); ``readers`` turns files into records on one machine; ``decode`` does the same in
Spark tasks; ``landing`` knows which files are batches; ``datagen`` writes the demo's batches.
"""
