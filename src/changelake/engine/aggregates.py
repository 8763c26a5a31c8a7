"""Fluss's 14 aggregate functions (docs/semantics.md §4.2): one registry, one entry per function.

An :class:`AggregateFunction` holds all there is to a function: the column types it accepts (checked when a
spec loads, :mod:`changelake.spec`), its parameters and their defaults (listagg's delimiter), its one-record
merge ``f(stored, input)`` (used by :mod:`changelake.engine.merge`, the reference) and its columnar merge over
numpy or Arrow arrays (used by :mod:`changelake.engine.columnar`, tested equal to the reference). Adding a function is
adding one entry to :data:`AGGREGATE_FUNCTIONS`.

Arithmetic (§4.2): integer sums, products, retractions and negations are exact -- a result beyond the column's
type refuses the batch with Paimon's ``ArithmeticException`` words (:class:`ArithmeticOverflow`; Paimon 2.0's
``FieldSumAgg``/``FieldProductAgg`` use ``Math.addExact`` and kin, as Fluss's retraction pull request does), FLOAT
computes in float32, DECIMAL is exact and rounds HALF_UP to the column's scale (a result beyond the precision
is null, ``Decimal.fromBigDecimal``), max/min order floats as ``Double.compare`` and strings by UTF-8 bytes (=
code points).

numpy, pyarrow.compute and pyroaring are imported where a merge needs them: loading a spec (which reads the
type rules) stays free of them, and the CLI's read commands import no numpy at all.
"""

from __future__ import annotations

import decimal
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from changelake.aggregate_signatures import DELIMITER, NUMERIC, ORDERED, retract_refused
from changelake.errors import WriteRefusedError
from changelake.types import INT_BITS, INT_RANGES, DataType

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from changelake.spec import TableSpec

#: ``f(stored, input) -> new stored value`` of one key's column (None is null).
Fold = Callable[[Any, Any], Any]
#: ``f(stored, stored_null, input, input_null) -> (values, nulls, refused)`` over numpy arrays, one element per
#: key; ``refused`` (a boolean array, or None) marks the keys whose one-record merge refuses the values (an
#: integer overflow): the columnar merge asks the one-record merge for the reason there.
ArrayFold = Callable[
    ["np.ndarray", "np.ndarray", "np.ndarray", "np.ndarray"],
    tuple["np.ndarray", "np.ndarray", "np.ndarray | None"],
]
#: ``f(stored, input) -> values`` over Arrow arrays of the column's type, one element per key, nulls in place.
ArrowFold = Callable[["pa.Array", "pa.Array"], "pa.Array"]
#: ``f(stored_null, input_null, values) -> take the input?`` (a boolean array) for a function whose result is
#: one of its two inputs; ``values(at)`` returns the stored and the input values at positions ``at``.
Pick = Callable[
    ["np.ndarray", "np.ndarray", Callable[["np.ndarray"], tuple["np.ndarray", "np.ndarray"]]], "np.ndarray"
]
#: ``f(stored_null, input_null) -> cleared?`` (a boolean array): a retraction of a function that clears sets the
#: value to null where True and keeps the stored value elsewhere (last_value, last_value_ignore_nulls).
Clear = Callable[["np.ndarray", "np.ndarray"], "np.ndarray"]
#: Build a column's merges from its type and its parameters (declared, else the defaults).
ScalarBuilder = Callable[[DataType, Mapping[str, str]], Fold]
ArrayBuilder = Callable[[DataType, Mapping[str, str]], ArrayFold]
ArrowBuilder = Callable[[DataType, Mapping[str, str]], ArrowFold]


