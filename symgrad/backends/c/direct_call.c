/* symgrad's direct kernel call (see symgrad/backends/c/direct.py, which defines SG_MAX_ARRAYS and SG_MODULE) */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define SG_STR2(x) #x
#define SG_STR(x) SG_STR2(x)
#define SG_CAT2(a, b) a##b
#define SG_CAT(a, b) SG_CAT2(a, b)

/* a kernel's pointer-array entry (emitters/c/module.py): void <kernel>__<program>_<dtype>__ptrs(n, p) */
typedef void (*sg_entry)(int64_t, void *const *);

/* call(address, n, n_inputs, itemsize, *arrays): the entry at address, with n and the arrays' data */
static PyObject *sg_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer views[SG_MAX_ARRAYS];
    void *p[SG_MAX_ARRAYS];
    (void)self;
    if (nargs < 5 || nargs - 4 > SG_MAX_ARRAYS) {
        PyErr_Format(PyExc_TypeError, "call() takes an address, n, n_inputs, itemsize and 1 to %d arrays",
                     SG_MAX_ARRAYS);
        return NULL;
    }
    void *fn = PyLong_AsVoidPtr(args[0]);
    if (fn == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "call(): null kernel address");
        return NULL;
    }
    const long long n = PyLong_AsLongLong(args[1]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    const Py_ssize_t n_in = PyLong_AsSsize_t(args[2]);
    if (n_in == -1 && PyErr_Occurred())
        return NULL;
    const Py_ssize_t itemsize = PyLong_AsSsize_t(args[3]);
    if (itemsize == -1 && PyErr_Occurred())
        return NULL;
    if (itemsize <= 0) {
        PyErr_SetString(PyExc_ValueError, "call(): itemsize must be positive");
        return NULL;
    }
    const Py_ssize_t k = nargs - 4;
    Py_ssize_t got = 0;
    for (; got < k; ++got) {
        /* PyBUF_SIMPLE: NumPy refuses an array that is not C-contiguous */
        const int flags = got < n_in ? PyBUF_SIMPLE : PyBUF_WRITABLE;
        if (PyObject_GetBuffer(args[4 + got], &views[got], flags) < 0)
            break;
        p[got] = views[got].buf;
        if ((uintptr_t)p[got] % (uintptr_t)itemsize != 0) {
            PyBuffer_Release(&views[got]);
            PyErr_Format(PyExc_ValueError, "call(): array %zd is not aligned to %zd bytes", got, itemsize);
            break;
        }
    }
    if (got == k && n > 0) {
        const sg_entry entry = (sg_entry)fn;
        Py_BEGIN_ALLOW_THREADS
        entry((int64_t)n, p);
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t i = 0; i < got; ++i)
        PyBuffer_Release(&views[i]);
    if (got < k)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef sg_methods[] = {
    {"call", (PyCFunction)(void (*)(void))sg_call, METH_FASTCALL,
     "call(address, n, n_inputs, itemsize, *arrays): run the kernel entry at address on the arrays' data"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef sg_module = {PyModuleDef_HEAD_INIT, SG_STR(SG_MODULE), NULL, -1, sg_methods,
                                       NULL, NULL, NULL, NULL};

PyMODINIT_FUNC SG_CAT(PyInit_, SG_MODULE)(void)
{
    return PyModule_Create(&sg_module);
}
