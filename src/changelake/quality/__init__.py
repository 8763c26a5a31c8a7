"""Data quality: Great Expectations suites on the PK tables and the dbt marts, and their Data Docs.

``suites`` builds the checks; ``runner`` validates them through a GX checkpoint and publishes the reports.
"""