@dataclass(frozen=True)
class AggregateFunction:
    """One aggregate function: its type rule, its parameters and its two merges.

    The columnar merge points at the input ``pick`` chooses, or computes ``arrow`` or ``array``; where none
    applies (:meth:`vectorized` is False) it calls ``scalar`` once per merged value.
    """

    name: str
    types: tuple[str, ...] | None  # the column type names it accepts; None = every type
    scalar: ScalarBuilder  # the one-record merge
    pick: Pick | None = None  # columnar: the result is one of the inputs, no value is computed
    array: ArrayBuilder | None = None  # columnar: numpy arithmetic
    arrow: ArrowBuilder | None = None  # columnar: Arrow compute (strings, which numpy holds as objects)
    #: Whether ``pick``/``array`` are exact on DECIMAL(<=18) held as unscaled longs (a product rounds: no).
    exact_decimal64: bool = True
    parameters: Mapping[str, str] = field(default_factory=dict)  # name -> default
    #: The one-record retraction ``f(stored, retracted)`` (docs/semantics.md §4.7); None: it cannot retract.
    retract: ScalarBuilder | None = None
    retract_array: ArrayBuilder | None = None  # columnar retraction: numpy arithmetic (sum, product)
    retract_clears: Clear | None = None  # columnar retraction of a function that clears to null

    @property
    def retractable(self) -> bool:
        """Whether a ``-U``/``-D`` can take this function's contribution back (``table.agg.retract``)."""
        return self.retract is not None

    def accepts(self, column_type: DataType) -> bool:
        """Whether a column of this type may use the function (Fluss's create-time check)."""
        return self.types is None or column_type.name in self.types

    def vectorized(self, column_type: DataType) -> bool:
        """Whether the columnar merge runs ``pick``/``arrow``/``array`` for this column type: not for DECIMALs
        wider than a long's 18 digits (Python Decimals), nor where ``exact_decimal64`` is False."""
        if self.pick is None and self.array is None and self.arrow is None:
            return False
        if column_type.name != "DECIMAL":
            return True
        return self.exact_decimal64 and (column_type.precision or 0) <= 18


class ArithmeticOverflow(WriteRefusedError):
    """An integer aggregate's result beyond its column's type: the batch is refused, as Paimon's job fails on the
    ``ArithmeticException`` (docs/semantics.md §4.2)."""


def of_column(spec: TableSpec, column: str) -> tuple[AggregateFunction, dict[str, str]]:
    """A column's aggregate function and its parameters: the declared ones, else the function's defaults."""
    function = AGGREGATE_FUNCTIONS[spec.agg_function(column)]
    options = spec.options
    prefix = f"fields.{column}.{function.name}."
    return function, {p: options.get(prefix + p, default) for p, default in function.parameters.items()}


def scalar_fold(spec: TableSpec, column: str) -> Fold:
    """The one-record merge ``f(stored, input)`` of a column of an aggregation table."""
    function, parameters = of_column(spec, column)
    return _naming(column, function.name, function.scalar(spec.column(column).type, parameters))


def _naming(column: str, function: str, fold: Fold) -> Fold:
    """``fold`` whose overflow refusals name the column and its function."""

    def named(acc, value):
        try:
            return fold(acc, value)
        except ArithmeticOverflow as e:
            raise ArithmeticOverflow(f"Column '{column}' ({function}): {e}") from None

    return named


def _keep_stored(acc: Any, value: Any) -> Any:
    return acc


def scalar_retract(spec: TableSpec, column: str) -> Fold:
    """The one-record retraction ``f(stored, retracted)`` of a column of a retraction table: the function's,
    or "keep the stored value" for a column that ignores retractions (``fields.<c>.ignore-retract``)."""
    if spec.ignores_retract(column):
        return _keep_stored
    function, parameters = of_column(spec, column)
    if function.retract is None:  # a loaded spec never gets here (spec.py refuses it)
        raise WriteRefusedError(retract_refused(function.name, column))
    return _naming(column, function.name, function.retract(spec.column(column).type, parameters))


# --- one record at a time -------------------------------------------------------------------------------
#: Java's names of the integer types, as Paimon's overflow messages say them.
_JAVA_NAMES = {"TINYINT": "byte", "SMALLINT": "short", "INT": "int", "BIGINT": "long"}


def _overflow(t: DataType, a: int, symbol: str, b: int, result: int) -> ArithmeticOverflow:
    """Paimon's message for an integer result beyond its type (``addExactInt``, ``multiplyExactByte``, ...): the
    narrow types (computed in an int) show the result too."""
    name = _JAVA_NAMES[t.name]
    shown = f" = {result}" if t.name in ("TINYINT", "SMALLINT") else ""
    return ArithmeticOverflow(f"{name} overflow: {a} {symbol} {b}{shown}")


def _negation_overflow(t: DataType, a: int) -> ArithmeticOverflow:
    """Paimon's ``negateExact*`` message."""
    name = _JAVA_NAMES[t.name]
    shown = f" = {-a}" if t.name in ("TINYINT", "SMALLINT") else ""
    return ArithmeticOverflow(f"{name} overflow: -{a}{shown}")


