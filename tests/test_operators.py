"""What every operator must do, driven by the operator table (pyvkgrad/operators.py): one name,
an oracle with the function's signature, the oracle's results within the operator's tolerance
at every rank, data type and layout, inputs untouched, a cached repeat, its descriptor's
compiled form, cuts beyond the buffer limit, and errors before any device work. A new operator
joins all of these by adding its record."""

import dataclasses
import inspect

import numpy as np
import pytest

from pyvkgrad.one_call_cache import OneCallCache

import pyvkgrad
from pyvkgrad import operators
from pyvkgrad.operators import OPERATORS
from pyvkgrad.tensor import TensorDesc, packed_strides
from cases import SHAPES_BY_RANK, VIEWS, view_of

RECORDS = pytest.mark.parametrize("record", OPERATORS, ids=lambda r: r.name)
# Each record with each of its data types (record.dtypes).
RECORDS_AND_DTYPES = pytest.mark.parametrize(
    "record, dtype", [(r, d) for r in OPERATORS for d in r.dtypes],
    ids=lambda v: v.name if isinstance(v, operators.Operator) else np.dtype(v).name)


def arrays_of(case):
    """The positions of the case's array arguments."""
    return [i for i, a in enumerate(case.args) if isinstance(a, np.ndarray)]


def with_args(case, args):
    return operators.Case(tuple(args), case.kwargs, case.options, case.label)


# ---- the table itself ----------------------------------------------------------------------------

@RECORDS
def test_one_name_per_operator(record):
    """DirectML's name in snake_case names the module, the function, the oracle and the
    descriptor's OPERATOR; the function and descriptor are exported at top level."""
    assert record.name == record.OPERATOR.lower()
    assert record.function.__name__ == record.oracle.__name__ == record.name
    assert record.function.__module__ == f"pyvkgrad.ops.{record.name}"
    assert getattr(pyvkgrad, record.name) is record.function
    assert getattr(pyvkgrad, record.descriptor.__name__) is record.descriptor
    assert record.descriptor.__name__ in pyvkgrad.__all__ and record.name in pyvkgrad.__all__


def test_the_table_lists_every_exported_operator():
    descriptors = {getattr(pyvkgrad, n) for n in pyvkgrad.__all__
                   if n.endswith("Desc") and n != "TensorDesc"}
    assert descriptors == {r.descriptor for r in OPERATORS}
    assert len(operators.BY_NAME) == len(OPERATORS)


@RECORDS
def test_the_oracle_takes_the_functions_arguments(record):
    """Same parameters, kinds and defaults, less the execution options (device, algorithm)."""
    def parameters(fn, drop=()):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()
                if p.name not in drop]
    assert parameters(record.oracle) == parameters(record.function, operators.EXECUTION_OPTIONS)


@RECORDS
def test_every_data_type_has_a_tolerance(record):
    assert set(record.tolerance) == {np.dtype(d).name for d in record.dtypes}
    for tolerance in record.tolerance.values():
        assert tolerance.exact or record.magnitude is not None or not tolerance.magnitude


# ---- against the oracle --------------------------------------------------------------------------

def ranks(record):
    return [s for s in SHAPES_BY_RANK if len(s) <= record.max_rank]


@RECORDS_AND_DTYPES
def test_every_rank_against_the_oracle(device, rng, record, dtype):
    for shape in ranks(record):
        case = record.make_case(rng, shape, dtype)
        before = [np.copy(a) for a in case.args]
        got = record.run(case, device)
        operators.assert_close(record, got, case.args, case.kwargs, dtype)
        for a, b in zip(case.args, before):
            np.testing.assert_array_equal(a, b, err_msg=f"{case.label}: an input was modified")


@RECORDS_AND_DTYPES
@pytest.mark.parametrize("kind", VIEWS[1:])
def test_views_against_the_oracle(device, rng, record, dtype, kind):
    """Every array argument through a non-packed layout (each keeps its strides on the
    device): the same tolerance as packed arrays."""
    case = record.make_case(rng, (3, 4, 5, 6)[:record.max_rank], dtype)
    args = list(case.args)
    for i in arrays_of(case):
        args[i] = view_of(args[i], kind, axis=i % args[i].ndim)
    case = with_args(case, args)
    operators.assert_close(record, record.run(case, device), case.args, case.kwargs, dtype)


@RECORDS
def test_a_repeat_hits_the_one_call_cache(device, rng, record):
    """The same layouts again: the cached problem runs (no new descriptor), on the new data."""
    dtype = record.dtypes[0]
    case = record.make_case(rng, (5, 6, 7)[:record.max_rank], dtype)
    record.run(case, device)
    args = [a * 2 if isinstance(a, np.ndarray) else a for a in case.args]
    if record.name.startswith("batch_normalization"):
        args[3] = case.args[3]  # the variance stays positive
    again = with_args(case, args)
    before = device.cache_info()
    got = record.run(again, device)
    after = device.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)
    operators.assert_close(record, got, again.args, again.kwargs, dtype)


@RECORDS_AND_DTYPES
def test_the_compiled_descriptor_against_the_oracle(device, rng, record, dtype):
    """The descriptor API: compile the case's descriptor, bind device tensors, call, read."""
    case = record.make_case(rng, (2, 3, 5, 4)[:record.max_rank], dtype)
    desc = record.describe(case)
    op = device.compile(desc)
    fields = dict(desc.tensor_fields())
    inputs = [name for name, (_, access) in fields.items() if access == "read"]
    values = dict(zip(inputs, (case.args[i] for i in arrays_of(case))))
    tensors = {name: device.upload(values[name]) if name in values else device.empty(d)
               for name, (d, _) in fields.items()}
    op(**tensors)
    got = tuple(tensors[name].numpy() for name in fields if name not in values)
    args, kwargs = record.call(desc, values)
    operators.assert_close(record, got, args, kwargs, dtype)


