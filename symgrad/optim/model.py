"""The optimizers' per-element update rules, written as a symgrad model file.

``sg.optim`` compiles this file on first use: one fused kernel per rule reads a parameter, its gradient and
its state once and computes the new values in one pass (what PyTorch's ``fused=True`` optimizers hand-write;
derived here), where NumPy needs a dozen passes and temporaries. The rules are ``torch.optim.Adam``'s: L2
weight decay added to the gradient (skipped when it is 0, as PyTorch does: an infinite parameter stays
infinite, not NaN), the first moment by ``lerp``, ``eps`` added after the square root. The caller computes
the per-step constants in float64: ``1 - beta`` (in float32, 1 - 0.999 is off by 1e-5), the step size
``lr / (1 - beta1**step)`` and ``bias2_sqrt = sqrt(1 - beta2**step)``.
"""

import symgrad as sg

_HYPER = ("beta1_c", "beta2", "beta2_c", "eps", "weight_decay", "step_size", "bias2_sqrt")


def _moments(param, grad, exp_avg, exp_avg_sq, beta1_c, beta2, beta2_c, weight_decay):
    g = sg.where(sg.Eq(weight_decay, 0), grad, grad + weight_decay * param)
    return exp_avg + beta1_c * (g - exp_avg), beta2 * exp_avg_sq + beta2_c * g * g


@sg.function(uniform=_HYPER, nondiff=("param", "grad", "exp_avg", "exp_avg_sq") + _HYPER)
def adam(param, grad, exp_avg, exp_avg_sq, beta1_c, beta2, beta2_c, eps, weight_decay, step_size, bias2_sqrt):
    """One Adam step: (new param, new exp_avg, new exp_avg_sq); ``beta1_c = 1 - beta1``,
    ``beta2_c = 1 - beta2``."""
    m, v = _moments(param, grad, exp_avg, exp_avg_sq, beta1_c, beta2, beta2_c, weight_decay)
    return param - step_size * m / (sg.sqrt(v) / bias2_sqrt + eps), m, v


@sg.function(uniform=_HYPER, nondiff=("param", "grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq") + _HYPER)
def adam_amsgrad(
    param,
    grad,
    exp_avg,
    exp_avg_sq,
    max_exp_avg_sq,
    beta1_c,
    beta2,
    beta2_c,
    eps,
    weight_decay,
    step_size,
    bias2_sqrt,
):
    """One AMSGrad step: the denominator uses the running maximum of exp_avg_sq (also returned)."""
    m, v = _moments(param, grad, exp_avg, exp_avg_sq, beta1_c, beta2, beta2_c, weight_decay)
    v_max = sg.Max(max_exp_avg_sq, v)
    return param - step_size * m / (sg.sqrt(v_max) / bias2_sqrt + eps), m, v, v_max
