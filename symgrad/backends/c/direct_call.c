/* symgrad's direct kernel call (see symgrad/backends/c/direct.py, which defines SG_MAX_ARRAYS and SG_MODULE) */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#ifdef SG_NUMPY /* (NumPy's headers were found: fresh) */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#endif

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

#ifdef SG_NUMPY
/* fresh(address, n_inputs, small, typenum, batch, tails, *inputs): the tape's hot path, the kernel at address
   on per-element inputs that are ready (exact ndarrays of the dtype typenum, in native byte order, of shape
   batch, C-contiguous and aligned) or Python numbers (floats, and ints within 2**53: exact in a double, so
   one rounding to float32 as NumPy's), filled out here, into new arrays of shapes batch + tail, one per
   tail, allocated here: their tuple. None, with nothing run, for anything else (other inputs, no
   elements, or small or more elements: the caller's pool takes those), so that the caller takes its
   general path. */
static PyObject *sg_fresh(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    npy_intp dims[NPY_MAXDIMS];
    void *p[SG_MAX_ARRAYS];
    double number[SG_MAX_ARRAYS];
    int is_number[SG_MAX_ARRAYS];
    (void)self;
    if (nargs < 6) {
        PyErr_SetString(PyExc_TypeError, "fresh() takes an address, n_inputs, small, typenum, batch, tails, inputs");
        return NULL;
    }
    void *fn = PyLong_AsVoidPtr(args[0]);
    const Py_ssize_t n_in = PyLong_AsSsize_t(args[1]);
    const Py_ssize_t small = PyLong_AsSsize_t(args[2]);
    const int typenum = (int)PyLong_AsLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *batch = args[4], *tails = args[5];
    if (fn == NULL || (typenum != NPY_DOUBLE && typenum != NPY_FLOAT) || !PyTuple_CheckExact(batch) ||
        !PyTuple_CheckExact(tails) || nargs - 6 != n_in || n_in + PyTuple_GET_SIZE(tails) > SG_MAX_ARRAYS ||
        PyTuple_GET_SIZE(batch) > NPY_MAXDIMS)
        Py_RETURN_NONE;
    const int nb = (int)PyTuple_GET_SIZE(batch);
    npy_intp n = 1;
    for (int d = 0; d < nb; ++d) {
        PyObject *item = PyTuple_GET_ITEM(batch, d);
        dims[d] = PyLong_CheckExact(item) ? (npy_intp)PyLong_AsSsize_t(item) : -1;
        if (dims[d] < 0) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        n *= dims[d];
    }
    if (n == 0 || n >= small)
        Py_RETURN_NONE;
    Py_ssize_t n_numbers = 0;
    for (Py_ssize_t k = 0; k < n_in; ++k) {
        PyObject *obj = args[6 + k];
        is_number[k] = 0;
        if (PyFloat_CheckExact(obj) || PyLong_CheckExact(obj)) {
            if (PyFloat_CheckExact(obj))
                number[k] = PyFloat_AS_DOUBLE(obj);
            else {
                int overflow = 0;
                const long long i = PyLong_AsLongLongAndOverflow(obj, &overflow);
                if (overflow || i > (1LL << 53) || i < -(1LL << 53))
                    Py_RETURN_NONE;
                number[k] = (double)i;
            }
            is_number[k] = 1;
            ++n_numbers;
            continue;
        }
        if (Py_TYPE(obj) != &PyArray_Type)
            Py_RETURN_NONE;
        PyArrayObject *a = (PyArrayObject *)obj;
        if (PyArray_TYPE(a) != typenum || !PyArray_ISNOTSWAPPED(a) || PyArray_NDIM(a) != nb ||
            !PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a))
            Py_RETURN_NONE;
        for (int d = 0; d < nb; ++d)
            if (PyArray_DIMS(a)[d] != dims[d])
                Py_RETURN_NONE;
        p[k] = PyArray_DATA(a);
    }
    const Py_ssize_t n_out = PyTuple_GET_SIZE(tails);
    PyObject *result = PyTuple_New(n_out);
    if (result == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < n_out; ++k) {
        PyObject *tail = PyTuple_GET_ITEM(tails, k);
        if (!PyTuple_CheckExact(tail) || nb + PyTuple_GET_SIZE(tail) > NPY_MAXDIMS) {
            Py_DECREF(result);
            Py_RETURN_NONE;
        }
        const int nd = nb + (int)PyTuple_GET_SIZE(tail);
        for (int d = nb; d < nd; ++d) {
            PyObject *item = PyTuple_GET_ITEM(tail, d - nb);
            dims[d] = PyLong_CheckExact(item) ? (npy_intp)PyLong_AsSsize_t(item) : -1;
            if (dims[d] < 0) {
                PyErr_Clear();
                Py_DECREF(result);
                Py_RETURN_NONE;
            }
        }
        PyObject *out = PyArray_SimpleNew(nd, dims, typenum);
        if (out == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyTuple_SET_ITEM(result, k, out);
        p[n_in + k] = PyArray_DATA((PyArrayObject *)out);
    }
    const size_t itemsize = typenum == NPY_DOUBLE ? sizeof(double) : sizeof(float);
    char *filled = NULL; /* the numbers, each filled out to n values */
    if (n_numbers) {
        filled = PyMem_Malloc((size_t)n_numbers * (size_t)n * itemsize);
        if (filled == NULL) {
            Py_DECREF(result);
            return PyErr_NoMemory();
        }
        char *at = filled;
        for (Py_ssize_t k = 0; k < n_in; ++k) {
            if (!is_number[k])
                continue;
            if (typenum == NPY_DOUBLE)
                for (npy_intp i = 0; i < n; ++i)
                    ((double *)at)[i] = number[k];
            else
                for (npy_intp i = 0; i < n; ++i)
                    ((float *)at)[i] = (float)number[k];
            p[k] = at;
            at += (size_t)n * itemsize;
        }
    }
    const sg_entry entry = (sg_entry)fn;
    Py_BEGIN_ALLOW_THREADS
    entry((int64_t)n, p);
    Py_END_ALLOW_THREADS
    PyMem_Free(filled);
    return result;
}
#endif

