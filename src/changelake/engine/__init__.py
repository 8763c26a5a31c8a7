"""The apply engine: plan a batch, merge each touched bucket, write its files, commit exactly once.

``apply`` drives one batch (decode -> plan -> merge -> write -> commit); ``buckets`` is the task run per
(partition, bucket); ``columnar`` is the columnar merge it calls; ``merge`` is the one-record-at-a-time
reference the columnar merge is tested against.
"""
