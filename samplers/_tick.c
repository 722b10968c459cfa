/* The recorder's per-tick reads in C: the same reads, decisions and TICK frame as the Python loop in
 * samplers/tick_reads.py (read_tick_python), which stays the reference and the fallback where this
 * module could not be built (no compiler or no Python headers at install: setup.py marks it optional).
 *
 * Why: on the Bitwig shape (bench/bitwig_shape.c, 121 real-time threads read every 2 ms) the Python loop
 * cost the recorder 63-73 % of a core against 17.7-22.3 % for a C loop of the same reads
 * (bench/fast_tier_floor.py); the difference is the interpreter's per-read work, not the kernel's.
 *
 * Python's lists stay the state (the recorder's tiers and taskstats read them between ticks): this code
 * reads and updates them through the C API, and builds the frame of samplers/frames.py encode_tick.
 */
#define _GNU_SOURCE /* memrchr */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* samplers/recorder.py SCHEDSTAT_BYTES, STAT_BYTES, SCHED_BYTES: the most one read takes. */
#define SCHEDSTAT_BYTES 128
#define STAT_BYTES 1024
#define SCHED_BYTES 8192

/* samplers/frames.py: FRAME "<BI", TICK = 3, TICK_HEADER "<IIqIIII". */
#define FRAME_TICK 3
#define FRAME_HEADER_SIZE 5
#define TICK_HEADER_SIZE 32

typedef struct {
    char *data;
    size_t len;
    size_t cap;
} Buffer;