/* A float64 ('d') or float32 ('f') buffer whose elements are equally spaced in C order (contiguous, a
   column of a contiguous array such as a Jacobian's, or, read-only, one value broadcast: spacing 0),
   aligned: its element count and that spacing (in elements) in *step; 0 (the buffer released) for anything
   else. */
static Py_ssize_t sg_floats(PyObject *obj, Py_buffer *view, int writable, char *kind, Py_ssize_t *step)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_FORMAT | PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0)) < 0) {
        PyErr_Clear();
        return 0;
    }
    const char *f = view->format;
    *kind = f != NULL && (f[0] == 'd' || f[0] == 'f') && f[1] == '\0' ? f[0] : 0;
    const Py_ssize_t size = view->itemsize;
    Py_ssize_t n = 1, expect = 0;
    int ok = *kind != 0 && size == (*kind == 'd' ? 8 : 4) && (uintptr_t)view->buf % (uintptr_t)size == 0;
    int first = 1; /* (the innermost axis longer than 1 sets the spacing) */
    *step = 1;
    for (int d = view->ndim - 1; ok && d >= 0; --d) {
        const Py_ssize_t extent = view->shape[d], stride = view->strides[d];
        if (extent == 1)
            continue;
        if (first) {
            ok = stride >= 0 && stride % size == 0 && (stride > 0 || !writable);
            *step = stride / size;
            expect = stride;
            first = 0;
        }
        ok = ok && stride == expect;
        expect *= extent;
        n *= extent;
    }
    for (int d = 0; d < view->ndim; ++d)
        if (view->shape[d] == 0)
            ok = 0; /* (nothing to add: the caller's fallback is as fast) */
    if (!ok || (writable && *step != 1)) {
        PyBuffer_Release(view);
        return 0;
    }
    return n;
}

/* whether the elements of two buffers (counts na and nb, spacings sa and sb) lie in disjoint memory */
static int sg_apart(const Py_buffer *a, Py_ssize_t na, Py_ssize_t sa, const Py_buffer *b, Py_ssize_t nb,
                    Py_ssize_t sb)
{
    const uintptr_t a0 = (uintptr_t)a->buf, b0 = (uintptr_t)b->buf;
    const uintptr_t a1 = a0 + (uintptr_t)((na - 1) * sa + 1) * (uintptr_t)a->itemsize;
    const uintptr_t b1 = b0 + (uintptr_t)((nb - 1) * sb + 1) * (uintptr_t)b->itemsize;
    return a1 <= b0 || b1 <= a0;
}

/* acc's buffer (writable), g's and j's (sg_floats each, their counts, kinds and spacings): how many were
   taken, in that order (3: all; the caller releases those taken) */
static int sg_operands(PyObject *const *args, Py_buffer v[3], char kind[3], Py_ssize_t n[3], Py_ssize_t step[3])
{
    int got = 0;
    for (; got < 3; ++got) {
        n[got] = sg_floats(args[got], &v[got], got == 0, &kind[got], &step[got]);
        if (n[got] == 0)
            break;
    }
    return got;
}

