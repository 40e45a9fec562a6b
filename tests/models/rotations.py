"""Small vector functions as users write them, for `symgrad show` (tests/test_show_readable.py): a quaternion
rotation and an LSTM cell, with the intermediate variables a reader would name."""

import symgrad as sg


@sg.function
def quat_rotate(q: sg.Vector(4), v: sg.Vector(3)):
    """Rotate ``v`` by the unit quaternion ``q = (w, x, y, z)``: v + 2 w (u x v) + 2 u x (u x v)."""
    w = q[0]
    u = q[1:4, 0]
    uv = u.cross(v)
    uuv = u.cross(uv)
    return [v[k] + 2 * (w * uv[k] + uuv[k]) for k in range(3)]


@sg.function
def lstm_cell(x: sg.Vector(2), h: sg.Vector(2), c: sg.Vector(2), W: sg.Matrix(8, 4), b: sg.Vector(8)):
    """One LSTM step: gates from [x; h], then the new cell and hidden state (2 units)."""
    xh = x.col_join(h)
    gates = W * xh + b
    i_gate = [sg.sigmoid(gates[k]) for k in range(0, 2)]
    f_gate = [sg.sigmoid(gates[k]) for k in range(2, 4)]
    g_cand = [sg.tanh(gates[k]) for k in range(4, 6)]
    o_gate = [sg.sigmoid(gates[k]) for k in range(6, 8)]
    c_new = [f_gate[k] * c[k] + i_gate[k] * g_cand[k] for k in range(2)]
    h_new = [o_gate[k] * sg.tanh(c_new[k]) for k in range(2)]
    return h_new, c_new


@sg.function
def scaled(r, theta):
    """Polar to Cartesian with the user's own numbers: r, x/2."""
    return r * sg.cos(theta) + r / 2, 1.0 * r * sg.sin(theta)
