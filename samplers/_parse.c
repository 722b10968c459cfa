/* The writer's bulk parse of the /proc texts in C: the same values as the numpy passes of samplers/procfs.py
 * (parse_schedstat_blob, parse_stat_blob, _sched_fixed_width), which stay the reference and the fallback
 * where this module was not built (setup.py marks it optional). Each function handles the texts of the
 * usual shape and returns None for anything else, which then goes the numpy way: the two never disagree on
 * what they both accept (tests/test_procfs_parsing.py compares them).
 *
 * Why: on the Bitwig shape at 2 ms the numpy passes were about 40 % of the writer's parse-and-store work
 * (py-spy, 2026-12-07), the writer 40-45 % of a core.
 *
 * Results are bytes of native int64 (numpy.frombuffer on the Python side): no numpy C API here.
 */
#define _GNU_SOURCE /* memrchr, memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

/* tokens_to_int64: an optional '-', then at most 20 characters taken as digits (Horner, wrapping as numpy's
 * int64 does); the caller has checked nothing else. */
static int64_t token_value(const unsigned char *s, const unsigned char *end) {
    int negative = s < end && *s == '-';
    if (negative)
        s++;
    uint64_t v = 0;
    for (int k = 0; s < end && k < 20; s++, k++)
        v = v * 10 + (uint64_t)(int64_t)((int)*s - '0');
    return negative ? -(int64_t)v : (int64_t)v;
}

static inline int is_separator(unsigned char c) { return c == ' ' || c == '\n'; }

/* parse_schedstat(blob, count) -> count x 3 int64 as bytes, or None (not 3 tokens a line: the numpy way). */
static PyObject *parse_schedstat(PyObject *self, PyObject *args) {
    Py_buffer blob;
    Py_ssize_t count;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*n", &blob, &count))
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, count * 3 * (Py_ssize_t)sizeof(int64_t));
    if (out == NULL) {
        PyBuffer_Release(&blob);
        return NULL;
    }
    int64_t *values = (int64_t *)PyBytes_AS_STRING(out);
    const unsigned char *s = blob.buf, *end = s + blob.len, *token = s;
    Py_ssize_t n = 0;
    for (const unsigned char *p = s; p < end; p++) {
        if (!is_separator(*p))
            continue;
        if (n == count * 3) { /* more tokens than 3 a line */
            n = -1;
            break;
        }
        values[n++] = token_value(token, p);
        token = p + 1;
    }
    PyBuffer_Release(&blob);
    if (n != count * 3) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

/* parse_stat(blob, lengths, picks, extra, extra_rows) -> (states, numbers) as bytes: lengths, picks and
 * extra_rows native int64; numbers n x (len(picks) + (extra >= 0)) int64, -1 where a line has no such token.
 * None where a line has no ')' followed by a separator inside it (the numpy way decides those). */
static PyObject *parse_stat(PyObject *self, PyObject *args) {
    Py_buffer blob, lengths_b, picks_b, rows_b;
    long extra;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*y*ly*", &blob, &lengths_b, &picks_b, &extra, &rows_b))
        return NULL;
    PyObject *result = NULL, *states = NULL, *numbers = NULL;
    Py_ssize_t n = lengths_b.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t n_picks = picks_b.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t n_rows = rows_b.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t width = n_picks + (extra >= 0);
    const int64_t *lengths = lengths_b.buf, *picks = picks_b.buf, *rows = rows_b.buf;
    int64_t max_pick = extra;
    for (Py_ssize_t j = 0; j < n_picks; j++)
        if (picks[j] > max_pick)
            max_pick = picks[j];
    /* token j of a line ends at separator j + 1 after the ')': up to max_pick + 2 separators a line */
    Py_ssize_t *seps = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(max_pick + 2));
    char *wants_extra = PyMem_Calloc((size_t)(n ? n : 1), 1);
    states = PyBytes_FromStringAndSize(NULL, n);
    numbers = PyBytes_FromStringAndSize(NULL, n * width * (Py_ssize_t)sizeof(int64_t));
    if (seps == NULL || wants_extra == NULL || states == NULL || numbers == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t r = 0; r < n_rows; r++)
        if (rows[r] >= 0 && rows[r] < n)
            wants_extra[rows[r]] = 1;
    const unsigned char *buf = blob.buf;
    int64_t *out = (int64_t *)PyBytes_AS_STRING(numbers);
    char *state_out = PyBytes_AS_STRING(states);
    Py_ssize_t line_start = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t line_end = line_start + lengths[i];
        if (lengths[i] < 0 || line_end > blob.len)
            goto fallback;
        const unsigned char *paren = memrchr(buf + line_start, ')', (size_t)lengths[i]);
        if (paren == NULL)
            goto fallback;
        /* the separators after the ')', inside the line: the first is the one before the state */
        Py_ssize_t found = 0;
        for (const unsigned char *p = paren + 1; p < buf + line_end && found < max_pick + 2; p++)
            if (is_separator(*p))
                seps[found++] = p - buf;
        if (found == 0 || seps[0] + 1 >= line_end)
            goto fallback;
        state_out[i] = (char)buf[seps[0] + 1];
        int64_t *row = out + i * width;
        for (Py_ssize_t j = 0; j < n_picks; j++) {
            int64_t t = picks[j];
            row[j] = t + 1 < found ? token_value(buf + seps[t] + 1, buf + seps[t + 1]) : -1;
        }
        if (extra >= 0)
            row[n_picks] = wants_extra[i] && extra + 1 < found
                               ? token_value(buf + seps[extra] + 1, buf + seps[extra + 1])
                               : -1;
        line_start = line_end;
    }
    result = PyTuple_Pack(2, states, numbers);
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(seps);
    PyMem_Free(wants_extra);
    Py_XDECREF(states);
    Py_XDECREF(numbers);
    PyBuffer_Release(&blob);
    PyBuffer_Release(&lengths_b);
    PyBuffer_Release(&picks_b);
    PyBuffer_Release(&rows_b);
    return result;
}