/* mul_add(acc, g, j[, k]): acc += g * j elementwise (the product rounded, then the sum, as NumPy's two
   steps round them: the build passes -ffp-contract=off), on float arrays of one dtype; acc writable and
   contiguous, g and j of acc's element count, contiguous or equally spaced (a Jacobian's column). With k,
   j is a whole contiguous Jacobian holding m values per element of acc (its size m times acc's), and its
   column k (j[i*m + k]) is taken. True when done; False, with acc untouched, for any other arguments (the
   caller then takes NumPy's path). */
static PyObject *sg_mul_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[3];
    char kind[3];
    Py_ssize_t n[3], step[3], col = 0;
    (void)self;
    if (nargs != 3 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "mul_add() takes three arrays (acc, g, j) and an optional column k");
        return NULL;
    }
    if (nargs == 4) {
        col = PyLong_AsSsize_t(args[3]);
        if (col == -1 && PyErr_Occurred())
            return NULL;
    }
    const int got = sg_operands(args, v, kind, n, step);
    int ok = got == 3 && n[1] == n[0] && kind[1] == kind[0] && kind[2] == kind[0];
    Py_ssize_t sj = step[2], j0 = 0; /* j's spacing and first element */
    if (ok && nargs == 4) {
        const Py_ssize_t m = n[2] / n[0];
        ok = step[2] == 1 && m * n[0] == n[2] && col >= 0 && col < m;
        sj = m;
        j0 = col;
    } else
        ok = ok && n[2] == n[0];
    /* g or j in acc's memory: only as acc itself (each element reads its own) */
    if (ok)
        ok = v[1].buf == v[0].buf ? step[1] == 1 : sg_apart(&v[0], n[0], 1, &v[1], n[0], step[1]);
    if (ok && nargs == 4) /* (the whole Jacobian, contiguous) */
        ok = sg_apart(&v[0], n[0], 1, &v[2], n[2], 1);
    else if (ok)
        ok = v[2].buf == v[0].buf ? step[2] == 1 : sg_apart(&v[0], n[0], 1, &v[2], n[0], step[2]);
    if (ok) {
        const Py_ssize_t m = n[0], sg = step[1];
        if (kind[0] == 'd') {
            double *a = v[0].buf;
            const double *g = v[1].buf, *j = (const double *)v[2].buf + j0;
            for (Py_ssize_t i = 0; i < m; ++i)
                a[i] = a[i] + g[i * sg] * j[i * sj];
        } else {
            float *a = v[0].buf;
            const float *g = v[1].buf, *j = (const float *)v[2].buf + j0;
            for (Py_ssize_t i = 0; i < m; ++i)
                a[i] = a[i] + g[i * sg] * j[i * sj];
        }
    }
    for (int i = 0; i < got; ++i)
        PyBuffer_Release(&v[i]);
    if (ok)
        Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

/* NumPy's pairwise summation (loops_utils.h.src) of the products g[i*sg] * j[i*sj], i < n, each rounded
   before it is added (as NumPy sums the product array): the same blocks of 8, the same order */
#define SG_PAIRWISE(T, NAME)                                                                               \
    static T NAME(const T *g, Py_ssize_t sg, const T *j, Py_ssize_t sj, Py_ssize_t n)                      \
    {                                                                                                      \
        if (n < 8) {                                                                                       \
            T res = -0.0;                                                                                  \
            for (Py_ssize_t i = 0; i < n; ++i)                                                             \
                res = res + g[i * sg] * j[i * sj];                                                         \
            return res;                                                                                    \
        }                                                                                                  \
        if (n <= 128) {                                                                                    \
            T r[8];                                                                                        \
            Py_ssize_t i;                                                                                  \
            for (int k = 0; k < 8; ++k)                                                                    \
                r[k] = g[k * sg] * j[k * sj];                                                              \
            for (i = 8; i < n - n % 8; i += 8)                                                             \
                for (int k = 0; k < 8; ++k)                                                                \
                    r[k] = r[k] + g[(i + k) * sg] * j[(i + k) * sj];                                       \
            T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));                     \
            for (; i < n; ++i)                                                                             \
                res = res + g[i * sg] * j[i * sj];                                                         \
            return res;                                                                                    \
        }                                                                                                  \
        Py_ssize_t n2 = n / 2;                                                                             \
        n2 -= n2 % 8;                                                                                      \
        return NAME(g, sg, j, sj, n2) + NAME(g + n2 * sg, sg, j + n2 * sj, sj, n - n2);                    \
    }
SG_PAIRWISE(double, sg_pairwise_d)
SG_PAIRWISE(float, sg_pairwise_f)

/* acc[b] += the sum of g[i*sg] * j[i*sj] over i = a*m + b, a < n/m, as NumPy's reduction adds: from 0.0,
   everything pairwise when acc holds one value (m == 1), else whole rows in order */