def _exact(t: DataType, op: Callable[[int, int], int], symbol: str) -> Callable[[int, int], int]:
    """An integer operation of the column's type that refuses a result beyond it (never wraps)."""
    lo, hi = INT_RANGES[t.name]

    def compute(a: int, b: int) -> int:
        result = op(a, b)
        if not lo <= result <= hi:
            raise _overflow(t, a, symbol, b, result)
        return result

    return compute


def _arith(t: DataType, op: Callable[[Any, Any], Any], symbol: str = "?") -> Fold:
    """The arithmetic of a column type: integers exact (:func:`_exact`), FLOAT is float32, DECIMAL exact then
    HALF_UP to the column's scale, null beyond its precision."""
    if t.name in INT_BITS:
        return _exact(t, op, symbol)
    if t.name == "FLOAT":
        import numpy as np

        return lambda a, b: float(op(np.float32(a), np.float32(b)))
    if t.name == "DOUBLE":
        return op
    # DECIMAL: exact, rounded HALF_UP to the column scale; a result beyond the precision becomes null.
    precision, scale = t.precision or 0, t.scale or 0  # a DECIMAL type always has both
    quantum = decimal.Decimal(1).scaleb(-scale)
    context = decimal.Context(prec=80)

    def dec(a, b):
        with decimal.localcontext(context):  # exact: the default 28 digits would round DECIMAL(38)
            exact = op(a, b)
        result = context.create_decimal(exact).quantize(
            quantum, rounding=decimal.ROUND_HALF_UP, context=context
        )
        return None if len(result.as_tuple().digits) > precision and result != 0 else result

    return dec


def _ignore_nulls(fn: Fold) -> Fold:
    """A null input leaves the stored value; a null stored value takes the input."""

    def agg(acc, value):
        if value is None:
            return acc
        if acc is None:
            return value
        return fn(acc, value)

    return agg


def _sort_key(type_name: str) -> Callable[[Any], Any]:
    """Fluss's comparison order: strings by UTF-8 bytes, floats like Java's Double.compare."""
    if type_name in ("CHAR", "STRING"):
        return lambda v: v.encode()
    if type_name in ("FLOAT", "DOUBLE"):
        return lambda v: (1, 0.0, 0.0) if math.isnan(v) else (0, v, math.copysign(1.0, v))
    return lambda v: v


def _bitmap_union(bits: int) -> Fold:
    from pyroaring import BitMap, BitMap64

    cls: Any = BitMap if bits == 32 else BitMap64

    def union(a: bytes, b: bytes) -> bytes:
        try:
            merged = cls.deserialize(bytes(a)) | cls.deserialize(bytes(b))
        except Exception:
            raise WriteRefusedError("Unable to se/deserialize roaring bitmap.") from None
        merged.run_optimize()
        return merged.serialize()

    return union


def _bitmap_scalar(bits: int) -> ScalarBuilder:
    return lambda t, parameters: _ignore_nulls(_bitmap_union(bits))


def _fixed(fn: Fold) -> ScalarBuilder:
    """The builder of a fold that depends on neither the column type nor parameters."""
    return lambda t, parameters: fn


def _arith_scalar(op: Callable[[Any, Any], Any], symbol: str) -> ScalarBuilder:
    return lambda t, parameters: _ignore_nulls(_arith(t, op, symbol))


def _extreme_scalar(better: Callable[[Any, Any], bool]) -> ScalarBuilder:
    """max (``better`` = greater) or min (less): the input replaces the stored value if it is better."""

    def build(t: DataType, parameters: Mapping[str, str]) -> Fold:
        key = _sort_key(t.name)
        return _ignore_nulls(lambda a, b: b if better(key(b), key(a)) else a)

    return build


def _listagg(t: DataType, parameters: Mapping[str, str]) -> Fold:
    delimiter = parameters["delimiter"]
    return _ignore_nulls(lambda a, b: a + delimiter + b)


# --- retractions, one record at a time (docs/semantics.md §4.7) -------------------------------------------
def _sum_retract(t: DataType, parameters: Mapping[str, str]) -> Fold:
    """sum takes a value back by subtracting it, with the add path's arithmetic (integers exact, FLOAT is
    float32, a DECIMAL beyond the precision is null). Into a null sum it stores the negated value (Paimon's
    ``FieldSumAgg.retract``/``negative``), so a retraction that arrives before its addition still cancels it;
    the negation is exact too (``negateExact``: the type's minimum has no negation)."""
    subtract = _arith(t, operator.sub, "-")
    if t.name in INT_BITS:
        lo = INT_RANGES[t.name][0]

        def negate(value):
            if value == lo:
                raise _negation_overflow(t, value)
            return -value
    else:
        negate_fold = _arith(t, lambda a, b: -b)

        def negate(value):
            return negate_fold(value, value)

    def retract(acc, value):
        if value is None:
            return acc
        if acc is None:
            return negate(value)
        return subtract(acc, value)

    return retract


