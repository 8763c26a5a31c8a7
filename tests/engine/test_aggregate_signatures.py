"""The spec's view of the aggregate functions (changelake.aggregate_signatures) and the engine's merges
(changelake.engine.aggregates) name the same functions with the same column types, parameters and
retractability, so a function the spec accepts is one the engine can merge, and the other way round."""

from __future__ import annotations

import pytest

from changelake.aggregate_signatures import AGGREGATE_SIGNATURES, retract_refused
from changelake.engine.aggregates import AGGREGATE_FUNCTIONS

pytestmark = pytest.mark.unit


def test_every_signature_has_its_merge_and_the_same_rules():
    assert list(AGGREGATE_SIGNATURES) == list(AGGREGATE_FUNCTIONS)
    for name, signature in AGGREGATE_SIGNATURES.items():
        function = AGGREGATE_FUNCTIONS[name]
        assert (signature.types, dict(signature.parameters), signature.retractable) == (
            function.types,
            dict(function.parameters),
            function.retractable,
        ), name


def test_the_refusal_names_the_functions_that_retract():
    message = retract_refused("max", "v")
    assert "'max' of column 'v' does not support retract" in message
    assert message.endswith("[last_value, last_value_ignore_nulls, product, sum].")