#define SG_SUM_INTO(T, NAME, PAIRWISE)                                                                     \
    static void NAME(void *acc_, Py_ssize_t m, const void *g_, Py_ssize_t sg, const void *j_, Py_ssize_t sj, \
                     Py_ssize_t n)                                                                         \
    {                                                                                                      \
        T *acc = acc_;                                                                                     \
        const T *g = g_, *j = j_;                                                                          \
        if (m == 1) {                                                                                      \
            acc[0] = acc[0] + ((T)0.0 + PAIRWISE(g, sg, j, sj, n));                                        \
            return;                                                                                        \
        }                                                                                                  \
        for (Py_ssize_t b = 0; b < m; ++b) {                                                               \
            T sum = 0.0;                                                                                   \
            for (Py_ssize_t i = b; i < n; i += m)                                                          \
                sum = sum + g[i * sg] * j[i * sj];                                                         \
            acc[b] = acc[b] + sum;                                                                         \
        }                                                                                                  \
    }
SG_SUM_INTO(double, sg_sum_into_d, sg_pairwise_d)
SG_SUM_INTO(float, sg_sum_into_f, sg_pairwise_f)

/* mul_add_sum(acc, g, j, k): acc += np.add.reduce(g * j[..., 0, k]) over the leading axes that broadcasting
   added or stretched (the caller checked that the summed axes lead), rounded as NumPy's reduction is: from
   0.0, whole rows in order when acc holds more than one value, else NumPy's pairwise sum of all. g holds
   n = r * m values (m: acc's, r > 1), contiguous or equally spaced; j is a whole contiguous Jacobian with
   w values per element of g. True when done; False, with acc untouched, for any other arguments. */
static PyObject *sg_mul_add_sum(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[3];
    char kind[3];
    Py_ssize_t n[3], step[3];
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "mul_add_sum() takes three arrays (acc, g, j) and a column k");
        return NULL;
    }
    const Py_ssize_t col = PyLong_AsSsize_t(args[3]);
    if (col == -1 && PyErr_Occurred())
        return NULL;
    const int got = sg_operands(args, v, kind, n, step);
    const Py_ssize_t m = got == 3 ? n[0] : 0, w = got == 3 ? n[2] / n[1] : 0;
    int ok = got == 3 && kind[1] == kind[0] && kind[2] == kind[0] && n[1] > m && n[1] % m == 0 &&
             step[2] == 1 && w * n[1] == n[2] && col >= 0 && col < w;
    ok = ok && sg_apart(&v[0], m, 1, &v[1], n[1], step[1]) && sg_apart(&v[0], m, 1, &v[2], n[2], 1);
    if (ok) /* (j from its column k) */
        (kind[0] == 'd' ? sg_sum_into_d : sg_sum_into_f)(v[0].buf, m, v[1].buf, step[1],
                                                          (const char *)v[2].buf + col * v[2].itemsize, w, n[1]);
    for (int i = 0; i < got; ++i)
        PyBuffer_Release(&v[i]);
    if (ok)
        Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

static PyMethodDef sg_methods[] = {
#ifdef SG_NUMPY
    {"fresh", (PyCFunction)(void (*)(void))sg_fresh, METH_FASTCALL,
     "fresh(address, n_inputs, small, typenum, batch, tails, *inputs): the kernel on ready inputs, into new "
     "arrays; None for other inputs"},
#endif
    {"mul_add_sum", (PyCFunction)(void (*)(void))sg_mul_add_sum, METH_FASTCALL,
     "mul_add_sum(acc, g, j, k): acc += g * j[..., 0, k] summed over leading axes as NumPy sums; False for "
     "other arguments"},
    {"mul_add", (PyCFunction)(void (*)(void))sg_mul_add, METH_FASTCALL,
     "mul_add(acc, g, j[, k]): acc += g * j (with k: j's column k) on float arrays of one dtype; False for "
     "other arguments"},
    {"call", (PyCFunction)(void (*)(void))sg_call, METH_FASTCALL,
     "call(address, n, n_inputs, itemsize, *arrays): run the kernel entry at address on the arrays' data"},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef sg_module = {PyModuleDef_HEAD_INIT, SG_STR(SG_MODULE), NULL, -1, sg_methods,
                                       NULL, NULL, NULL, NULL};

PyMODINIT_FUNC SG_CAT(PyInit_, SG_MODULE)(void)
{
#ifdef SG_NUMPY
    import_array(); /* (NumPy's C API, for fresh's arrays; an ImportError when it cannot load) */
#endif
    return PyModule_Create(&sg_module);
}
