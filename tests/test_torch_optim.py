"""pyvkgrad.torch.optim.Adam against torch.optim.Adam: 100 steps of examples/train_digits.py from
the same weights on the same batches (PyTorch's backward in both, so only the step differs).
DirectML's Adam adds epsilon before the bias correction, PyTorch after it (docs/torch.md), and
Adam's normalised steps carry rounding differences on: the losses stay within 1e-3 of
PyTorch's, the parameters with real gradients within 2e-3, and the test predictions are the
same but for near ties.
One step with the epsilon mapping matches PyTorch to float32 rounding
(tests/test_adam_optimizer.py)."""

import copy

import numpy as np
import pytest

from torch_support import require

torch = require("torch", "PyTorch is not installed")
require("sklearn", "scikit-learn is not installed: pip install scikit-learn (tools/test installs "
                   "it with torch)")

from test_torch_example import load_example  # noqa: E402


def test_adam_trains_digits_as_pytorch_does(device):
    import pyvkgrad.torch as vt
    from pyvkgrad.torch.optim import Adam

    example = load_example()
    data = example.load_data(0)
    torch.manual_seed(0)
    initial = example.build_model()
    vt.set_device(device)
    try:
        results, models = {}, {}
        for name, make in (("pytorch", lambda p: torch.optim.Adam(p, lr=1e-3)),
                           ("pyvkgrad", lambda p: Adam(p, lr=1e-3))):
            models[name] = copy.deepcopy(initial)
            results[name] = example.train(models[name], data, 100, optimizer=make)
    finally:
        vt.set_device(None)
    diffs = {n: float((a.detach() - b.detach()).abs().max()) for (n, a), b in
             zip(models["pytorch"].named_parameters(), models["pyvkgrad"].parameters())}
    # The convolutions' biases feed a BatchNorm, which removes them: their gradients are 0 up to
    # rounding noise, where sqrt(v') is near eps and eps's place decides the step.
    for name in ("0.bias", "4.bias"):
        del diffs[name]
    worst = max(diffs.values())
    assert worst <= 2e-3, f"parameters differ by {worst:.3g}"  # measured: 1.1e-3
    losses = [results[n][0] for n in ("pytorch", "pyvkgrad")]
    assert max(abs(a - b) for a, b in zip(*losses)) <= 1e-3  # measured: 4.8e-4
    # The test predictions: the same, but for test digits on which PyTorch's model is near a tie
    # (its top two logits within 0.05). After 100 steps the two models' logits differ by up to
    # about 0.08 (rounding differences carried on by Adam's normalised steps, within the
    # parameters' 2e-3 above), and which near ties flip depends on the CPU PyTorch runs on:
    # one digit, at a margin of 0.019, on an AMD EPYC (accuracy 0.958 against 0.956).
    x_test = data[1][0]
    with torch.no_grad():
        logits = {n: m.eval()(x_test) for n, m in models.items()}
    top2 = logits["pytorch"].topk(2).values
    flipped = logits["pytorch"].argmax(1) != logits["pyvkgrad"].argmax(1)
    margins = (top2[:, 0] - top2[:, 1])[flipped]
    assert flipped.sum() <= 2 and bool((margins < 0.05).all()), margins
    assert abs(results["pytorch"][1] - results["pyvkgrad"][1]) <= 2 / len(x_test)
    assert losses[1][-1] < losses[1][0] * 0.5, "the model learns"


def test_adam_checks_its_arguments():
    from pyvkgrad.torch.optim import Adam

    p = [torch.nn.Parameter(torch.zeros(3))]
    for kwargs in (dict(lr=-1.0), dict(eps=-1.0), dict(betas=(1.0, 0.999)),
                   dict(betas=(0.9, -0.1))):
        with pytest.raises(ValueError, match="Adam: invalid"):
            Adam(p, **kwargs)


