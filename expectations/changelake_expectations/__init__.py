"""changelake's Great Expectations suites (see :mod:`changelake_expectations.suites`)."""
