"""Where a numpy round trip's time goes (diagnostic for issue 13's round-trip target).

For ReLU grad 1 Mi float32 and BN training grad [32,64,56,56] float32, median wall times of:
the one-call function; its parts on a cache hit (copying each input into staging, the
submission: uploads, kernels, downloads, and reading outputs back into new arrays); the same
host copies split over 1-16 threads; PyTorch from numpy, split the same way. Also prints the
device's memory types (is staging memory host-cached?).

    python3 benchmarks/roundtrip_parts.py --out DIR
"""
import argparse, ctypes, json, os, statistics, sys, time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pyvkgrad  # noqa: E402
from pyvkgrad import _vulkan_info as vi  # noqa: E402
from pyvkgrad.tensor import elements_of, words_to_array  # noqa: E402

REPEAT = 30


def med(fn, repeat=REPEAT):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def memory_types():
    def probe(lib, instance, version):
        handles = vi._physical_device_handles(lib, instance)
        get_mem2 = vi._proc(lib, instance, "vkGetPhysicalDeviceMemoryProperties2", None,
                            ctypes.c_void_p, ctypes.POINTER(vi.VkPhysicalDeviceMemoryProperties2))
        out = []
        for h in handles:
            mem = vi.VkPhysicalDeviceMemoryProperties2(sType=vi._ST_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2)
            get_mem2(h, ctypes.byref(mem))
            out.append({"types": [(mem.memoryTypes[i].propertyFlags, mem.memoryTypes[i].heapIndex)
                                  for i in range(mem.memoryTypeCount)],
                        "heaps": [(mem.memoryHeaps[i].size, mem.memoryHeaps[i].flags)
                                  for i in range(mem.memoryHeapCount)]})
        return out
    return vi._with_instance(probe)


