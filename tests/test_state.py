"""pyvkgrad._state without a GPU: which copy of a device tensor is current (TensorState,
Submission), what is closed (Lifetime, ClosedError), and which dispatches need a barrier
(Hazards). Checked against small models of the contract documented in _state.py."""

import subprocess
import sys

import pytest
from hypothesis import given, strategies as st

from conftest import SUBPROCESS_CWD

from pyvkgrad._state import (ClosedError, Current, Hazards, Lifetime, OneCopy, Submission,
                             TensorState)


def run(bound, downloads=()):
    """Build a submission (bound: {state: written}), commit it as after success; its uploads."""
    sub = Submission()
    for state, written in bound.items():
        sub.bind(state, written)
    for state in downloads:
        sub.download(state)
    uploads = sub.uploads()
    sub.commit(uploads)
    return uploads


# ---- TensorState and Submission ----

def test_new_tensor_is_uploaded_once():
    """A new tensor's staging is current: the first submission uploads it, the next does not."""
    a = TensorState()
    assert a.needs_upload and not a.needs_download
    assert run({a: False}) == [a]
    assert a.current is Current.BOTH
    assert run({a: False}) == []


def test_write_uploads_exactly_that_tensor():
    """After `write` on one tensor, the next submission uploads exactly that tensor."""
    a, b, c = TensorState(), TensorState(), TensorState()
    run({a: False, b: False, c: True})
    c.downloaded()
    assert run({a: False, b: False, c: False}) == []
    b.host_written()
    assert run({a: False, b: False, c: False}) == [b]
    assert run({a: False, b: False, c: False}) == []


def test_reused_submission_uploads_only_what_is_stale():
    """A submission replayed with unchanged inputs uploads nothing; after a write, that one."""
    a, b = TensorState(), TensorState()
    sub = Submission()
    sub.bind(a, False)
    sub.bind(b, True)
    first = sub.uploads()
    assert set(map(id, first)) == {id(a), id(b)}
    sub.commit(first)
    assert sub.uploads() == []
    a.host_written()
    assert sub.uploads() == [a]


def test_written_only_tensor_is_uploaded_when_staging_is_newer():
    """A tensor a kernel only writes is uploaded while staging is newer (the elements the
    kernel does not cover keep their values); once device-newer it is not uploaded again."""
    out = TensorState()
    assert run({out: True}) == [out]
    assert out.current is Current.DEVICE
    assert run({out: False}) == [] and out.needs_download


def test_kernel_write_makes_next_read_download_once():
    """A submission that writes a tensor makes the next read download it, and only once."""
    x, y = TensorState(), TensorState()
    run({x: False, y: True})
    assert x.current is Current.BOTH and not x.needs_download
    assert y.needs_download and not y.needs_upload
    y.downloaded()
    assert not y.needs_download and not y.needs_upload
    assert run({x: False, y: False}) == []  # read back: the device copy is still current


def test_download_in_submission_leaves_both_current():
    """A submission that writes and downloads a tensor (one-call path) leaves both copies
    current: no download on read, no upload next time."""
    y = TensorState()
    run({y: True}, downloads=[y])
    assert y.current is Current.BOTH
    assert run({y: True}, downloads=[y]) == []


def test_one_copy_is_never_copied():
    """A mapped input (one copy that the host writes and kernels read) is never uploaded or
    downloaded, however often the host writes it; a staged tensor beside it is."""
    a, b = OneCopy(), TensorState()
    assert not a.needs_upload and not a.needs_download
    for i in range(3):
        a.host_written()
        assert not a.needs_upload
        assert run({a: False, b: True}, downloads=[b]) == ([b] if i == 0 else [])
        assert a.current is Current.BOTH and b.current is Current.BOTH
    assert repr(a) == "OneCopy(both)"


def test_uncommitted_submission_changes_nothing():
    """A submission never committed (failed or interrupted after recording) leaves every state
    as before: the next one uploads the same tensors, nothing becomes device-newer."""
    a, out = TensorState(), TensorState()
    sub = Submission()
    sub.bind(a, False)
    sub.bind(out, True)
    sub.download(out)
    with pytest.raises(KeyboardInterrupt):
        assert len(sub.uploads()) == 2
        raise KeyboardInterrupt  # between recording and commit
    assert a.current is Current.HOST and out.current is Current.HOST
    assert set(map(id, sub.uploads())) == {id(a), id(out)}