def test_adam_keeps_moments_on_the_device_and_follows_changes(device):
    """Two steps match two of the ADAM_OPTIMIZER one-call function chained by hand, and a
    parameter changed between steps (or a new learning rate) is taken up."""
    import pyvkgrad
    import pyvkgrad.torch as vt
    from pyvkgrad.torch.optim import Adam

    rng = np.random.default_rng(5)
    x0 = rng.standard_normal(50).astype(np.float32)
    grads = [rng.standard_normal(50).astype(np.float32) for _ in range(3)]
    p = torch.nn.Parameter(torch.tensor(x0))
    vt.set_device(device)
    try:
        opt = Adam([p], lr=0.01)
        x, m, v = x0, np.zeros(50, np.float32), np.zeros(50, np.float32)
        for t, g in enumerate(grads, 1):
            if t == 3:
                with torch.no_grad():
                    p.add_(1.0)
                x = x + np.float32(1.0)
                opt.param_groups[0]["lr"] = 0.02
            p.grad = torch.tensor(g)
            opt.step()
            lr = 0.02 if t == 3 else 0.01
            x, m, v = pyvkgrad.adam_optimizer(x, m, v, g, t, lr, 0.9, 0.999, 1e-8,
                                              device=device)
            assert np.array_equal(p.detach().numpy(), x)
    finally:
        vt.set_device(None)


def _side_by_side(device, sizes, scenario, steps=5):
    """Ours and torch.optim.Adam from the same parameters through `scenario(t, name, opt,
    params)` (called after step t, t = 1 ..): each one's step counts after every step."""
    import pyvkgrad.torch as vt
    from pyvkgrad.torch.optim import Adam

    rng = np.random.default_rng(11)
    start = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    params = {name: [torch.nn.Parameter(torch.tensor(x)) for x in start]
              for name in ("ours", "torch")}
    vt.set_device(device)
    try:
        opts = dict(ours=Adam(params["ours"], lr=0.01),
                    torch=torch.optim.Adam(params["torch"], lr=0.01))
        counts = []
        for t in range(1, steps + 1):
            grads = [torch.tensor(rng.standard_normal(n).astype(np.float32)) for n in sizes]
            for name, opt in opts.items():
                for p, g in zip(params[name], grads):
                    p.grad = g.clone()
                opt.step()
                scenario(t, name, opt, params[name])
            counts.append({name: [float(opts[name].state[p]["step"]) for p in params[name]]
                           for name in opts})
            assert counts[-1]["ours"] == counts[-1]["torch"], (t, counts[-1])
        for a, b in zip(params["ours"], params["torch"]):  # (eps placed apart: close only)
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=1e-5)
        return counts[-1]["ours"]
    finally:
        vt.set_device(None)


def test_adam_counts_steps_in_place_as_torch_does(device):
    """state["step"] is one tensor per parameter that each step changes in place, as in
    torch.optim.Adam: a reference taken once keeps counting, one replaced by hand does not,
    a step set by hand (in place or anew) is where the next one counts from, and a step that
    is a view of a caller's tensor counts in it."""
    held, replaced, big = {}, {}, {}

    def scenario(t, name, opt, params):
        state = [opt.state[p] for p in params]
        if t == 1:
            held[name] = [s["step"] for s in state]
        if t == 3:  # by hand: the first in place, the second anew, the third anew, same value
            state[0]["step"].fill_(10.0)
            replaced[name] = state[1]["step"]
            state[1]["step"] = torch.tensor(20.0)
            state[2]["step"] = state[2]["step"].clone()
            big[name] = torch.zeros(2)
            big[name][1] = state[3]["step"]
            state[3]["step"] = big[name][1]

    assert _side_by_side(device, (3, 5, 7, 2), scenario) == [12.0, 22.0, 5.0, 5.0]
    for found in (held, replaced, big):
        assert str(found["ours"]) == str(found["torch"])
    assert [float(s) for s in held["ours"]] == [12.0, 3.0, 3.0, 3.0]
    assert float(replaced["ours"]) == 3.0 and float(big["ours"][1]) == 5.0


