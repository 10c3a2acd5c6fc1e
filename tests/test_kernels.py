"""Kernel interfaces: the manifest records each kernel's constants, bindings and push constants
(read from its SPIR-V by tools/build_shaders.py), plans pass them by name, and a plan that
disagrees with its kernel fails when it is built, before any device work."""

import dataclasses
import importlib.util
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import pyvkgrad
from pyvkgrad import DataType, TensorDesc, kernels, reference
from pyvkgrad.kernels import InterfaceError
from pyvkgrad.operators import OPERATORS
from pyvkgrad.plan import LOOP_MARGIN, WRITE, Dispatch, Limits, Plan
from cases import SHAPES_BY_RANK

ROOT = Path(__file__).resolve().parent.parent
F32, F16 = DataType.FLOAT32, DataType.FLOAT16
RELU = "activation_relu_grad"


def build_tool():
    spec = importlib.util.spec_from_file_location("build_shaders", ROOT / "tools/build_shaders.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def strided_relu_desc(sizes=(5, 7)):
    """X transposed (column-major), dY and dX packed: the strided kernel, three layouts."""
    x = TensorDesc(F32, sizes, (1, sizes[0]))
    return pyvkgrad.ActivationReluGradDesc(x, TensorDesc(F32, sizes), TensorDesc(F32, sizes))


def with_constants(**changes):
    """The strided ReLU grad's constants for 8 packed elements, with `changes` (None: drop)."""
    constants = dict(WG=64, DATA_TYPE=1, SIZES=(1,) * 7 + (8,), X_STRIDES=(0,) * 7 + (1,),
                     DY_STRIDES=(0,) * 7 + (1,), DX_STRIDES=(0,) * 7 + (1,))
    constants.update(changes)
    return {name: value for name, value in constants.items() if value is not None}


def relu_dispatch(**changes):
    """The strided ReLU grad's dispatch, by name, with `changes` to its fields."""
    fields = dict(kernel=RELU, workgroups=1, constants=with_constants(),
                  push=dict(count=8, first=0),
                  bindings=dict(x="input_tensor", dy="input_gradient_tensor",
                                dx="output_gradient_tensor"))
    return Dispatch(**dict(fields, **changes))


def patch_kernel(monkeypatch, name, spirv=None, interface=None):
    """Serve kernel `name` with other SPIR-V and/or another interface (an in-memory manifest)."""
    real_spirv, real_interface = kernels.spirv, kernels.interface
    if spirv is not None:
        monkeypatch.setattr(kernels, "spirv",
                            lambda n, *rte16: spirv if n == name else real_spirv(n, *rte16))
    if interface is not None:
        monkeypatch.setattr(kernels, "interface",
                            lambda n: interface if n == name else real_interface(n))


def rename_x_strides(monkeypatch):
    """Serve the ReLU grad's kernel with X_STRIDES renamed XS (its manifest entry rewritten in
    memory)."""
    entry = kernels.manifest_entry(RELU)
    entry["constants"] = [dict(c, name=c["name"].replace("X_STRIDES", "XS")) if
                          c["name"].startswith("X_STRIDES") else c for c in entry["constants"]]
    patch_kernel(monkeypatch, RELU, interface=kernels.interface_of(RELU, entry))


# ---- what the manifest records ------------------------------------------------------------------

def test_manifest_describes_every_shipped_kernel():
    """The recorded interface is the one read back from each shipped SPIR-V (what
    `build_shaders.py --check` verifies), with the rules plans rely on: SpecIds and bindings
    numbered 0..n-1 and the workgroup width named WG."""
    tool = build_tool()
    for name in kernels.names():
        entry = kernels.manifest_entry(name)
        read = tool.read_interface(kernels.spirv(name), name)
        assert {key: entry[key] for key in tool.INTERFACE} == read, name
        iface = kernels.interface(name)
        assert [c.id for c in iface.constants] == list(range(len(iface.constants))), name
        assert [b.binding for b in iface.bindings] == list(range(len(iface.bindings))), name
        assert iface.constants[0].name == "WG", name


def test_interface_of_the_relu_and_partials_kernels():
    relu = kernels.interface(RELU)
    assert [c.name for c in relu.constants[:3]] == ["WG", "DATA_TYPE", "SIZES0"]
    assert [(c.name, c.type, c.default) for c in relu.constants if c.name == "DX_STRIDES7"] \
        == [("DX_STRIDES7", "uint", 0)]
    assert [(b.name, b.access) for b in relu.bindings] == [
        ("x", "read"), ("dy", "read"), ("dx", "read_write")]  # float16 dx: atomics on words
    assert relu.push_constants == ("count", "first")
    packed = kernels.interface("activation_relu_grad_packed")
    # dx read-write: a tail vector's float16 halves are stored with atomics on their words.
    assert packed.access == {"x": "read", "dy": "read", "dx": "read_write"}
    # One binding viewed through three blocks is one binding, named after its first view.
    out = kernels.interface("batch_normalization_training_grad_output_packed")
    assert [b.name for b in out.bindings] == ["x", "dy", "coefficients", "dx"]
    assert out.bindings[3].views == ("uvec4 dx", "uint dx_uint")
    direct = kernels.interface("batch_normalization_grad_direct")
    assert {c.name: c.type for c in direct.constants}["EPSILON"] == "float"
    # Capabilities, whence the subgroup operations a device must support (Device.compile):
    # since the exact sums, no kernel uses any.
    assert relu.capabilities == ("Shader",) and relu.subgroup_features == ()
    assert all(kernels.interface(n).subgroup_features == () for n in kernels.names())


def test_specialization_and_binding_order_follow_the_kernel():
    d = relu_dispatch(constants=with_constants(SIZES=(1, 1, 1, 1, 1, 1, 5, 7),
                                               X_STRIDES=(0,) * 6 + (1, 5)))
    words = kernels.specialization(d.kernel, d.constants)
    ids = {c.name: c.id for c in kernels.interface(RELU).constants}
    assert words.dtype == np.uint32 and words.size == len(ids)
    assert (words[ids["SIZES6"]], words[ids["SIZES7"]], words[ids["X_STRIDES7"]]) == (5, 7, 5)
    assert kernels.binding_order(d.kernel, dict(dx="c", x="a", dy="b")) == ("a", "b", "c")
    # Floats are sent as their float32 bits, bools as 0/1.
    eps = direct_dispatch(IS_F16=True)
    words = kernels.specialization(eps.kernel, eps.constants)
    by_name = {c.name: words[c.id] for c in kernels.interface(eps.kernel).constants}
    assert by_name["EPSILON"] == np.float32(1e-5).view(np.uint32) and by_name["IS_F16"] == 1


def direct_dispatch(**constants):
    """BATCH_NORMALIZATION_GRAD's direct kernel (a float, EPSILON, and bools, IS_F16 and
    TRAINING), as its plan dispatches it for 4 elements per channel, with `constants`
    changed."""
    big, small = TensorDesc(DataType.FLOAT32, (4, 3)), TensorDesc(DataType.FLOAT32, (1, 3))
    desc = pyvkgrad.BatchNormalizationGradDesc(big, big, small, small, small, big, small, small,
                                               1e-5)
    d = desc.plan(Limits()).dispatches[0]
    assert d.kernel == "batch_normalization_grad_direct"
    return Dispatch(d.kernel, dict(d.bindings), 1, constants=dict(d.constants, **constants),
                    push=dict(d.push))


def test_a_bool_constant_takes_only_bools():
    """(The ReLU grad's kernels took IS_F16, a bool, before they took DATA_TYPE.)"""
    with pytest.raises(InterfaceError, match="IS_F16 is a bool"):
        direct_dispatch(IS_F16=2)


def test_a_kernels_hash_covers_exactly_the_files_it_includes(tmp_path, monkeypatch):
    """The manifest's source hash covers a kernel's source and the files it includes, directly
    or not, and no other: changing a file changes the hashes of exactly its kernels (so a new
    include, or a new operator's formula, restamps no unrelated kernel). Directives in
    comments include nothing."""
    tool = build_tool()
    shaders = tmp_path / "shaders"
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    monkeypatch.setattr(tool, "INCLUDE", shaders / "include")
    files = {"include/common.glsl": "// common\n",
             "include/a.glsl": '#include "common.glsl"\n',
             "include/b.glsl": "// b\n",
             "include/commented.glsl": "// only named in comments\n",
             "include/unused.glsl": "// included by nothing\n",
             "include/elementwise_grad.glsl": '#include "common.glsl"\n',
             "elementwise/op.glsl": "// a formula\n",
             "k_a.comp": '#version 450\n#include "a.glsl"\n// #include "commented.glsl"\n',
             "k_b.comp": '#version 450\n /* #include "commented.glsl" */\n #include "b.glsl"\n',
             "k_none.comp": "#version 450\n"}
    for path, text in files.items():
        (shaders / path).parent.mkdir(parents=True, exist_ok=True)
        (shaders / path).write_text(text)

    def hashes():
        return {k.name: tool.source_hash(k.text, k.folder, k.name)
                for k in tool.target_kernels(shaders)}
    users = {"include/common.glsl": {"k_a", "op", "op_packed"}, "include/a.glsl": {"k_a"},
             "include/b.glsl": {"k_b"}, "include/commented.glsl": set(),
             "include/unused.glsl": set(), "include/elementwise_grad.glsl": {"op", "op_packed"},
             "elementwise/op.glsl": {"op", "op_packed"}, "k_a.comp": {"k_a"},
             "k_b.comp": {"k_b"}, "k_none.comp": {"k_none"}}
    before = hashes()
    assert set(before) == {"k_a", "k_b", "k_none", "op", "op_packed"}
    for path, kernels_of_it in users.items():
        (shaders / path).write_text(files[path] + "// changed\n")
        after = hashes()
        assert {name for name in before if after[name] != before[name]} == kernels_of_it, path
        (shaders / path).write_text(files[path])
    assert hashes() == before


def test_the_shipped_hashes_are_the_tools():
    """The manifest records, for every kernel, the hash of its source and its includes."""
    tool = build_tool()
    for kernel in tool.target_kernels(ROOT / "shaders"):
        assert kernels.manifest_entry(kernel.name)["source_sha256"] == tool.source_hash(
            kernel.text, kernel.folder, kernel.name), kernel.name


# ---- mismatches are errors when the plan is built -------------------------------------------------

@pytest.mark.parametrize("change, message", [
    (dict(constants=with_constants(DX_STRIDES=None)), r"not passed by the plan: DX_STRIDES0\.\.7"),
    (dict(constants=with_constants(DX_STRIDES=None, DXS=(0,) * 8)),
     r"not passed by the plan: DX_STRIDES0\.\.7; not declared by the kernel: DXS0\.\.7"),
    (dict(constants=with_constants(LOCAL_SIZE=64)), "not declared by the kernel: LOCAL_SIZE"),
    (dict(constants=with_constants(SIZES=(1,) * 4)), r"not passed by the plan: SIZES4\.\.7"),
    (dict(constants=with_constants(SIZES=(1,) * 9)), "not declared by the kernel: SIZES8"),
    (dict(constants=with_constants(SIZES0=1)), "constant SIZES0 is passed twice"),
    (dict(constants=with_constants(DATA_TYPE=True)), "DATA_TYPE is a uint"),
    (dict(constants=with_constants(WG=64.0)), "WG is a uint"),
    (dict(constants=with_constants(WG=-1)), "WG is a uint"),
    (dict(constants=with_constants(WG=True)), "WG is a uint"),
    (dict(bindings=dict(x="input_tensor", dy="input_gradient_tensor")), "not passed by the plan: dx"),
    (dict(bindings=dict(x="input_tensor", dy="input_gradient_tensor",
                        out="output_gradient_tensor")),
     "not passed by the plan: dx; not declared by the kernel: out"),
    (dict(bindings=dict(x="input_tensor", dy="input_gradient_tensor", dx=3)),
     "binding dx must name a buffer"),
    (dict(push=dict()), "push constants do not match the kernel's: not passed by the plan: count, "
                        "first"),
    (dict(push=dict(count=1, first=0, value=0)), "not declared by the kernel: value"),
    (dict(push=dict(count=-1, first=0)), "push constant count is a uint"),
])
def test_a_dispatch_that_disagrees_with_its_kernel_is_refused(change, message):
    with pytest.raises(InterfaceError, match=f"kernel {RELU}: .*{message}"):
        relu_dispatch(**change)


def test_what_the_check_remembers_lets_nothing_else_through(monkeypatch):
    """The dispatches of one plan share their constants and bindings, and the check remembers
    those that fit a kernel (kernels._FITTING); nothing remembered lets through what the full
    check refuses: True or 64.0 where fitting dispatches passed 1 and 64, or the same constants
    once the kernel's interface has changed."""
    assert relu_dispatch() == relu_dispatch()  # the second one's constants are remembered
    for wrong, message in ((dict(DATA_TYPE=True), "DATA_TYPE is a uint"),
                           (dict(WG=64.0), "WG is a uint")):
        with pytest.raises(InterfaceError, match=message):
            relu_dispatch(constants=with_constants(**wrong))
    rename_x_strides(monkeypatch)
    with pytest.raises(InterfaceError, match="X_STRIDES0..7"):
        relu_dispatch()


def test_the_error_lists_what_the_kernel_declares():
    with pytest.raises(InterfaceError) as e:
        relu_dispatch(constants=with_constants(X_STRIDES=None, XS=(0,) * 8))
    assert ("it declares WG, DATA_TYPE, SIZES0..7, X_STRIDES0..7, DY_STRIDES0..7, DX_STRIDES0..7"
            in str(e.value))


def test_a_plan_binding_an_unknown_buffer_is_refused():
    d = relu_dispatch(bindings=dict(x="input_tensor", dy="input_gradient_tensor",
                                    dx="output_gradient"))
    with pytest.raises(InterfaceError, match="binding dx names buffer 'output_gradient'"):
        Plan((d,), tensors=("input_tensor", "input_gradient_tensor", "output_gradient_tensor"))


def test_a_renamed_kernel_constant_fails_at_plan_time(monkeypatch, device):
    """A kernel whose X_STRIDES became XS (here: its manifest entry rewritten in memory) no
    longer fits the plan: desc.plan and Device.compile raise before any device work."""
    rename_x_strides(monkeypatch)
    desc = strided_relu_desc()
    with pytest.raises(InterfaceError, match=r"kernel activation_relu_grad: .*not passed by the "
                                             r"plan: XS0\.\.7; not declared by the kernel: "
                                             r"X_STRIDES0\.\.7"):
        desc.plan(Limits())
    with pytest.raises(InterfaceError, match="X_STRIDES0..7"):
        device.compile(desc)


def test_reordered_constants_are_resolved_by_name(monkeypatch):
    """A kernel whose constants are numbered in another order (its manifest entry rewritten in
    memory, as a rebuilt shader would record it) gets the same values in its own order."""
    plan = strided_relu_desc().plan(Limits())
    (d,) = plan.dispatches
    shipped = kernels.specialization(d.kernel, d.constants)
    entry = kernels.manifest_entry(RELU)
    ids = {c["name"]: c["id"] for c in entry["constants"]}

    def swapped(name):  # X_STRIDES3 <-> DY_STRIDES3
        for a, b in (("X_STRIDES", "DY_STRIDES"), ("DY_STRIDES", "X_STRIDES")):
            if name.startswith(a) and name[len(a):].isdigit():
                return b + name[len(a):]
        return name
    entry["constants"] = [dict(c, id=ids[swapped(c["name"])]) for c in entry["constants"]]
    patch_kernel(monkeypatch, RELU, interface=kernels.interface_of(RELU, entry))
    reordered = kernels.specialization(d.kernel, d.constants)
    old, new = kernels.interface_of(RELU, kernels.manifest_entry(RELU)), kernels.interface(RELU)
    for c in old.constants:
        moved = next(n for n in new.constants if n.name == c.name)
        assert reordered[moved.id] == shipped[c.id], c.name
    assert not np.array_equal(reordered, shipped)  # the strides of X and dY differ here


@pytest.mark.skipif(shutil.which("glslangValidator") is None,
                    reason="glslangValidator is not installed")
def test_a_reordered_shader_computes_right_and_a_stale_manifest_is_caught(monkeypatch, device,
                                                                         rng, tmp_path):
    """Compile the strided ReLU grad with the constant ids of X's and dY's strides swapped.
    With its own interface (what the build records) it computes the oracle's bits, with the
    plan unchanged. With the shipped interface (a stale manifest) it would read X through
    dY's strides: garbage, which the manifest-against-SPIR-V check of `--check` refuses.
    The constants are declared by the element-wise template, which the kernel includes: a
    reordered copy of it beside the kernel is found first (includes resolve from the
    including file's folder)."""
    template = (ROOT / "shaders/include/elementwise_grad.glsl").read_text()
    declaration = "DIMS8_3(uint, X_STRIDES, DY_STRIDES, DX_STRIDES, 10, 0)"
    assert declaration in template
    (tmp_path / "elementwise_grad.glsl").write_text(template.replace(
        declaration, "DIMS8_3(uint, DY_STRIDES, X_STRIDES, DX_STRIDES, 10, 0)"))
    tool = build_tool()
    comp = tmp_path / f"{RELU}.comp"  # the strided kernel, as the build generates it
    comp.write_text(tool.elementwise_source(ROOT / f"shaders/elementwise/{RELU}.glsl", "strided"))
    spv = tmp_path / f"{RELU}.spv"
    res = subprocess.run(["glslangValidator", "-V", "--target-env", "vulkan1.1",
                          f"-I{ROOT / 'shaders/include'}", "-o", str(spv), str(comp)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    data = spv.read_bytes()
    rebuilt = tool.read_interface(data, "reordered")
    shipped_entry = kernels.manifest_entry(RELU)
    assert rebuilt != {key: shipped_entry[key] for key in tool.INTERFACE}  # --check's test

    desc = strided_relu_desc()
    x = np.asfortranarray(rng.uniform(-2, 2, (5, 7)).astype(np.float32))
    dy = rng.uniform(-2, 2, (5, 7)).astype(np.float32)
    want = reference.activation_relu_grad(x, dy).astype(np.float32)

    def run():
        op = device.compile(desc)
        xt, dyt = device.upload(x), device.upload(dy)
        assert xt.desc.strides == desc.input_tensor.strides
        dxt = device.empty(desc.output_gradient_tensor)
        op(input_tensor=xt, input_gradient_tensor=dyt, output_gradient_tensor=dxt)
        out = dxt.numpy()
        op.close()
        return out

    patch_kernel(monkeypatch, RELU, spirv=data,
                 interface=kernels.interface_of(RELU, dict(shipped_entry, **rebuilt)))
    np.testing.assert_array_equal(run().view(np.uint32), want.view(np.uint32))
    monkeypatch.undo()
    patch_kernel(monkeypatch, RELU, spirv=data)  # the shipped, now stale, interface
    assert not np.array_equal(run(), want)


# ---- one name per operator ------------------------------------------------------------------------

def strides_in_order(sizes, order):
    """Packed strides with the axes laid out in `order`, outermost first."""
    strides, step = [0] * len(sizes), 1
    for axis in reversed(order):
        strides[axis], step = step, step * sizes[axis]
    return tuple(strides)


def layouts(desc):
    """`desc` and its variants with other layouts of its tensors of the first tensor's rank:
    column-major and channels-last (axis 1 innermost), for all of them, or for the inputs
    with the outputs packed."""
    yield desc
    fields = desc.tensor_fields()
    rank = len(fields[0][1][0].sizes)
    orders = [list(range(rank))[::-1]] + ([[0, *range(2, rank), 1]] if rank >= 3 else [])
    for order in orders:
        for outputs_packed in (False, True):
            changes = {name: TensorDesc(t.data_type, t.sizes, strides_in_order(t.sizes, order))
                       for name, (t, access) in fields
                       if len(t.sizes) == rank and not (outputs_packed and access == WRITE)}
            try:
                yield dataclasses.replace(desc, **changes)
            except (TypeError, ValueError):  # a layout the operator does not take
                pass


def plans_by_operator(records=OPERATORS):
    """The kernels each operator's plans use, derived from the operator table: the descriptors
    of each record's cases at every rank and data type (`describe`), in other layouts
    (`layouts`), with each value of an `algorithm` field, with and without float atomics, and
    under a driver's loop limit too short for long loops (ResampleGrad's windowed gather; a
    plan may refuse it), also in a grid of one lane (RANDOM_GENERATOR's state kernel, which
    follows dispatches that such a limit cuts)."""
    rng = np.random.default_rng(0)
    used = {}
    for record in records:
        found = used.setdefault(record.name, set())
        for dtype in record.dtypes:
            for shape in SHAPES_BY_RANK + [(64, 5), (1, 4, 6, 8)]:
                case = record.make_case(rng, shape[:record.max_rank], dtype)
                desc = record.describe(case)
                algorithms = record.parameter_examples(len(shape)).get("algorithm", ([None],))[0]
                for algorithm in algorithms:
                    chosen = desc if algorithm is None else dataclasses.replace(
                        desc, algorithm=algorithm)
                    for variant in layouts(chosen):
                        for atomics in (False, True):
                            found.update(d.kernel for d in variant.plan(
                                Limits(float_atomic_add=atomics)).dispatches)
                        for short in (Limits(max_loop_iterations=LOOP_MARGIN + 11),
                                      Limits(max_loop_iterations=LOOP_MARGIN + 11,
                                             max_workgroups=1, local_size=1,
                                             max_local_size=1)):
                            try:
                                found.update(d.kernel for d in variant.plan(short).dispatches)
                            except RuntimeError:  # no plan within so short a limit
                                pass
    return used


def assert_named_after_their_operators(used, manifest, root=ROOT):
    """Each kernel's source (the manifest's `source`) carries its operator's name, so `grep -l
    <operator> shaders/*.comp shaders/elementwise/*.glsl` lists the sources of every kernel
    the operator runs: a `.comp` is named after the kernel and the kernel after its operator,
    or (a kernel two operators share, named after the first) names the operator in its first
    lines; a generated kernel is `<formula>` or `<formula>_packed` of the formula it comes
    from, shaders/elementwise/<operator>.glsl (or, shared, the first operator's formula
    naming the operator in its first lines)."""
    for op, names in used.items():
        for name in names:
            entry = manifest[name]
            source = Path(entry["source"])
            head = (root / source).read_text().splitlines()[:4]
            if "generated" in entry:
                suffix = {"strided": "", "packed": "_packed"}[entry["generated"]]
                assert source.parent == Path("shaders/elementwise"), (op, name)
                assert name == source.stem + suffix, (op, name)
                assert source.stem == op or any(op in line for line in head), (op, name)
                continue
            assert source == Path("shaders") / f"{name}.comp", (op, name)
            assert name.startswith(op) or any(op in line for line in head), (op, name)


def test_every_kernel_of_an_operator_is_found_by_grepping_its_name():
    """Every kernel is run by an operator of the table (`plans_by_operator`, derived from it,
    so a new operator's kernels are covered without editing this test) and its source carries
    that operator's name (`assert_named_after_their_operators`)."""
    used = plans_by_operator()
    assert used["batch_normalization_training_grad"] >= {"batch_normalization_training_sums",
                                                          "batch_normalization_grad_direct"}
    assert used["activation_relu_grad"] == {RELU, f"{RELU}_packed"}
    assert_named_after_their_operators(used, {n: kernels.manifest_entry(n)
                                              for n in kernels.names()})
    assert set().union(*used.values()) == set(kernels.names())
