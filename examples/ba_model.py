"""ADBench bundle adjustment: the per-observation reprojection residual as one symbolic function.

One observation ties camera ``cam`` (11 numbers: Rodrigues rotation r (3) | centre C (3) | focal f |
principal point x0 (2) | radial distortion k1 k2) to a 3-D point ``X``, with weight ``w`` and observed
feature ``feat`` (2). Its residual block is

    reproj_err = w * (proj(cam, X) - feat)    (2 numbers, ADBench's code sign)
    w_err      = 1 - w**2

symgrad derives the 2 x 15 Jacobian block and ``examples/bundle_adjustment.py`` has the kernel write the
blocks straight into the values of ADBench's sparse Jacobian. Compile and inspect:

    symgrad show examples/ba_model.py ba_residual
    symgrad check examples/ba_model.py
"""

import symgrad as sg


def rodrigues_rotate(r, Y):
    """Rotate ``Y`` by the axis-angle vector ``r``; ADBench's guard on sum(r^2) != 0 (exactly)."""
    theta2 = r.dot(r)
    theta = sg.sqrt(theta2)  # 0 at r = 0: the untaken branch's inf/NaN never reaches value or gradient
    cos_t, sin_t = sg.cos(theta), sg.sin(theta)
    v = r / theta
    vxY = v.cross(Y)
    vY = v.dot(Y)
    small = Y + r.cross(Y)  # first-order rotation at theta = 0
    return [
        sg.where(sg.Ne(theta2, 0), Y[k] * cos_t + vxY[k] * sin_t + v[k] * vY * (1 - cos_t), small[k])
        for k in range(3)
    ]


def project(cam, X):
    r = cam[0:3, 0]
    C = cam[3:6, 0]
    f = cam[6]
    x0 = cam[7:9, 0]
    k1, k2 = cam[9], cam[10]
    Xc = rodrigues_rotate(r, X - C)
    u = [Xc[0] / Xc[2], Xc[1] / Xc[2]]
    s = u[0] ** 2 + u[1] ** 2
    distortion = 1 + k1 * s + k2 * s**2
    return [f * u[k] * distortion + x0[k] for k in range(2)]


@sg.function(nondiff=("feat",))
def ba_residual(cam: sg.Vector(11), X: sg.Vector(3), w, feat: sg.Vector(2)):
    """Weighted reprojection error of one observation (2 numbers). The observed feature is data: no
    gradient, so the Jacobian block is exactly J's 2 x 15 [camera | point | weight] nonzeros."""
    proj = project(cam, X)
    return [w * (proj[0] - feat[0]), w * (proj[1] - feat[1])]


@sg.function
def ba_weight_error(w):
    """ADBench's weight term 1 - w^2 (its derivative -2w fills the last p rows of J)."""
    return 1 - w**2