def test_adam_steps_under_inference_mode_and_float64_defaults(device):
    """A state dict loaded under torch.inference_mode (its step tensors would be inference
    tensors, which no step may change in place) and steps under a float64 default dtype
    (torch's Adam then counts in float64) count as torch's Adam does."""
    def load_in_inference_mode(t, name, opt, params):
        if t == 2:
            saved = opt.state_dict()
            with torch.inference_mode():
                opt.load_state_dict(saved)

    assert _side_by_side(device, (3, 4), load_in_inference_mode) == [5.0, 5.0]
    kinds = {}

    def dtypes(t, name, opt, params):
        kinds[name] = [opt.state[p]["step"].dtype for p in params]

    was = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        _side_by_side(device, (3, 4), dtypes, steps=2)
    finally:
        torch.set_default_dtype(was)
    assert kinds["ours"] == kinds["torch"] == [torch.float64] * 2


def _steps(opt, p, grads):
    for g in grads:
        p.grad = g.clone()
        opt.step()


def test_adam_state_dict_saves_loads_and_interchanges_with_torch(device):
    """state_dict() is torch.optim.Adam's form (step, exp_avg, exp_avg_sq: the device's
    moments read back), saves with torch.save, and loads into this Adam or PyTorch's: a resumed
    run gives the uninterrupted run's bits, either optimizer resumes the other's checkpoint
    within float32 rounding, and two optimizers loaded from one checkpoint (or the one that
    saved it) never share a moment or a step."""
    import io

    import pyvkgrad.torch as vt
    from pyvkgrad.torch.optim import Adam

    torch.manual_seed(3)
    grads = [torch.randn(4, 5) for _ in range(6)]
    start = torch.randn(4, 5)
    vt.set_device(device)
    try:
        whole = torch.nn.Parameter(start.clone())
        _steps(Adam([whole], lr=0.1), whole, grads)
        p = torch.nn.Parameter(start.clone())
        saver = Adam([p], lr=0.1)
        _steps(saver, p, grads[:3])
        buffer = io.BytesIO()
        torch.save(saver.state_dict(), buffer)
        buffer.seek(0)
        saved = torch.load(buffer)
        assert set(saved["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
        assert float(saved["state"][0]["step"]) == 3
        resumed = {}
        for name, make in (("bridge", Adam), ("bridge2", Adam), ("torch", torch.optim.Adam)):
            q = torch.nn.Parameter(p.detach().clone())
            opt = make([q], lr=0.1)
            opt.load_state_dict(saved)
            resumed[name] = (opt, q)
        for opt, q in resumed.values():
            _steps(opt, q, grads[3:])
        _steps(saver, p, grads[3:])
        for name in ("bridge", "bridge2"):
            assert torch.equal(resumed[name][1], whole), name
        assert torch.equal(p, whole)
        torch.testing.assert_close(resumed["torch"][1], whole, rtol=1e-5, atol=1e-6)
        # PyTorch's checkpoint into the bridge.
        t = torch.nn.Parameter(start.clone())
        torch_opt = torch.optim.Adam([t], lr=0.1)
        _steps(torch_opt, t, grads[:3])
        b = torch.nn.Parameter(t.detach().clone())
        bridge = Adam([b], lr=0.1)
        bridge.load_state_dict(torch_opt.state_dict())
        _steps(torch_opt, t, grads[3:])
        _steps(bridge, b, grads[3:])
        torch.testing.assert_close(b, t, rtol=1e-5, atol=1e-6)
        assert float(bridge.state_dict()["state"][0]["step"]) == 6
    finally:
        vt.set_device(None)


def test_adam_refuses_torch_only_options_before_any_work(device):
    """weight_decay, amsgrad, maximize and PyTorch's other options: accepted at their defaults,
    refused at any other value in the constructor, a parameter group or a loaded state dict,
    before the step touches a parameter or the step count."""
    import pyvkgrad.torch as vt
    from pyvkgrad.torch.optim import Adam

    p = torch.nn.Parameter(torch.ones(3))
    Adam([p], weight_decay=0, amsgrad=False, maximize=False, foreach=False, fused=None,
         capturable=False, differentiable=False)
    for option in (dict(weight_decay=0.1), dict(amsgrad=True), dict(maximize=True),
                   dict(foreach=True), dict(fused=True), dict(capturable=True)):
        name = next(iter(option))
        with pytest.raises(ValueError, match=f"Adam: {name}="):
            Adam([p], **option)
        vt.set_device(device)
        try:
            opt = Adam([{"params": [p], **option}])
            p.grad = torch.ones(3)
            with pytest.raises(ValueError, match=f"Adam: {name}="):
                opt.step()
            assert torch.equal(p, torch.ones(3)) and "step" not in opt.state[p]
            state = torch.optim.Adam([p]).state_dict()
            state["param_groups"][0].update(option)
            with pytest.raises(ValueError, match=f"Adam: {name}="):
                Adam([p]).load_state_dict(state)
        finally:
            vt.set_device(None)
    with pytest.raises(TypeError, match="Adam: parameters must be float32 or float16"):
        q = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
        q.grad = torch.ones(3, dtype=torch.float64)
        Adam([q]).step()


def test_adam_schedules_shapes_and_tensor_hyperparameters(device):
    """A learning rate and a Beta1 that change every step (OneCycleLR, which cycles the
    momentum) compile no new pipeline and match PyTorch's schedule; 0-d and empty parameters
    and tensor lr and betas step as torch.optim.Adam does (within float32 rounding)."""
    import pyvkgrad.torch as vt
    from pyvkgrad.torch.optim import Adam

    torch.manual_seed(4)
    grads = [torch.randn(6) for _ in range(8)]
    vt.set_device(device)
    try:
        params = {n: torch.nn.Parameter(torch.linspace(-1, 1, 6)) for n in ("torch", "bridge")}
        opts = dict(torch=torch.optim.Adam([params["torch"]], lr=0.05),
                    bridge=Adam([params["bridge"]], lr=0.05))
        scheds = {n: torch.optim.lr_scheduler.OneCycleLR(o, 0.05, total_steps=len(grads) + 1)
                  for n, o in opts.items()}
        runtime = device.runtime()
        for i, g in enumerate(grads):
            for n in opts:
                params[n].grad = g.clone()
                opts[n].step()
                scheds[n].step()
            if i == 0:
                made = runtime.pipelines_made
        assert runtime.pipelines_made == made
        torch.testing.assert_close(params["bridge"], params["torch"], rtol=1e-5, atol=1e-6)
        for shape in ((), (0, 3), (2, 1, 3)):
            ps = [torch.nn.Parameter(torch.full(shape, 0.5)) for _ in range(2)]
            pair = (torch.optim.Adam([ps[0]], lr=torch.tensor(0.01),
                                     betas=(torch.tensor(0.8), torch.tensor(0.99))),
                    Adam([ps[1]], lr=torch.tensor(0.01),
                         betas=(torch.tensor(0.8), torch.tensor(0.99))))
            for step in range(3):
                for q, opt in zip(ps, pair):
                    q.grad = torch.full(shape, 0.25 * (step + 1))
                    opt.step()
            torch.testing.assert_close(ps[1], ps[0], rtol=1e-5, atol=1e-6)
            assert ps[1].shape == shape
            assert float(pair[1].state_dict()["state"][0]["step"]) == 3
    finally:
        vt.set_device(None)


def test_adam_parameters_of_every_length_share_one_pipeline(device):
    """70 parameters of 70 lengths under OneCycleLR: the packed kernel is not specialised on
    a length, so every parameter's operator shares one pipeline per data type, and no step
    after the first compiles one (each length had its own, and past the runtime's 64 unused
    pipelines kept, every step compiled 70)."""
    import pyvkgrad.torch as vt
    from pyvkgrad.torch.optim import Adam

    torch.manual_seed(7)
    vt.set_device(device)
    try:
        params = [torch.nn.Parameter(torch.randn(n + 1)) for n in range(70)]
        opt = Adam(params, lr=1e-3)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, 0.01, total_steps=10)
        runtime = device.runtime()
        made = []
        for _ in range(3):
            for p in params:
                p.grad = torch.randn_like(p)
            before = runtime.pipelines_made
            opt.step()
            sched.step()
            made.append(runtime.pipelines_made - before)
        assert made[0] <= 1 and made[1:] == [0, 0], made
    finally:
        vt.set_device(None)


def test_adam_resets_removals_copies_and_all_or_nothing_steps(device):
    """A reset state (opt.state.clear()) restarts from zero moments as torch's Adam does; a
    group removed with its state leaves state_dict() working; a step refused for a later
    group's LearningRate (NaN) or a resized parameter changes no parameter and no step; a
    deep copy of the optimizer steps on its own device tensors."""
    import pyvkgrad.torch as vt
    from pyvkgrad.torch.optim import Adam

    torch.manual_seed(6)
    grads = [torch.randn(3) for _ in range(5)]
    vt.set_device(device)
    try:
        ps = [torch.nn.Parameter(torch.ones(3)) for _ in range(2)]
        opts = (torch.optim.Adam([ps[0]], lr=0.1), Adam([ps[1]], lr=0.1))
        for i, g in enumerate(grads):
            if i == 3:
                for opt in opts:
                    opt.state.clear()
            for q, opt in zip(ps, opts):
                q.grad = g.clone()
                opt.step()
        torch.testing.assert_close(ps[1], ps[0], rtol=1e-5, atol=1e-6)
        p, q = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))
        opt = Adam([p], lr=0.1)
        opt.add_param_group({"params": [q], "lr": 0.1})
        p.grad, q.grad = torch.ones(3), torch.ones(2)
        opt.step()
        del opt.param_groups[1]
        opt.state.pop(q)
        assert list(opt.state_dict()["state"]) == [0]
        copy_ = copy.deepcopy(opt)
        copy_.param_groups[0]["params"][0].grad = torch.ones(3)
        copy_.step()
        opt.step()
        assert torch.equal(copy_.param_groups[0]["params"][0], p)
        r = torch.nn.Parameter(torch.ones(2))
        r.grad = torch.ones(2)
        opt.add_param_group({"params": [r], "lr": float("nan")})
        before = p.detach().clone()
        with pytest.raises(ValueError, match="ADAM_OPTIMIZER: LearningRate must be finite"):
            opt.step()
        assert torch.equal(p, before) and float(opt.state[p]["step"]) == 2
        opt.param_groups[1]["lr"] = 0.1
        p.data = torch.ones(5)
        p.grad = torch.ones(5)
        with pytest.raises(RuntimeError, match="moments no longer fit"):
            opt.step()
        assert torch.equal(r, torch.ones(2))
    finally:
        vt.set_device(None)


