"""Patches for `tim-report bisect --candidate-patch examples/bisect_patches.py:NAME`: each takes the loaded model and
changes it in place, as a kernel library's patch does. One only rounds differently (a correct kernel); the others
plant a bug in one layer, for the example (examples/bisect_planted_bug.py) and the tests."""

from __future__ import annotations

import types


def rmsnorm_without_upcast(model) -> None:
    """Every RMSNorm computed in the model's own dtype, without the fp32 upcast: a correct kernel that rounds
    differently (bisect must call it noise)."""
    import torch

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))

    for m in model.modules():
        if type(m).__name__.endswith("RMSNorm"):
            m.forward = types.MethodType(forward, m)


def eps_in_layer_3(model) -> None:
    """Layer 3's input norm with eps 1e-3 instead of the config's (a wrong eps; 1e-6 vs 1e-5 is visible in fp32)."""
    model.model.layers[3].input_layernorm.variance_epsilon = 1e-3


def eps_1e5_in_layer_3(model) -> None:
    """Layer 3's input norm with eps 1e-5 instead of 1e-6: below bf16's floor, far above fp32's."""
    model.model.layers[3].input_layernorm.variance_epsilon = 1e-5


def eps_1e6_in_layer_3(model) -> None:
    """Layer 3's input norm with eps 1e-6 instead of 1e-5 (SmolLM2's): below bf16's floor, far above fp32's."""
    model.model.layers[3].input_layernorm.variance_epsilon = 1e-6


def gelu_in_layer_2(model) -> None:
    """Layer 2's MLP with GELU instead of SiLU (an activation swapped by a fused kernel)."""
    import torch

    model.model.layers[2].mlp.act_fn = torch.nn.GELU()


def no_scaling_in_layer_4(model) -> None:
    """Layer 4's attention without its 1/√d scaling."""
    model.model.layers[4].self_attn.scaling = 1.0


def router_in_layer_3(model) -> None:
    """Layer 3's router weights perturbed (a mixture of experts): tokens go to other experts."""
    import torch

    gate = model.model.layers[3].mlp.gate
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)
        noise = torch.randn(gate.weight.shape, generator=gen) * 0.02  # drawn on the CPU: the same on every device
        gate.weight.add_(noise.to(gate.weight.device, gate.weight.dtype))


def eps_in_the_rmsnorm_class(model) -> None:
    """A patch of the class, as some kernel libraries do (every model of that class changes, loaded or not): every
    RMSNorm with eps 1e-3. bisect undoes it around the reference and the floor, so it is found in layer 0."""
    import torch

    cls = type(model.model.layers[0].input_layernorm)

    def forward(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-3)
        return self.weight * h.to(x.dtype)

    cls.forward = forward


# By name, as `--candidate-patch examples/bisect_patches.py:NAME` and the tests find them.
PATCHES = {f.__name__: f for f in (rmsnorm_without_upcast, eps_in_layer_3, eps_1e5_in_layer_3, eps_1e6_in_layer_3,
                                   gelu_in_layer_2, no_scaling_in_layer_4, router_in_layer_3, eps_in_the_rmsnorm_class)}