@RECORDS
def test_beyond_the_buffer_limit(device, rng, record, monkeypatch):
    """With a 4 KiB buffer limit the one-call function cuts the problem along the record's
    independent axes (a new problem, not the cached whole), or refuses it, naming them."""
    dtype = record.dtypes[0]
    case = record.make_case(rng, (3, 7, 11, 13)[:record.max_rank], dtype)
    record.run(case, device)  # the whole, now cached
    monkeypatch.setenv("PYVKGRAD_MAX_BUFFER_BYTES", "4096")
    misses = device.cache_info().misses
    try:
        got = record.run(case, device)
    except ValueError as e:
        assert f"no cut along independent axes makes them fit (the operator can cut " \
               f"{record.independent_axes})" in str(e)
        return
    assert device.cache_info().misses > misses  # the pieces' problems, not the cached whole
    operators.assert_close(record, got, case.args, case.kwargs, dtype)


# ---- errors before any device work ---------------------------------------------------------------

@RECORDS
def test_one_call_errors_before_device_work(device, rng, record, monkeypatch):
    monkeypatch.setattr(OneCallCache, "run", lambda *a, **k: pytest.fail("reached the device"))
    case = record.make_case(rng, (2, 3), record.dtypes[0])
    args = list(case.args)
    args[0] = args[0].astype(np.float64)
    with pytest.raises(TypeError, match=f"^{record.OPERATOR}: .*unsupported dtype"):
        record.run(with_args(case, args), device)
    args[0] = [1.0, 2.0]
    with pytest.raises(TypeError, match=f"^{record.OPERATOR}: .*must be a numpy array"):
        record.run(with_args(case, args), device)


@RECORDS
def test_ranks_outside_the_records_range_are_refused(device, rng, record, monkeypatch):
    """The first array one dimension beyond max_rank, and one short of min_rank where that is
    above 1 (the range `python -m pyvkgrad info` prints), is refused naming the operator,
    before any device work."""
    monkeypatch.setattr(OneCallCache, "run", lambda *a, **k: pytest.fail("reached the device"))
    case = record.make_case(rng, (2, 3, 5, 6)[:record.max_rank], record.dtypes[0])
    first = case.args[0]
    wrong = [first.reshape((1,) * (record.max_rank + 1 - first.ndim) + first.shape)]
    if record.min_rank > 1:
        wrong.append(first[0])
    for array in wrong:
        with pytest.raises(ValueError, match=f"^{record.OPERATOR}: "):
            record.run(with_args(case, (array,) + case.args[1:]), device)


@pytest.mark.parametrize("record", [r for r in OPERATORS if r.dtypes == operators.DTYPES],
                         ids=lambda r: r.name)
def test_integer_arrays_are_refused_unless_taken(device, rng, record, monkeypatch):
    """An operator that takes only float types (its `dtypes`) refuses int32 arrays (one-call)
    and INT32 descriptors with a TypeError naming it and the field, before any device work."""
    monkeypatch.setattr(OneCallCache, "run", lambda *a, **k: pytest.fail("reached the device"))
    case = record.make_case(rng, (2, 3), np.float32)
    args = [a.astype(np.int32) if isinstance(a, np.ndarray) else a for a in case.args]
    with pytest.raises(TypeError, match=f"^{record.OPERATOR}: [A-Za-z]+Tensor has unsupported "
                                        f"dtype: expected float32 or float16, got int32"):
        record.run(with_args(case, args), device)
    desc = record.describe(case)
    changes = {name: TensorDesc(pyvkgrad.DataType.INT32, d.sizes, d.strides)
               for name, (d, _) in desc.tensor_fields()}
    with pytest.raises(TypeError, match=f"^{record.OPERATOR}: .*DataType must be a float type: "
                                        f"expected FLOAT32 or FLOAT16, got INT32"):
        dataclasses.replace(desc, **changes)


@RECORDS_AND_DTYPES
@pytest.mark.parametrize("layout", ["packed", "transposed"])
def test_in_place(device, rng, record, dtype, layout):
    """An output bound over an input its descriptor allows (`IN_PLACE`, identical
    descriptors): the oracle's result, packed and strided (float16 strided stores go through
    word atomics, which must not clear the element before it is read)."""
    in_place = getattr(record.descriptor, "IN_PLACE", {})
    if not in_place:
        pytest.skip(f"{record.name} allows no output over an input")
    for shape in ((3, 10, 7), (2, 3, 64)):  # short and long reductions (BatchNorm)
        check_in_place(device, record, record.make_case(rng, shape, dtype), layout, dtype)


def check_in_place(device, record, case, layout, dtype):
    in_place = record.descriptor.IN_PLACE
    desc = record.describe(case)
    if layout == "transposed":  # column-major strides on every tensor
        desc = dataclasses.replace(desc, **{
            name: TensorDesc(d.data_type, d.sizes, packed_strides(d.sizes[::-1])[::-1])
            for name, (d, _) in desc.tensor_fields()})
    op = device.compile(desc)
    fields = dict(desc.tensor_fields())
    inputs = [name for name, (_, access) in fields.items() if access == "read"]
    values = dict(zip(inputs, (case.args[i] for i in arrays_of(case))))
    for output, over in in_place.items():
        for field in over:
            tensors = {name: device.empty(d) for name, (d, _) in fields.items()}
            for name, value in values.items():
                tensors[name].write(value)
            tensors[output] = tensors[field]
            op(**tensors)
            got = tuple(tensors[name].numpy() for name in fields if name not in values)
            args, kwargs = record.call(desc, values)
            operators.assert_close(record, got, args, kwargs, dtype)