def test_adam_tells_signed_zero_scalars_apart(device):
    """A schedule from Beta1 = 0 to -0 (both valid) steps with -0's bits: where the gradient is
    -0, Beta1 m is -0 or +0 and the first moment keeps that sign. The packs compare scalars by
    their float32 words, as the kernel sees them, not by ==."""
    import pyvkgrad
    import pyvkgrad.torch as vt
    from pyvkgrad.torch.optim import Adam

    x = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
    g = np.array([-0.0, 0.25, -0.0, 0.0], np.float32)
    p = torch.nn.Parameter(torch.tensor(x))
    vt.set_device(device)
    try:
        opt = Adam([p], lr=0.01, betas=(0.0, 0.999))
        m, v = np.zeros(4, np.float32), np.zeros(4, np.float32)
        for t, beta1 in enumerate((0.0, -0.0, 0.0, -0.0), 1):
            opt.param_groups[0]["betas"] = (beta1, 0.999)
            p.grad = torch.tensor(g)
            opt.step()
            x, m, v = pyvkgrad.adam_optimizer(x, m, v, g, t, 0.01, beta1, 0.999, 1e-8,
                                              device=device)
            assert np.array_equal(p.detach().numpy().view(np.uint32), x.view(np.uint32))
            moment = opt.state_dict()["state"][0]["exp_avg"].numpy()
            assert np.array_equal(moment.view(np.uint32), m.view(np.uint32)), (t, moment, m)
    finally:
        vt.set_device(None)