def _java_divide(t: DataType) -> Callable[[Any, Any], Any]:
    """Java's division of a column type: integers truncate toward zero and are exact (MIN / -1 is refused, as
    Paimon's ``divideExact*``), FLOAT is float32, DECIMAL exact then HALF_UP to the scale (null beyond the
    precision). Never called with 0."""
    if t.name in INT_BITS:

        def truncating(a, b):
            quotient = abs(a) // abs(b)
            return quotient if (a < 0) == (b < 0) else -quotient

        return _exact(t, truncating, "/")
    if t.name == "DOUBLE":
        import numpy as np

        return lambda a, b: float(np.float64(a) / np.float64(b))  # inf on overflow, as Java's (not an error)
    return _arith(t, operator.truediv)


def _product_retract(t: DataType, parameters: Mapping[str, str]) -> Fold:
    """product takes a factor back by dividing by it. Taking back 0, or taking back from a null product, gives
    null: the product of the other factors cannot be recovered from 0, and 1/x is no value of an integer
    column; the next factor then starts the product again (nulls are ignored)."""
    divide = _java_divide(t)

    def retract(acc, value):
        if value is None:
            return acc
        if acc is None or value == 0:
            return None
        return divide(acc, value)

    return retract


_LAST_VALUE_RETRACT = _fixed(lambda acc, value: None)  # clears, whatever the retracted value
_LAST_NON_NULL_RETRACT = _fixed(lambda acc, value: acc if value is None else None)


# --- over arrays (the columnar merge) -------------------------------------------------------------------
def _order_key(v: np.ndarray) -> np.ndarray:
    """Values in the order :func:`_sort_key` gives (floats as Java's Double.compare; strings, held as Python
    strings, compare by code point)."""
    import numpy as np

    if v.dtype.kind != "f":
        return v
    width = np.int64 if v.dtype == np.float64 else np.int32
    canonical = np.where(np.isnan(v), np.array(np.nan, v.dtype), v)
    bits = canonical.view(width)
    mask = np.right_shift(bits, bits.dtype.itemsize * 8 - 1) & np.iinfo(width).max
    return bits ^ mask


#: ``f(stored, input) -> (values, overflowed)``: an arithmetic step over arrays; ``overflowed`` is None when
#: the type cannot overflow (floats, DECIMAL(<=18) as unscaled longs: their own rules apply).
ArrayStep = Callable[["np.ndarray", "np.ndarray"], tuple["np.ndarray", "np.ndarray | None"]]


def _array_ignoring_nulls(combine: ArrayStep) -> ArrayFold:
    """:func:`_ignore_nulls` over arrays; ``combine(stored, input)`` need only be right where neither is null."""
    import numpy as np

    def fold(a, a_null, b, b_null):
        combined, overflowed = combine(a, b)
        both = ~a_null & ~b_null
        refused = None if overflowed is None else overflowed & both
        return np.where(a_null, b, np.where(b_null, a, combined)), a_null & b_null, refused

    return fold


