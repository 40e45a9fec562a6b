"""The optimizers' per-element update rules, written as a symgrad model file.

``sg.optim`` compiles this file on first use: one fused kernel per rule reads a parameter, its gradient and
its state once and writes the new values in one pass (PyTorch's ``fused=True`` optimizers, derived instead
of hand-written), where NumPy needs a dozen passes and temporaries. The rules are those of
``torch.optim.Adam``: L2 weight decay added to the gradient, bias-corrected moments, ``eps`` added after the
square root; ``bias1 = 1 - beta1**step`` and ``bias2_sqrt = sqrt(1 - beta2**step)`` come from the caller.
"""
import symgrad as sg

_HYPER = ("lr", "beta1", "beta2", "eps", "weight_decay", "bias1", "bias2_sqrt")


def _moments(param, grad, exp_avg, exp_avg_sq, beta1, beta2, weight_decay):
    g = grad + weight_decay * param
    return beta1 * exp_avg + (1 - beta1) * g, beta2 * exp_avg_sq + (1 - beta2) * g * g


@sg.function(uniform=_HYPER, nondiff=("param", "grad", "exp_avg", "exp_avg_sq") + _HYPER)
def adam(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay, bias1, bias2_sqrt):
    """One Adam step: (new param, new exp_avg, new exp_avg_sq)."""
    m, v = _moments(param, grad, exp_avg, exp_avg_sq, beta1, beta2, weight_decay)
    return param - (lr / bias1) * m / (sg.sqrt(v) / bias2_sqrt + eps), m, v


@sg.function(uniform=_HYPER, nondiff=("param", "grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq") + _HYPER)
def adam_amsgrad(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, beta1, beta2, eps, weight_decay, bias1,
                 bias2_sqrt):
    """One AMSGrad step: the denominator uses the running maximum of exp_avg_sq (also returned)."""
    m, v = _moments(param, grad, exp_avg, exp_avg_sq, beta1, beta2, weight_decay)
    v_max = sg.Max(max_exp_avg_sq, v)
    return param - (lr / bias1) * m / (sg.sqrt(v_max) / bias2_sqrt + eps), m, v, v_max