def split_copy(pool, threads, dst, src):
    if threads == 1:
        np.copyto(dst, src)
        return
    n = src.shape[0]
    k = -(-n // threads)
    list(pool.map(lambda i: np.copyto(dst[i * k:(i + 1) * k], src[i * k:(i + 1) * k]),
                  range(threads)))


def parts(dev, name, call, pool, torch_parts):
    call()
    entry = list(dev._one_call.values())[-1]
    row = {"case": name, "one_call_us": med(call)}
    arrays = [a for a in entry._last_arrays]
    ins = [(entry.tensors[n], elements_of(a, d)) for (n, d), a in zip(entry.inputs, arrays)]
    row["write_inputs_us"] = med(lambda: [t._write_elements(e) for t, e in ins])
    row["submit_us"] = med(lambda: ([t._write_elements(e) for t, e in ins[:0]],
                                    entry.recording._run()))
    outs = [entry.tensors[n] for n in entry.outputs]
    row["read_outputs_us"] = med(lambda: [words_to_array(t._storage.buffer.words(), t.desc)
                                          for t in outs])
    row["bytes_in"] = sum(e.nbytes for _, e in ins)
    row["bytes_out"] = sum(t.nbytes for t in outs)
    for threads in (1, 2, 4, 8, 16):
        views = [(t._storage.buffer.words().view(e.dtype)[:e.size], e) for t, e in ins]
        row[f"write_{threads}t_us"] = med(lambda: [split_copy(pool, threads, v, e)
                                                   for v, e in views])
        srcs = [t._storage.buffer.words().view(t.desc.data_type.numpy_dtype)[:t.desc.element_count]
                for t in outs]
        kept = [np.empty_like(s) for s in srcs]
        row[f"read_{threads}t_new_us"] = med(lambda: [split_copy(pool, threads, np.empty_like(s), s)
                                                      for s in srcs])
        row[f"read_{threads}t_kept_us"] = med(lambda: [split_copy(pool, threads, d, s)
                                                       for d, s in zip(kept, srcs)])
    row.update(torch_parts())
    print(json.dumps(row), flush=True)
    return row


def zero_copy(dev, n):
    """ReLU grad bound directly to host-visible memory (kp's host tensors): no copies
    recorded, the kernel reads and writes host memory over the bus."""
    from pyvkgrad.runtime import Buffer, kp
    from pyvkgrad.tensor import DataType, TensorDesc
    desc = TensorDesc(DataType.FLOAT32, (n,))
    op = dev.compile(pyvkgrad.ActivationReluGradDesc(desc, desc, desc))
    rt = dev.runtime()
    bufs = [Buffer(rt, rt._mgr.tensor_t(np.zeros(n, np.uint32), kp.TensorTypes.host), n * 4, True)
            for _ in range(3)]
    d = op.plan.dispatches[0]
    prog = op._program(0, bufs)
    cmds = rt.commands(0, dev.wait_spin_us * 1000)
    cmds.dispatch(prog, np.array(d.push_constants, np.uint32))
    rng = np.random.default_rng(1)
    x = rng.standard_normal(n).astype(np.float32)
    dy = rng.standard_normal(n).astype(np.float32)
    views = [b.words().view(np.float32) for b in bufs]

    def call():
        np.copyto(views[0], x)
        np.copyto(views[1], dy)
        cmds.submit("zero copy")
        return views[2].copy()
    out = call()
    ok = bool(np.array_equal(out, np.where(x > 0, dy, np.float32(0))))
    row = {"n": n, "correct": ok, "call_us": med(call), "submit_us": med(lambda: cmds.submit()),
           "one_call_us": med(lambda: pyvkgrad.activation_relu_grad(x, dy, device=dev))}
    print(json.dumps(row), flush=True)
    cmds.destroy()
    return row


def small_parts(dev):
    """The one-call function on 1024 elements and its cache-hit parts."""
    x = np.random.default_rng(2).standard_normal(1024).astype(np.float32)
    pyvkgrad.activation_relu_grad(x, x, device=dev)
    from pyvkgrad.device import layout_key
    entry = list(dev._one_call.values())[-1]
    ins = [(entry.tensors[n], elements_of(x, d)) for n, d in entry.inputs]
    out = entry.tensors[entry.outputs[0]]
    row = {"one_call_us": med(lambda: pyvkgrad.activation_relu_grad(x, x, device=dev), 2000),
           "default_device_us": med(pyvkgrad.default_device, 2000),
           "limits_us": med(lambda: dev.limits, 2000),
           "layout_key_us": med(lambda: layout_key("A", (), x, x), 2000),
           "entry_run_us": med(lambda: entry.run((x, x)), 2000),
           "writes_us": med(lambda: [t._write_elements(e) for t, e in ins], 2000),
           "run_us": med(lambda: entry.recording._run(), 2000),
           "numpy_us": med(out.numpy, 2000)}
    # The command buffer with uploads alone, then the one without.
    for i, (key, (cmds, _)) in enumerate(entry.recording._commands.items()):
        row[f"eval_{len(key)}_uploads_us"] = med(lambda: cmds._kp.eval(), 2000)
    print(json.dumps(row), flush=True)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    result = {"memory_types": memory_types()}
    print(json.dumps(result), flush=True)
    dev = pyvkgrad.default_device()
    # Remember the arrays of the last cache hit (diagnostic only).
    import pyvkgrad.device as D
    run = D._OneCallEntry.run

    def remembering(self, arrays):
        self._last_arrays = list(arrays)
        return run(self, arrays)
    D._OneCallEntry.__slots__  # noqa
    D._OneCallEntry = type("E", (D._OneCallEntry,), {"run": remembering})
    pool = ThreadPoolExecutor(16)
    try:
        import torch
        cuda = torch.cuda.is_available()
    except ImportError:
        torch, cuda = None, False
    rng = np.random.default_rng(0)
    rows = []

    def torch_relu(x, dy):
        def p():
            if not cuda:
                return {}
            tx = lambda: torch.from_numpy(x).cuda()
            r = {"torch_total_us": med(lambda: (torch.ops.aten.threshold_backward(
                torch.from_numpy(dy).cuda(), torch.from_numpy(x).cuda(), 0).cpu().numpy()))}
            r["torch_upload_one_us"] = med(lambda: (tx(), torch.cuda.synchronize()))
            g = torch.from_numpy(x).cuda()
            r["torch_download_one_us"] = med(lambda: g.cpu().numpy())
            pin = torch.empty(x.shape, dtype=torch.float32, pin_memory=True)
            r["torch_download_pinned_us"] = med(lambda: pin.copy_(g))
            return r
        return p
    x = rng.standard_normal(1 << 20).astype(np.float32)
    dy = rng.standard_normal(1 << 20).astype(np.float32)
    rows.append(parts(dev, "ReLU grad 1 Mi float32",
                      lambda: pyvkgrad.activation_relu_grad(x, dy, device=dev), pool,
                      torch_relu(x, dy)))
    shape = (32, 64, 56, 56)
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    mean, var = x.mean(axis=(0, 2, 3), keepdims=True), x.var(axis=(0, 2, 3), keepdims=True)
    scale = np.ones_like(mean)
    rows.append(parts(dev, "BN training grad [32,64,56,56] float32",
                      lambda: pyvkgrad.batch_normalization_training_grad(
                          x, dy, mean, var, scale, 1e-5, device=dev), pool,
                      torch_relu(x.reshape(-1), dy.reshape(-1))))
    result["rows"] = rows
    result["zero_copy"] = [zero_copy(dev, n) for n in (1024, 1 << 20)]
    result["small"] = small_parts(dev)
    with open(os.path.join(args.out, "roundtrip_parts.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
