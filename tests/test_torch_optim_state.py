"""pyvkgrad.torch.optim.Adam over any sequence of steps, against a model.

Adam keeps parameters in packs (pyvkgrad/torch/_adam_pack.py): those of one group, data type
and step count, end to end in one set of device tensors. A pack is rebuilt when its members
change: a parameter without a gradient, a reset state, a loaded state dict, a new group. A
hypothesis state machine drives random sequences of those and of steps, learning-rate and beta
changes, parameters changed by hand and state_dict() reads. The model steps each parameter on
its own with the ADAM_OPTIMIZER one-call function, on the same device: every parameter and
every moment that state_dict() gives must equal the model's, bit for bit (Adam works element
by element, so no pack may change a bit).
"""

import collections
import copy

import numpy as np
import pytest

from torch_support import require

torch = require("torch", "PyTorch is not installed")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import settings, strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule  # noqa: E402

import pyvkgrad  # noqa: E402

# (shape, dtype, group): parameters of two data types in group 0, and a second group; lengths
# 1, a prime, 257 and a 0-d one.
PARAMS = (((3,), torch.float32, 0), ((257,), torch.float32, 0), ((), torch.float32, 0),
          ((2, 7), torch.float16, 0), ((5,), torch.float32, 1), ((13,), torch.float16, 1))
NUMPY = {torch.float32: np.float32, torch.float16: np.float16}