@given(data=st.data())
def test_property_states_follow_a_model_of_copies(data):
    """Random writes, runs (some interrupted before commit) and reads on a few tensors: the
    uploads, the downloads and what the host reads match a model of each copy's version."""
    n = data.draw(st.integers(1, 4), label="tensors")
    states = [TensorState() for _ in range(n)]
    truth, host, dev = [0] * n, [0] * n, [None] * n  # versions; None: the device copy is garbage
    recordings = []
    for _ in range(data.draw(st.integers(1, 3), label="recordings")):
        bound = data.draw(st.dictionaries(st.integers(0, n - 1), st.booleans(), min_size=1))
        downloads = data.draw(st.lists(st.sampled_from(sorted(bound)), unique=True))
        sub = Submission()
        for t, written in bound.items():
            sub.bind(states[t], written)
        for t in downloads:
            sub.download(states[t])
        recordings.append((sub, bound, downloads))
    version = 0
    for op, t, r in data.draw(st.lists(st.tuples(
            st.sampled_from(["write", "read", "run", "interrupt"]), st.integers(0, n - 1),
            st.integers(0, len(recordings) - 1)), max_size=30), label="ops"):
        version += 1
        if op == "write":
            states[t].host_written()
            truth[t] = host[t] = version
        elif op == "read":
            assert states[t].needs_download == (host[t] != truth[t])
            if states[t].needs_download:
                states[t].downloaded()
                host[t] = dev[t]
            assert host[t] == truth[t]
        else:
            sub, bound, downloads = recordings[r]
            uploads = sub.uploads()
            assert sorted(id(s) for s in uploads) == sorted(
                id(states[u]) for u in bound if dev[u] != truth[u])
            if op == "run":  # an interrupted run is never committed: nothing changes
                for u, written in bound.items():
                    assert dev[u] == truth[u] or host[u] == truth[u]
                    dev[u] = (version, u) if written else truth[u]  # upload, then kernels
                    truth[u] = dev[u]
                for u in downloads:
                    host[u] = dev[u]
                sub.commit(uploads)
        for i, s in enumerate(states):
            assert s.needs_upload == (dev[i] != truth[i])
            assert s.needs_download == (host[i] != truth[i])


# ---- Lifetime ----

def test_closing_a_parent_closes_descendants():
    """Closing a lifetime closes its dependents transitively, not its parent or siblings."""
    session = Lifetime("device 'x'")
    op = Lifetime("the compiled add operator", session)
    call = Lifetime("a call", op)
    other = Lifetime("the recording", session)
    op.close()
    assert not op.alive and not call.alive
    assert session.alive and other.alive
    session.close()
    assert not other.alive


def test_check_names_what_was_closed():
    """check() passes while open and raises ClosedError naming the action and what was closed
    (the object itself, or the outermost closed ancestor it belongs to)."""
    session = Lifetime("device 'gpu0'")
    op = Lifetime("the compiled add operator", session)
    tensor = Lifetime("the DeviceTensor (4,)", op)
    tensor.check("DeviceTensor.write")
    tensor.close()
    with pytest.raises(ClosedError, match=r"^DeviceTensor.write: the DeviceTensor \(4,\) is "
                                          r"closed$"):
        tensor.check("DeviceTensor.write")
    op.close()
    session.close()
    with pytest.raises(ClosedError, match=r"^numpy: the DeviceTensor \(4,\) belongs to "
                                          r"device 'gpu0', which was closed$"):
        Lifetime("the DeviceTensor (4,)", op).check("numpy")
    assert issubclass(ClosedError, ValueError)


def test_new_objects_work_after_close():
    """After a session is closed, objects of a new session are open; the old stay closed."""
    old = Lifetime("device 'x'")
    tensor = Lifetime("the DeviceTensor (2,)", old)
    old.close()
    new = Lifetime("device 'x'")
    fresh = Lifetime("the DeviceTensor (2,)", new)
    fresh.check("numpy")
    assert new.alive and fresh.alive and not tensor.alive
    with pytest.raises(ClosedError):
        tensor.check("numpy")


# ---- Hazards ----

@pytest.mark.parametrize("first, second, barrier", [
    (((), "a"), ("a", ()), {"a"}),  # read after write
    (("a", ()), ((), "a"), {"a"}),  # write after read
    (((), "a"), ((), "a"), {"a"}),  # write after write
    (("a", ()), ("a", ()), set()),  # read after read
    (((), "a"), ("b", "c"), set()),  # independent
], ids=["RAW", "WAR", "WAW", "RAR", "independent"])
def test_hazard_pairs(first, second, barrier):
    """RAW, WAR and WAW between two dispatches need a barrier on that buffer; RAR does not."""
    h = Hazards()
    assert h.dispatch(*first) == set()
    assert h.dispatch(*second) == barrier


def test_barrier_makes_only_its_buffers_visible():
    """A barrier orders every earlier dispatch but makes only its listed writes visible."""
    h = Hazards()
    assert h.dispatch("x", "ab") == set()
    assert h.dispatch("a", "c") == {"a"}
    assert h.dispatch((), "x") == set()  # the read of x is ordered by the barrier on a
    assert h.dispatch("b", ()) == {"b"}  # b's write is still pending
    assert h.dispatch("a", ()) == set()


@given(st.lists(st.tuples(st.sets(st.sampled_from("abcd"), max_size=3),
                          st.sets(st.sampled_from("abcd"), max_size=2)), max_size=12))
def test_property_barriers_are_exactly_the_hazards(dispatches):
    """Each barrier lists exactly the buffers with an unsynchronized RAW/WAW (no barrier on that
    buffer since the write) or WAR (no barrier at all since the read) on an earlier dispatch."""
    h = Hazards()
    barriers = []
    for j, (reads, writes) in enumerate(dispatches):
        expected = set()
        for i in range(j):
            between = barriers[i + 1:j]
            r, w = dispatches[i]
            expected |= {x for x in w & (reads | writes) if not any(x in b for b in between)}
            if not any(between):
                expected |= r & writes
        barriers.append(h.dispatch(reads, writes))
        assert barriers[-1] == expected


def test_state_imports_no_runtime():
    """Importing pyvkgrad._state alone loads neither Vulkan (_kompute) nor the device layer."""
    code = ("import sys, pyvkgrad._state; print(sorted(m for m in ('pyvkgrad._kompute', "
            "'pyvkgrad.device', 'pyvkgrad.runtime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=SUBPROCESS_CWD)
    assert out.stdout.strip() == "[]"