def test_adam_refuses_what_would_step_wrongly(device, monkeypatch):
    """Moments that no longer fit a parameter (a state dict loaded after two parameters
    swapped sizes) and an expanded parameter are refused before any parameter changes, and a
    step after the device holding the moments was closed raises ClosedError: none may step
    from the wrong moments without a word (torch.optim.Adam raises for the first two too). A
    parameter larger than a device buffer is refused before any other steps."""
    import pyvkgrad
    import pyvkgrad.torch as vt
    from pyvkgrad.torch.optim import Adam

    vt.set_device(device)
    try:
        p, q = torch.nn.Parameter(torch.ones(4)), torch.nn.Parameter(torch.ones(6))
        opt = Adam([p, q], lr=0.1)
        p.grad, q.grad = torch.ones(4), torch.ones(6)
        opt.step()
        saved = opt.state_dict()
        p.data, q.data = torch.ones(6), torch.ones(4)
        opt.load_state_dict(saved)
        p.grad, q.grad = torch.ones(6), torch.ones(4)
        with pytest.raises(RuntimeError, match="moments no longer fit"):
            opt.step()
        assert torch.equal(p, torch.ones(6)) and torch.equal(q, torch.ones(4))
        r = torch.nn.Parameter(torch.ones(3, 1).expand(3, 4))
        r.grad = torch.ones(3, 4)
        with pytest.raises(ValueError, match="expanded view"):
            Adam([r]).step()
        with monkeypatch.context() as env:  # a parameter larger than a device buffer
            env.setenv("PYVKGRAD_MAX_BUFFER_BYTES", "4096")
            small, big = torch.nn.Parameter(torch.ones(10)), torch.nn.Parameter(torch.ones(1025))
            small.grad, big.grad = torch.ones(10), torch.ones(1025)
            with pytest.raises(ValueError, match="InputParametersTensor.Sizes"):
                Adam([small, big]).step()
            assert torch.equal(small, torch.ones(10))
            whole = torch.nn.Parameter(torch.ones(1024))  # exactly a buffer: it steps
            whole.grad = torch.ones(1024)
            Adam([whole]).step()
            assert not torch.equal(whole, torch.ones(1024))
        # A gradient left in a parameter's old shape (p.data reshaped after backward), in a
        # second group: refused before the first group steps.
        a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2, 3))
        opt = Adam([a], lr=0.1)
        opt.add_param_group({"params": [b], "lr": 0.1})
        a.grad, b.grad = torch.ones(3), torch.ones(2, 3)
        b.data = b.data.reshape(3, 2)
        with pytest.raises(RuntimeError, match="a gradient of shape"):
            opt.step()
        assert torch.equal(a, torch.ones(3)) and not opt.state[a]
        s = torch.nn.Parameter(torch.ones(5))
        opt = Adam([s], lr=0.1)
        s.grad = torch.ones(5)
        opt.step()
        device.close()  # (new objects open it again)
        s.grad = torch.ones(5)
        with pytest.raises(pyvkgrad.ClosedError):
            opt.step()
        assert float(opt.state[s]["step"]) == 1
    finally:
        vt.set_device(None)