def _array_arith(t: DataType, operation: str) -> ArrayStep:
    """:func:`_arith` over the arrays the columnar merge holds (``add``, ``subtract``, ``multiply``, ``negate``
    the input): integers as int64 with a mask of the results beyond the column's type (the one-record merge
    refuses those), FLOAT in float32, DOUBLE, and DECIMAL(<=18) as unscaled longs."""
    import numpy as np

    bits = INT_BITS.get(t.name)
    lo, hi = INT_RANGES.get(t.name, (0, 0))

    def compute(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if bits is None:
                if t.name == "FLOAT":
                    a, b = a.astype(np.float32), b.astype(np.float32)
                op = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply}.get(operation)
                return (np.negative(b) if op is None else op(a, b)), None
            if operation == "negate":
                return np.negative(b), b == lo
            x = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply}[operation](a, b)
            if bits < 64:  # int64 holds the exact result of two narrower integers
                return x, (x < lo) | (x > hi)
            if operation == "add":
                return x, ((a ^ x) & (b ^ x)) < 0
            if operation == "subtract":
                return x, ((a ^ b) & (a ^ x)) < 0
            divisor = np.where(a == 0, 1, a)  # an exact product divides back; a wrapped one does not
            return x, (a != 0) & ((x // divisor != b) | ((a == -1) & (b == lo)))

    return compute


def _sum_array(t: DataType, parameters: Mapping[str, str]) -> ArrayFold:
    import numpy as np

    fold = _array_ignoring_nulls(_array_arith(t, "add"))
    if t.name != "DECIMAL":
        return fold
    largest = 10 ** (t.precision or 0) - 1  # a DECIMAL type always has its precision

    def decimal_fold(a, a_null, b, b_null):
        # Two longs of at most 18 digits cannot overflow; a sum beyond the precision is null (the scalar rule).
        value, null, _ = fold(a, a_null, b, b_null)
        return value, null | (~a_null & ~b_null & (np.abs(value) > largest)), None

    return decimal_fold


def _product_array(t: DataType, parameters: Mapping[str, str]) -> ArrayFold:
    return _array_ignoring_nulls(_array_arith(t, "multiply"))


def _sum_retract_array(t: DataType, parameters: Mapping[str, str]) -> ArrayFold:
    """:func:`_sum_retract` over arrays."""
    import numpy as np

    subtract = _array_arith(t, "subtract")
    negate = _array_arith(t, "negate")
    largest = 10 ** (t.precision or 0) - 1 if t.name == "DECIMAL" else None

    def fold(a, a_null, b, b_null):
        negated, negation_overflow = negate(a, b)
        difference, difference_overflow = subtract(a, b)
        value = np.where(b_null, a, np.where(a_null, negated, difference))
        null = a_null & b_null
        refused = None
        if negation_overflow is not None and difference_overflow is not None:
            refused = ~b_null & np.where(a_null, negation_overflow, difference_overflow)
        if largest is not None:  # two longs of at most 18 digits cannot overflow a long
            null = null | (~a_null & ~b_null & (np.abs(value) > largest))
        return value, null, refused

    return fold


def _product_retract_array(t: DataType, parameters: Mapping[str, str]) -> ArrayFold:
    """:func:`_product_retract` over arrays (not DECIMAL: products of DECIMALs are computed one by one)."""
    import numpy as np

    bits = INT_BITS.get(t.name)
    lo = INT_RANGES[t.name][0] if bits is not None else 0

    def divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            if bits is None:
                return a.astype(np.float32) / b.astype(np.float32) if t.name == "FLOAT" else a / b
            # Java's truncating division; x / -1 is the negation (numpy's MIN // -1 is undefined).
            minus_one = b == -1
            divisor = np.where(minus_one, 1, b)
            quotient = a // divisor
            inexact = (a - quotient * divisor != 0) & ((a < 0) != (divisor < 0))
            return np.where(minus_one, np.negative(a), quotient + inexact)

    def fold(a, a_null, b, b_null):
        cleared = ~b_null & (a_null | (b == 0))
        safe = np.where(cleared | b_null, 1, b).astype(b.dtype)
        value = np.where(b_null | cleared, a, divide(a, safe))
        # The type's minimum divided by -1 has no value of the type (Paimon's divideExact* refuses it).
        refused = None if bits is None else ~b_null & ~cleared & (a == lo) & (b == -1)
        return value, np.where(b_null, a_null, cleared), refused

    return fold


def _listagg_arrow(t: DataType, parameters: Mapping[str, str]) -> ArrowFold:
    """:func:`_listagg` over Arrow string arrays: UTF-8 bytes joined in Arrow, no Python string per value."""
    import pyarrow.compute as pc

    delimiter = parameters["delimiter"]

    def fold(a: pa.Array, b: pa.Array) -> pa.Array:
        # Null where either is null, then the non-null one of the pair (the _ignore_nulls rule). Not
        # null_handling="skip": pyarrow 26 drops the rows where both are null from its result.
        joined = pc.binary_join_element_wise(a, b, delimiter, null_handling="emit_null")
        return pc.coalesce(joined, a, b)

    return fold


def _bool_array(combine: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> ArrayBuilder:
    return lambda t, parameters: _array_ignoring_nulls(lambda a, b: (combine(a, b), None))


def _extreme_pick(better: Callable[[Any, Any], Any]) -> Pick:
    """max/min over arrays: the input where the stored value is null or the input is better."""

    def pick(a_null, b_null, values):
        import numpy as np

        take_input = a_null.copy()
        both = np.flatnonzero(~a_null & ~b_null)
        if len(both):
            a, b = values(both)
            take_input[both] = better(_order_key(b), _order_key(a))
        return take_input

    return pick


# --- the registry ---------------------------------------------------------------------------------------
# The column types and parameters are the signatures' (changelake.aggregate_signatures), as are the names.
_NUMERIC, _ORDERED, _DELIMITER = NUMERIC, ORDERED, DELIMITER


_LAST_VALUE = _fixed(lambda acc, value: value)  # a null input overwrites
_LAST_NON_NULL = _fixed(lambda acc, value: acc if value is None else value)
# Both first_value functions are identical in Fluss's code (docs/semantics.md §12 #1): a stored null is
# replaced by the next non-null input.
_FIRST_VALUE = _fixed(lambda acc, value: value if acc is None else acc)
_BOOL_AND = _fixed(_ignore_nulls(lambda a, b: a and b))
_BOOL_OR = _fixed(_ignore_nulls(lambda a, b: a or b))


def _always_clears(a_null: np.ndarray, b_null: np.ndarray) -> np.ndarray:
    return b_null | True


def _clears_unless_null(a_null: np.ndarray, b_null: np.ndarray) -> np.ndarray:
    return ~b_null


def never_clears(a_null: np.ndarray, b_null: np.ndarray) -> np.ndarray:
    """The columnar retraction of a column that ignores retractions: the stored value stays."""
    return b_null & False


def _always_input(a_null: np.ndarray, b_null: np.ndarray, values: Any) -> np.ndarray:
    return b_null | True


def _input_unless_null(a_null: np.ndarray, b_null: np.ndarray, values: Any) -> np.ndarray:
    return ~b_null


def _input_where_stored_null(a_null: np.ndarray, b_null: np.ndarray, values: Any) -> np.ndarray:
    return a_null


def _registry(*functions: AggregateFunction) -> dict[str, AggregateFunction]:
    return {f.name: f for f in functions}


#: Fluss's aggregate functions by name (docs/semantics.md §4.2). listagg/string_agg follow Fluss's code,
#: which refuses CHAR when the merger is built (§12 #2).
AGGREGATE_FUNCTIONS: dict[str, AggregateFunction] = _registry(
    AggregateFunction(
        "sum",
        _NUMERIC,
        scalar=_arith_scalar(operator.add, "+"),
        array=_sum_array,
        retract=_sum_retract,
        retract_array=_sum_retract_array,
    ),
    AggregateFunction(
        "product",
        _NUMERIC,
        scalar=_arith_scalar(operator.mul, "*"),
        array=_product_array,
        exact_decimal64=False,
        retract=_product_retract,
        retract_array=_product_retract_array,
    ),
    AggregateFunction("max", _ORDERED, scalar=_extreme_scalar(operator.gt), pick=_extreme_pick(operator.gt)),
    AggregateFunction("min", _ORDERED, scalar=_extreme_scalar(operator.lt), pick=_extreme_pick(operator.lt)),
    AggregateFunction(
        "last_value",
        None,
        scalar=_LAST_VALUE,
        pick=_always_input,
        retract=_LAST_VALUE_RETRACT,
        retract_clears=_always_clears,
    ),
    AggregateFunction(
        "last_value_ignore_nulls",
        None,
        scalar=_LAST_NON_NULL,
        pick=_input_unless_null,
        retract=_LAST_NON_NULL_RETRACT,
        retract_clears=_clears_unless_null,
    ),
    AggregateFunction("first_value", None, scalar=_FIRST_VALUE, pick=_input_where_stored_null),
    AggregateFunction("first_value_ignore_nulls", None, scalar=_FIRST_VALUE, pick=_input_where_stored_null),
    AggregateFunction("listagg", ("STRING",), scalar=_listagg, arrow=_listagg_arrow, parameters=_DELIMITER),
    AggregateFunction(
        "string_agg", ("STRING",), scalar=_listagg, arrow=_listagg_arrow, parameters=_DELIMITER
    ),
    AggregateFunction("bool_and", ("BOOLEAN",), scalar=_BOOL_AND, array=_bool_array(operator.and_)),
    AggregateFunction("bool_or", ("BOOLEAN",), scalar=_BOOL_OR, array=_bool_array(operator.or_)),
    AggregateFunction("rbm32", ("BYTES",), scalar=_bitmap_scalar(32)),
    AggregateFunction("rbm64", ("BYTES",), scalar=_bitmap_scalar(64)),
)