/* A value cell "   -123" (or a time "  12.345678" when dot: the '.' 7 from the end, skipped): spaces, an
 * optional '-', then at least one and at most max_digits digits to the end. 0 when it is not that. */
static int cell_value(const unsigned char *s, Py_ssize_t width, int dot, int max_digits, int64_t *value) {
    Py_ssize_t k = 0;
    while (k < width && s[k] == ' ' && !(dot && k == width - 7)) /* the dot's place is checked below */
        k++;
    int negative = k < width && s[k] == '-';
    k += negative;
    uint64_t v = 0;
    int digits = 0;
    for (; k < width; k++) {
        if (dot && k == width - 7) {
            if (s[k] != '.')
                return 0;
            continue;
        }
        if (s[k] < '0' || s[k] > '9')
            return 0;
        v = v * 10 + (uint64_t)(s[k] - '0');
        digits++;
    }
    if (digits == 0 || digits > max_digits)
        return 0;
    *value = negative ? -(int64_t)v : (int64_t)v;
    return 1;
}

/* sched_cells(blob, starts, lengths, template, runs, cells, comm_max, max_digits) -> n x len(cells) int64 as
 * bytes, or None. The texts lie in blob (text i at starts[i], lengths[i] bytes: native int64). template: the first
 * text's body from after its header ("--\n") through the last wanted line; runs: int64 pairs [from, to) of the body
 * that every text must hold as the template does; cells: int64 triples (from, to, dot) of the wanted values. Each
 * text's body starts after its own header, found from byte comm_max on (procfs.py _sched_fixed_width_in). */
static PyObject *sched_cells(PyObject *self, PyObject *args) {
    Py_buffer blob_b, starts_b, lengths_b, template_b, runs_b, cells_b;
    Py_ssize_t comm_max;
    int max_digits;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*ni", &blob_b, &starts_b, &lengths_b, &template_b, &runs_b, &cells_b,
                          &comm_max, &max_digits))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = lengths_b.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t n_runs = runs_b.len / (Py_ssize_t)(2 * sizeof(int64_t));
    Py_ssize_t n_cells = cells_b.len / (Py_ssize_t)(3 * sizeof(int64_t));
    const int64_t *starts = starts_b.buf, *lengths = lengths_b.buf, *runs = runs_b.buf, *cells = cells_b.buf;
    const unsigned char *blob = blob_b.buf, *template = template_b.buf;
    Py_ssize_t end = template_b.len;
    if (starts_b.len != lengths_b.len) {
        PyErr_SetString(PyExc_ValueError, "a start and a length for each text");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, n * n_cells * (Py_ssize_t)sizeof(int64_t));
    if (out == NULL)
        goto done;
    int64_t *values = (int64_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (starts[i] < 0 || lengths[i] < 0 || starts[i] + lengths[i] > blob_b.len)
            goto fallback;
        const unsigned char *s = blob + starts[i];
        Py_ssize_t len = lengths[i];
        if (len < comm_max)
            goto fallback;
        const unsigned char *header_end = memmem(s + comm_max, (size_t)(len - comm_max), "--\n", 3);
        if (header_end == NULL)
            goto fallback;
        const unsigned char *body = header_end + 3;
        if (s + len - body < end)
            goto fallback;
        for (Py_ssize_t r = 0; r < n_runs; r++)
            if (memcmp(body + runs[2 * r], template + runs[2 * r], (size_t)(runs[2 * r + 1] - runs[2 * r])) != 0)
                goto fallback;
        for (Py_ssize_t c = 0; c < n_cells; c++) {
            const int64_t *cell = cells + 3 * c;
            if (!cell_value(body + cell[0], cell[1] - cell[0], (int)cell[2], max_digits, values + i * n_cells + c))
                goto fallback;
        }
    }
    goto done;
fallback:
    Py_DECREF(out);
    out = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&blob_b);
    PyBuffer_Release(&starts_b);
    PyBuffer_Release(&lengths_b);
    PyBuffer_Release(&template_b);
    PyBuffer_Release(&runs_b);
    PyBuffer_Release(&cells_b);
    return out;
}

static PyMethodDef methods[] = {
    {"parse_schedstat", parse_schedstat, METH_VARARGS, "samplers/procfs.py parse_schedstat_blob in C"},
    {"parse_stat", parse_stat, METH_VARARGS, "samplers/procfs.py parse_stat_blob in C"},
    {"sched_cells", sched_cells, METH_VARARGS, "samplers/procfs.py _sched_fixed_width's cells in C"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_parse", NULL, -1, methods};

PyMODINIT_FUNC PyInit__parse(void) { return PyModule_Create(&module); }
