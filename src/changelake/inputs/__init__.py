"""Inputs: how a table's landed batches are found, read and decoded into typed change records.

``formats`` holds the input formats, one module each (its decoding and its rendering for datagen) behind
one registry; ``sources`` a table's ``source:`` settings; ``records`` the decoded batch's shape and the
table's value rules; ``readers`` turns files into records on one machine; ``decode`` does the same in Spark
tasks; ``landing`` knows which files are batches; ``datagen`` simulates sources and writes the demo's batches.
"""