static int buffer_reserve(Buffer *b, size_t more) {
    if (b->len + more <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    char *data = realloc(b->data, cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static int buffer_put_u32(Buffer *b, uint32_t v) {
    if (buffer_reserve(b, 4) < 0)
        return -1;
    unsigned char *p = (unsigned char *)b->data + b->len;
    p[0] = v & 0xff;
    p[1] = (v >> 8) & 0xff;
    p[2] = (v >> 16) & 0xff;
    p[3] = (v >> 24) & 0xff;
    b->len += 4;
    return 0;
}

static int buffer_put_i64(Buffer *b, int64_t value) {
    if (buffer_reserve(b, 8) < 0)
        return -1;
    uint64_t v = (uint64_t)value;
    unsigned char *p = (unsigned char *)b->data + b->len;
    for (int i = 0; i < 8; i++)
        p[i] = (v >> (8 * i)) & 0xff;
    b->len += 8;
    return 0;
}

/* pread into the buffer's free room: the bytes read (0: end of file), -1 on an error (errno). */
static ssize_t buffer_pread(Buffer *b, int fd, size_t most) {
    if (buffer_reserve(b, most) < 0)
        return -2;
    ssize_t n = pread(fd, b->data + b->len, most, 0);
    if (n > 0)
        b->len += (size_t)n;
    return n;
}

static int64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* time.monotonic_ns's clock */
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The state letter of a stat text as the Python loop takes it: text[text.rfind(b")") + 2:][:1], 0 if none. */
static char stat_state(PyObject *text) {
    const char *s = PyBytes_AS_STRING(text);
    Py_ssize_t n = PyBytes_GET_SIZE(text);
    /* memrchr, not a loop: the comm is near the start, so a scan from the end crosses ~250 bytes of numbers
     * (a byte-by-byte loop was 5 % of the recorder's CPU on the Bitwig shape, perf) */
    const char *close = n > 0 ? memrchr(s, ')', (size_t)n) : NULL;
    Py_ssize_t at = (close != NULL ? close - s : -1) + 2;
    return at < n ? s[at] : 0;
}

static int long_at(PyObject *seq, Py_ssize_t i, long *out) {
    long v = PyLong_AsLong(PyTuple_GET_ITEM(seq, i));
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

typedef struct {
    Buffer times, missing_empty, stat_lengths, sched_lengths, ss, st, sched;
} TickBuffers;

/* Kept from tick to tick, emptied at each: grown once to a tick's size, never handed back. Allocating them
 * per tick had glibc map and unmap the larger ones (over its mmap threshold), each tick faulting them in anew.
 * One recorder thread calls read_tick, under the GIL. */
static TickBuffers kept;

static void empty_buffers(TickBuffers *t) {
    Buffer *all[] = {&t->times, &t->missing_empty, &t->stat_lengths,
                     &t->sched_lengths, &t->ss, &t->st, &t->sched};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        all[i]->len = 0;
}

static int set_item(PyObject *list, Py_ssize_t i, PyObject *value) {
    if (value == NULL)
        return -1;
    return PyList_SetItem(list, i, value); /* steals the reference */
}

/* (index, read ns) of a thread whose read failed (gone) onto `dead`: -1 on an error (set). */
static int append_gone(PyObject *dead, Py_ssize_t index, int64_t read_ns) {
    PyObject *pair = Py_BuildValue("(nL)", index, (long long)read_ns);
    if (pair == NULL)
        return -1;
    int failed = PyList_Append(dead, pair);
    Py_DECREF(pair);
    return failed;
}

static PyObject *read_tick(PyObject *self, PyObject *args) {
    PyObject *hot, *sched_reads, *last_ss, *last_stat, *moved, *sched_base;
    long tick;
    unsigned long layout_id;
    long long t_ns;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!lkL", &PyList_Type, &hot, &PyList_Type, &sched_reads, &PyList_Type,
                          &last_ss, &PyList_Type, &last_stat, &PyList_Type, &moved, &PyList_Type, &sched_base,
                          &tick, &layout_id, &t_ns))
        return NULL;

    TickBuffers b = kept;
    empty_buffers(&b);
    PyObject *dead = PyList_New(0);
    PyObject *tick_obj = PyLong_FromLong(tick);
    PyObject *result = NULL;
    Py_ssize_t n_hot = PyList_GET_SIZE(hot);
    Py_ssize_t rows = 0, stat_reads = 0, sched_done = 0, n_missing = 0;
    if (dead == NULL || tick_obj == NULL)
        goto done;

    for (Py_ssize_t index = 0; index < n_hot; index++) {
        PyObject *entry = PyList_GET_ITEM(hot, index);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 4) {
            PyErr_SetString(PyExc_TypeError, "a read entry is (fd schedstat, fd stat, forced, slot)");
            goto done;
        }
        long fd_ss, fd_st, slot;
        if (long_at(entry, 0, &fd_ss) < 0 || long_at(entry, 1, &fd_st) < 0 || long_at(entry, 3, &slot) < 0)
            goto done;
        int forced = PyObject_IsTrue(PyTuple_GET_ITEM(entry, 2));
        if (forced < 0)
            goto done;
        if (slot < 0 || slot >= PyList_GET_SIZE(last_ss) || slot >= PyList_GET_SIZE(last_stat) ||
            slot >= PyList_GET_SIZE(moved)) {
            PyErr_SetString(PyExc_IndexError, "a read entry's slot is out of the slot lists");
            goto done;
        }
        int64_t read_ns = monotonic_ns();
        if (buffer_put_i64(&b.times, read_ns) < 0)
            goto done;
        size_t ss_at = b.ss.len;
        ssize_t n = buffer_pread(&b.ss, (int)fd_ss, SCHEDSTAT_BYTES);
        if (n == -2)
            goto done;
        if (n < 0) { /* ESRCH: the thread exited since the last tick */
            if (append_gone(dead, index, read_ns) < 0)
                goto done;
            n_missing++;
            continue;
        }
        PyObject *previous_ss = PyList_GET_ITEM(last_ss, slot);
        PyObject *previous_st = PyList_GET_ITEM(last_stat, slot);
        if (!PyBytes_Check(previous_ss) || !PyBytes_Check(previous_st)) {
            PyErr_SetString(PyExc_TypeError, "the last schedstat and stat texts are bytes");
            goto done;
        }
        const char *text = b.ss.data + ss_at;
        int changed = PyBytes_GET_SIZE(previous_ss) != n || memcmp(PyBytes_AS_STRING(previous_ss), text, n) != 0;
        size_t st_at = b.st.len;
        ssize_t st_n = 0;
        /* Unchanged schedstat of a thread not in R at its last read: not switched in since, so stat's counters
         * did not move (samplers/tiers.py); length 0 tells the writer to carry them forward. One in R may be
         * running on: its schedstat lags until the next scheduler tick, so it is always re-read. */
        if (changed || forced || stat_state(previous_st) == 'R') {
            st_n = buffer_pread(&b.st, (int)fd_st, STAT_BYTES);
            if (st_n == -2)
                goto done;
            if (st_n < 0) {
                b.ss.len = ss_at; /* no row: the schedstat read is dropped with it */
                if (append_gone(dead, index, read_ns) < 0)
                    goto done;
                n_missing++;
                continue;
            }
            if (changed) {
                if (set_item(last_ss, slot, PyBytes_FromStringAndSize(text, n)) < 0)
                    goto done;
                Py_INCREF(tick_obj);
                if (PyList_SetItem(moved, slot, tick_obj) < 0)
                    goto done;
            }
            if (set_item(last_stat, slot, PyBytes_FromStringAndSize(b.st.data + st_at, st_n)) < 0)
                goto done;
            if (st_n > 0)
                stat_reads++;
        }
        if (n == 0) { /* an empty read: no row this tick (procfs does not do this; a canned file might) */
            b.st.len = st_at;
            if (buffer_put_u32(&b.missing_empty, (uint32_t)index) < 0)
                goto done;
            n_missing++;
            if (st_n > 0)
                stat_reads--;
            continue;
        }
        if (buffer_put_u32(&b.stat_lengths, (uint32_t)st_n) < 0)
            goto done;
        rows++;
    }

    Py_ssize_t n_sched = PyList_GET_SIZE(sched_reads);
    for (Py_ssize_t i = 0; i < n_sched; i++) {
        PyObject *entry = PyList_GET_ITEM(sched_reads, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
            PyErr_SetString(PyExc_TypeError, "a sched entry is (fd, slot)");
            goto done;
        }
        long fd, slot;
        if (long_at(entry, 0, &fd) < 0 || long_at(entry, 1, &slot) < 0)
            goto done;
        if (slot < 0 || slot >= PyList_GET_SIZE(sched_base) || slot >= PyList_GET_SIZE(moved) ||
            slot >= PyList_GET_SIZE(last_stat)) {
            PyErr_SetString(PyExc_IndexError, "a sched entry's slot is out of the slot lists");
            goto done;
        }
        int base = PyObject_IsTrue(PyList_GET_ITEM(sched_base, slot));
        if (base < 0)
            goto done;
        /* samplers/tiers.py counters_may_have_moved: moved at this tick, or last read in R or D. */
        int read = base;
        if (!read) {
            long moved_tick = PyLong_AsLong(PyList_GET_ITEM(moved, slot));
            if (moved_tick == -1 && PyErr_Occurred())
                goto done;
            PyObject *st_text = PyList_GET_ITEM(last_stat, slot);
            if (!PyBytes_Check(st_text)) {
                PyErr_SetString(PyExc_TypeError, "the last stat texts are bytes");
                goto done;
            }
            char state = stat_state(st_text);
            read = moved_tick == tick || state == 'R' || state == 'D';
        }
        ssize_t n = 0;
        if (read) {
            n = buffer_pread(&b.sched, (int)fd, SCHED_BYTES);
            if (n == -2)
                goto done;
            if (n < 0) {
                n = 0; /* failed: no sched row this tick */
            } else {
                Py_INCREF(Py_False);
                if (PyList_SetItem(sched_base, slot, Py_False) < 0)
                    goto done;
                if (n > 0)
                    sched_done++;
            }
        }
        if (buffer_put_u32(&b.sched_lengths, (uint32_t)n) < 0)
            goto done;
    }

    Py_ssize_t reads = n_hot + stat_reads + sched_done;
    if (n_hot == 0) { /* no target thread yet: nothing to store */
        result = Py_BuildValue("(OnnO)", Py_None, reads, rows, dead);
        goto done;
    }
    {
        /* n_missing: the threads gone (from `dead`) and those with an empty read (missing_empty) */
        size_t payload = TICK_HEADER_SIZE + b.times.len + 4 * (size_t)n_missing + b.stat_lengths.len + b.sched_lengths.len +
                  b.ss.len + b.st.len + b.sched.len;
        if (payload > UINT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a tick frame over 4 GiB");
            goto done;
        }
        PyObject *frame = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(FRAME_HEADER_SIZE + payload));
        if (frame == NULL)
            goto done;
        Buffer out = {PyBytes_AS_STRING(frame), 0, FRAME_HEADER_SIZE + payload};
        out.data[0] = FRAME_TICK;
        out.len = 1;
        buffer_put_u32(&out, (uint32_t)payload);
        buffer_put_u32(&out, (uint32_t)tick);
        buffer_put_u32(&out, (uint32_t)layout_id);
        buffer_put_i64(&out, (int64_t)t_ns);
        buffer_put_u32(&out, (uint32_t)n_missing);
        buffer_put_u32(&out, (uint32_t)n_sched);
        buffer_put_u32(&out, (uint32_t)b.ss.len);
        buffer_put_u32(&out, (uint32_t)b.st.len);
        memcpy(out.data + out.len, b.times.data, b.times.len);
        out.len += b.times.len;
        Py_ssize_t n_dead = PyList_GET_SIZE(dead);
        for (Py_ssize_t i = 0; i < n_dead; i++) {
            Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(PyList_GET_ITEM(dead, i), 0));
            buffer_put_u32(&out, (uint32_t)index);
        }
        Buffer *rest[] = {&b.missing_empty, &b.stat_lengths, &b.sched_lengths, &b.ss, &b.st, &b.sched};
        for (size_t i = 0; i < sizeof(rest) / sizeof(rest[0]); i++) {
            if (rest[i]->len) {
                memcpy(out.data + out.len, rest[i]->data, rest[i]->len);
                out.len += rest[i]->len;
            }
        }
        result = Py_BuildValue("(NnnO)", frame, reads, rows, dead);
    }

done:
    kept = b; /* what grew stays for the next tick */
    Py_XDECREF(dead);
    Py_XDECREF(tick_obj);
    return result;
}

static PyMethodDef methods[] = {
    {"read_tick", read_tick, METH_VARARGS,
     "read_tick(hot, sched, last_ss, last_stat, moved, sched_base, tick, layout_id, t_ns) -> "
     "(frame or None, reads, rows, [(index, t_ns) of the threads gone]): samplers/tick_reads.py"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tick", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tick(void) { return PyModule_Create(&module); }