def test_adam_state_edits_shared_memory_and_gradient_dtypes(device):
    """Found by a probe of unusual parameters: moments changed in the state after
    `state_dict()` read them back were ignored (the pack kept its own); two parameters over
    one memory lost one update a step (the pack wrote each back whole); a gradient of another
    dtype, set through `p.grad.data`, was cast. Now the edits are stepped from, as torch's Adam
    steps from them; parameters that share memory are refused before any change (interleaved
    views that share none step as torch's); and the gradient's dtype is checked."""
    import pyvkgrad.torch as vt
    from pyvkgrad.torch.optim import Adam

    vt.set_device(device)
    try:
        ours_p, theirs_p = (torch.nn.Parameter(torch.linspace(-1, 1, 6)) for _ in range(2))
        ours, theirs = Adam([ours_p], lr=0.1), torch.optim.Adam([theirs_p], lr=0.1)
        for step in range(4):
            for p, opt in ((ours_p, ours), (theirs_p, theirs)):
                p.grad = torch.full((6,), 0.5 - step)
                if step == 2:
                    opt.state_dict()  # ours reads its moments back into the state here
                    opt.state[p]["exp_avg"].zero_()
                    opt.state[p]["exp_avg_sq"] = torch.full((6,), 4.0)
                opt.step()
        torch.testing.assert_close(ours_p, theirs_p, rtol=1e-5, atol=1e-6)

        base = torch.zeros(12)
        for first, second in ((base[0:8], base[4:12]), (base, base.view(3, 4))):
            a, b = torch.nn.Parameter(first), torch.nn.Parameter(second)
            a.grad, b.grad = torch.ones_like(a), torch.ones_like(b)
            with pytest.raises(ValueError, match="share memory"):
                Adam([a, b], lr=0.1).step()
            assert torch.equal(base, torch.zeros(12))  # before any change
        even, odd = torch.nn.Parameter(base[0::2]), torch.nn.Parameter(base[1::2])
        even.grad, odd.grad = torch.ones(6), -torch.ones(6)
        Adam([even, odd], lr=0.1).step()
        torch.testing.assert_close(base, torch.tensor([-0.1, 0.1] * 6))
        # An overlap between spans that are not neighbours once sorted (x[1:5:2] between
        # them); an empty parameter of the refused step counts no step.
        x = torch.zeros(100)
        views = [torch.nn.Parameter(v) for v in (x[0::2], x[1:5:2], x[30:40])]
        empty = torch.nn.Parameter(torch.zeros(0))
        for v in views + [empty]:
            v.grad = torch.ones_like(v)
        opt = Adam(views + [empty], lr=0.1)
        with pytest.raises(ValueError, match="parameters 0 and 2 of a step share memory"):
            opt.step()
        assert torch.equal(x, torch.zeros(100)) and not opt.state[empty]
        # Tied after a step (one parameter re-pointed at the other's memory): refused too.
        first, second = torch.nn.Parameter(torch.zeros(4)), torch.nn.Parameter(torch.zeros(4))
        opt = Adam([first, second], lr=0.1)
        for p in (first, second):
            p.grad = torch.ones(4)
        opt.step()
        second.data = first.data
        with pytest.raises(ValueError, match="share memory"):
            opt.step()

        p = torch.nn.Parameter(torch.ones(3))
        p.grad = torch.ones(3)
        p.grad.data = torch.ones(3, dtype=torch.float64)
        with pytest.raises(TypeError, match="float64 gradient for a torch.float32 parameter"):
            Adam([p]).step()
    finally:
        vt.set_device(None)


def test_adam_step_benchmark_runs(tmp_path):
    """benchmarks/adam_step.py (issue 30's figures: the bridge's whole Adam step beside
    PyTorch's CPU Adams) runs, small, and reports every case."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "adam_step.py"
    res = subprocess.run([sys.executable, str(script), "--quick", "--sets", "digits",
                          "--repeat", "2", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    row = json.loads((tmp_path / "adam_step.json").read_text())["rows"][0]
    assert row["set"] == "digits" and row["tensors"] == 10
    assert {"pyvkgrad", "pyvkgrad+onecycle", "torch cpu", "torch cpu foreach",
            "torch cpu fused"} <= set(row["ms"])
    assert all(ms > 0 for ms in row["ms"].values()) and row["x_torch_cpu"] > 0
