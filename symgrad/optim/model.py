"""The optimizers' per-element update rules, written as a symgrad model file.

``sg.optim`` compiles this file on first use: one fused kernel per rule reads a parameter, its gradient and
its state once and computes the new values in one pass (what PyTorch's ``fused=True`` optimizers hand-write;
derived here), where NumPy needs a dozen passes and temporaries. The rules are ``torch.optim``'s: L2 weight
decay added to the gradient (skipped when it is 0, as PyTorch does: an infinite parameter stays infinite, not
NaN), AdamW's decoupled decay as a factor ``decay = 1 - lr * weight_decay`` on the parameter (1 for Adam),
Adam's first moment by ``lerp``, ``eps`` added after the square root. The caller computes the per-step
constants in float64: ``1 - beta`` (in float32, 1 - 0.999 is off by 1e-5), the step size
``lr / (1 - beta1**step)`` and ``bias2_sqrt = sqrt(1 - beta2**step)``.
"""

import symgrad as sg

_HYPER = ("beta1_c", "beta2", "beta2_c", "eps", "weight_decay", "decay", "step_size", "bias2_sqrt")
_RMS_HYPER = ("alpha", "alpha_c", "eps", "weight_decay", "lr", "momentum", "centered")


def _l2(grad, param, weight_decay):
    return sg.where(sg.Eq(weight_decay, 0), grad, grad + weight_decay * param)


def _moments(param, grad, exp_avg, exp_avg_sq, beta1_c, beta2, beta2_c, weight_decay):
    g = _l2(grad, param, weight_decay)
    return exp_avg + beta1_c * (g - exp_avg), beta2 * exp_avg_sq + beta2_c * g * g


@sg.function(uniform=_HYPER, nondiff=("param", "grad", "exp_avg", "exp_avg_sq") + _HYPER)
def adam(
    param, grad, exp_avg, exp_avg_sq, beta1_c, beta2, beta2_c, eps, weight_decay, decay, step_size, bias2_sqrt
):
    """One Adam step: (new param, new exp_avg, new exp_avg_sq); ``beta1_c = 1 - beta1``,
    ``beta2_c = 1 - beta2``."""
    m, v = _moments(param, grad, exp_avg, exp_avg_sq, beta1_c, beta2, beta2_c, weight_decay)
    return param * decay - step_size * m / (sg.sqrt(v) / bias2_sqrt + eps), m, v


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
    decay,
    step_size,
    bias2_sqrt,
):
    """One AMSGrad step: the denominator uses the running maximum of exp_avg_sq (also returned)."""
    m, v = _moments(param, grad, exp_avg, exp_avg_sq, beta1_c, beta2, beta2_c, weight_decay)
    v_max = sg.Max(max_exp_avg_sq, v)
    return param * decay - step_size * m / (sg.sqrt(v_max) / bias2_sqrt + eps), m, v, v_max


@sg.function(uniform=_RMS_HYPER, nondiff=("param", "grad", "square_avg", "grad_avg", "buf") + _RMS_HYPER)
def rmsprop(
    param, grad, square_avg, grad_avg, buf, alpha, alpha_c, eps, weight_decay, lr, momentum, centered
):
    """One RMSprop step: (new param, square_avg, grad_avg, momentum buffer); ``alpha_c = 1 - alpha``.
    ``centered`` (0 or 1) subtracts the squared mean gradient; with ``momentum`` 0 the buffer is the step."""
    g = _l2(grad, param, weight_decay)
    v = square_avg * alpha + alpha_c * g * g
    mean = grad_avg + alpha_c * (g - grad_avg)
    avg = sg.where(sg.Eq(centered, 0), sg.sqrt(v), sg.sqrt(v - mean * mean)) + eps
    b = sg.where(sg.Eq(momentum, 0), g / avg, buf * momentum + g / avg)
    return param - lr * b, v, mean, b