def same_bits(a, b):
    """Bit for bit (signed zeros and NaN payloads too)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    words = {2: np.uint16, 4: np.uint32}[a.itemsize]
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(words),
                                                                        b.view(words))


class AdamStateMachine(RuleBasedStateMachine):
    device = None
    done: "collections.Counter[str]" = collections.Counter()

    @initialize(seed=st.integers(0, 2 ** 16))
    def start(self, seed):
        from pyvkgrad.torch.optim import Adam

        self.rng = np.random.default_rng(seed)
        self.params = [torch.nn.Parameter(torch.tensor(
            self.rng.standard_normal(shape).astype(NUMPY[dtype]))) for shape, dtype, _ in PARAMS]
        groups = [[p for p, (_, _, g) in zip(self.params, PARAMS) if g == i] for i in (0, 1)]
        self.opt = Adam(groups[0], lr=0.01)
        self.opt.add_param_group({"params": groups[1], "lr": 0.02, "betas": (0.8, 0.99)})
        # The model: per parameter its moments and step (0: no state), as numpy arrays.
        self.model = [dict(m=np.zeros(p.shape, NUMPY[p.dtype]),
                           v=np.zeros(p.shape, NUMPY[p.dtype]), t=0) for p in self.params]
        self.saved = None

    def _group(self, i):
        return self.opt.param_groups[PARAMS[i][2]]

    @rule(mask=st.integers(0, 2 ** len(PARAMS) - 1))
    def step(self, mask):
        """A step with gradients on the parameters `mask` chooses (the others have none)."""
        which = [bool(mask >> i & 1) for i in range(len(PARAMS))]
        for p, chosen in zip(self.params, which):
            # A fifth of the elements signed zeros: where the Betas are 0 or -0, their signs
            # reach the moments.
            g = self.rng.standard_normal(p.shape)
            g = np.where(self.rng.random(p.shape) < 0.2, np.copysign(0.0, g), g)
            p.grad = torch.tensor(g.astype(NUMPY[p.dtype])) if chosen else None
        expected = []
        for i, (p, model) in enumerate(zip(self.params, self.model)):
            if p.grad is None:
                expected.append(p.detach().numpy().copy())
                continue
            group = self._group(i)
            t = model["t"] + 1
            x, m, v = pyvkgrad.adam_optimizer(
                p.detach().numpy().reshape(-1), model["m"].reshape(-1), model["v"].reshape(-1),
                p.grad.numpy().reshape(-1), t, float(group["lr"]), *map(float, group["betas"]),
                float(group["eps"]), device=self.device)
            model.update(m=m, v=v, t=t)
            expected.append(x.reshape(p.shape))
        self.opt.step()
        for p, x in zip(self.params, expected):
            assert same_bits(p.detach().numpy(), x)
        self.done["step"] += 1
        self.done["parameters stepped"] += sum(which)

    @rule()
    def step_every(self):
        """A step with a gradient on every parameter (the usual step; a second rule, so that
        steps make up more of each sequence)."""
        self.step(2 ** len(PARAMS) - 1)

    @rule(group=st.sampled_from([0, 1]), lr=st.sampled_from([0.001, 0.01, 0.05]),
          beta1=st.sampled_from([0.5, 0.9, 0.0, -0.0]))
    def hyperparameters(self, group, lr, beta1):
        self.opt.param_groups[group]["lr"] = lr
        self.opt.param_groups[group]["betas"] = (beta1, self.opt.param_groups[group]["betas"][1])
        self.done["hyperparameters"] += 1

    @rule(i=st.integers(0, len(PARAMS) - 1))
    def change_by_hand(self, i):
        with torch.no_grad():
            self.params[i].mul_(0.5)
        self.done["changed by hand"] += 1

    @rule(i=st.integers(0, len(PARAMS) - 1))
    def reshape(self, i):
        """The parameter reshaped in place (p.data: the same elements, another shape): its
        moments follow it element by element."""
        p = self.params[i]
        p.data = p.data.reshape((1, p.numel()) if p.dim() != 2 or p.shape[0] != 1
                                else (p.numel(),))
        self.done["reshaped"] += 1

    @rule(i=st.integers(0, len(PARAMS) - 1), t=st.sampled_from([1, 7, 2 ** 20]),
          in_place=st.booleans())
    def set_step(self, i, t, in_place):
        """A parameter's step count set by hand: its state's step tensor changed in place
        (packs count their members' steps in views of one tensor), or a new one."""
        state = self.opt.state.get(self.params[i])
        if not state or "step" not in state:
            return
        if in_place:
            state["step"].fill_(float(t))
        else:
            state["step"] = torch.tensor(float(t))
        self.model[i]["t"] = t
        self.done["step set"] += 1

    @rule(i=st.one_of(st.none(), st.integers(0, len(PARAMS) - 1)))
    def reset(self, i):
        """opt.state.clear() (i None) or one parameter's state dropped: zero moments again."""
        for j, p in enumerate(self.params):
            if i is None or i == j:
                self.opt.state.pop(p, None)
                self.model[j].update(m=np.zeros_like(self.model[j]["m"]),
                                     v=np.zeros_like(self.model[j]["v"]), t=0)
        self.done["reset"] += 1

    @rule()
    def state_dict(self):
        """state_dict() gives the model's steps and moments; kept for a later load."""
        sd = self.opt.state_dict()
        for j, (p, model) in enumerate(zip(self.params, self.model)):
            state = sd["state"].get(j)
            if model["t"] == 0:
                assert state is None or "step" not in state
                continue
            assert float(state["step"]) == model["t"]
            for k, name in (("m", "exp_avg"), ("v", "exp_avg_sq")):
                assert same_bits(state[name].numpy().reshape(-1), model[k].reshape(-1)), name
        self.saved = (sd, copy.deepcopy(self.model))
        self.done["state_dict"] += 1

    @rule()
    def load(self):
        """load_state_dict of the last state_dict() (the parameters stay as they are now)."""
        if self.saved is None:
            return
        sd, model = self.saved
        self.opt.load_state_dict(sd)
        self.model = copy.deepcopy(model)
        self.done["load"] += 1


def run_machine(device, derandomize):
    AdamStateMachine.device = device
    AdamStateMachine.TestCase.settings = settings(
        max_examples=30, stateful_step_count=25, deadline=None, derandomize=derandomize,
        suppress_health_check=list(hypothesis.HealthCheck))
    AdamStateMachine.done.clear()
    import pyvkgrad.torch as vt

    vt.set_device(device)
    try:
        AdamStateMachine.TestCase().runTest()
    finally:
        vt.set_device(None)
    print(dict(AdamStateMachine.done))
    return AdamStateMachine.done


@pytest.mark.parametrize("mapped", [True, False], ids=["mapped", "staged"])
def test_adam_state_machine(device, mapped):
    """The same sequences everywhere (derandomized); a floor on what they did. Packs put x and
    g in mapped memory where that is device memory, else step x in place through staging:
    both ways on every device (the runtime told that its mapped memory is not device memory)."""
    runtime = device.runtime()
    if mapped and not runtime.mapped_device_local:
        pytest.skip("this device's mapped memory is not device memory")
    was = runtime.mapped_device_local
    runtime._mapped_device_local = mapped
    try:
        done = run_machine(device, derandomize=True)
    finally:
        runtime._mapped_device_local = was
    for what, least in (("step", 80), ("parameters stepped", 300), ("reset", 5),
                        ("state_dict", 10), ("load", 5), ("hyperparameters", 10),
                        ("changed by hand", 10), ("reshaped", 5), ("step set", 5)):
        assert done[what] >= least, f"only {done[what]} {what}: {dict(done)}"
