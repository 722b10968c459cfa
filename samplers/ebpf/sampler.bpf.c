// Per-thread scheduler counters kept in the kernel, for `catch-load --sampler ebpf` (samplers/ebpf/sampler.py).
//
// Compiled with -D switches by sampler.py:
//   SLOTS          number of thread slots (the `stats` array's size)
//   TIDS           the kernel's pid_max when the sampler started (`slot_of` holds an entry per tid below it)
//   STATE_MASK     prev_state bits that are sleep states (this kernel's format file); 0 of them = runnable
//   OFF_SUM_EXEC, OFF_RUN_DELAY, OFF_PCOUNT, OFF_MAJ_FLT   byte offsets in struct task_struct of
//                  se.sum_exec_runtime, sched_info.run_delay, sched_info.pcount and maj_flt, read from this
//                  kernel's BTF (btf.py)
//   WITH_NEWTASK   the kernel has task:task_newtask: `born` counts the tasks the processes in `targets` create
//
// `stats` is an array user space maps into its memory (BPF_F_MMAPABLE): one slot per target thread, read
// with one memcpy per tick, no system call. `slot_of` holds each thread id's slot + 1 (0: none), a u16 per
// tid, 32 tids an element (an array's elements are 8-byte aligned, so one u16 an element would take 8
// bytes); user space maps it too and fills both (the slot first, seeded with the thread's /proc counters,
// then the tid's entry), and zeroes the entry at exit. Every probe is two array lookups and a few stores:
// the cost grows with switches, not with threads x ticks. Arrays, not a hash: the verifier inlines an
// array lookup into a bounds check and an add, where a hash lookup hashes and walks a bucket; the switch
// probe took 300-340 ns a run with a hash and 120-180 with the array, the wake-up 220-260 and 73-94 ns
// (Bitwig shape, kernel.bpf_stats_enabled, both versions attached at once). It costs 2 bytes per possible
// tid: 64 KiB at pid_max 32768, 8 MiB at the largest (4194304).
//
// What the counters mean (the /proc schedstat fields, DESIGN.md "The eBPF sampler"): at each switch-out the
// scheduler's own counters of the thread leaving (current, in sched_switch) are copied, so they equal what
// /proc/<pid>/task/<tid>/schedstat shows then; between switches the probes extend them by their own clock:
//   run_ns    se.sum_exec_runtime; on a CPU since since_ns: the slice in progress is since_ns..now
//   wait_ns   sched_info.run_delay; plus, at switch-in, the wait since the wake-up or preemption (since_ns),
//             which the kernel adds itself only after the tracepoint; while runnable: since_ns..now
//   switches  sched_info.pcount (switch-ins); +1 at switch-in, as the kernel does just after the tracepoint
//   faults    user page faults (exceptions:page_fault_user), minor and major
//   maj_flt   task_struct.maj_flt (what /proc's stat prints as majflt), copied at each switch-out: the kernel
//             counts a major fault once it is served (mm_account_fault()), before the thread goes on, so the
//             switch-out after it carries it. Low 32 bits; seeded with the /proc value when added.
//
// Store order: a reader that copies a slot while a probe writes it (no lock) may see a mix of old and new
// fields. The stores are ordered (since_ns first, the phase last) so that a mixed copy can only lag, as
// /proc's counters do between scheduler ticks: it never shows time that was not lived.

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

#define PHASE_UNKNOWN 0   // no event seen since the thread was added
#define PHASE_ON_CPU 1
#define PHASE_RUNNABLE 2  // woken or preempted, waiting for a CPU
#define PHASE_OFF 3       // left the CPU asleep or stopped (prev_state says how)
#define PHASE_EXITED 4    // the thread exited (its counters are final; user space frees the slot)

struct tstat {
    u64 run_ns;
    u64 wait_ns;
    u64 since_ns;
    u64 switches;
    u64 faults;
    u64 event_ns;     // bpf_ktime_get_ns() of the last event (CLOCK_MONOTONIC)
    u32 tid;          // the slot's owner, checked by user space (a slot is reused after its thread exits)
    u32 prev_state;   // raw prev_state of the last switch-out
    u16 cpu;          // CPU of the last switch-in or wake-up target
    u8 phase;
    u8 pad0;
    u32 maj_flt;      // task_struct.maj_flt at the last switch-out (the /proc value until the first)
};

BPF_F_TABLE("array", u32, struct tstat, stats, SLOTS, (1U << 10) /* BPF_F_MMAPABLE */);
struct tid_entries {
    u16 slot1[32];  // slot + 1 of tids 32k .. 32k + 31 (0: none)
};
BPF_F_TABLE("array", u32, struct tid_entries, slot_of, (TIDS + 31) / 32, (1U << 10) /* BPF_F_MMAPABLE */);

#define BARRIER() asm volatile("" ::: "memory")

#ifdef WITH_NEWTASK
// The recorder lists a target's threads (a listdir of /proc/<pid>/task) only when `born` moved since its last
// listing. task_newtask fires after the new task joined its thread group (copy_process()), so a listing made
// after reading `born` shows every task counted in what it read.
BPF_HASH(targets, u32, u8, TARGETS);
// Mapped by user space (BPF_F_MMAPABLE): read through a map lookup (BCC, ctypes, a system call) it took 73 us
// at each 50 ms scan of the Bitwig-shaped target's recorder; through the mapping 17 us the whole scan.
BPF_F_TABLE("array", u32, u64, born, 1, (1U << 10) /* BPF_F_MMAPABLE */);

TRACEPOINT_PROBE(task, task_newtask) {
    u32 tgid = bpf_get_current_pid_tgid() >> 32;  // the creator's: a new thread's own
    if (!targets.lookup(&tgid))
        return 0;
    u32 zero = 0;
    u64 *count = born.lookup(&zero);
    if (count)
        __sync_fetch_and_add(count, 1);
    return 0;
}
#endif

static __always_inline struct tstat *slot(u32 tid) {
    u32 key = tid / 32;
    struct tid_entries *entries = slot_of.lookup(&key);  // NULL beyond the array
    if (!entries)
        return 0;
    u32 i = entries->slot1[tid & 31];
    if (!i)
        return 0;
    i -= 1;
    struct tstat *s = stats.lookup(&i);
    if (!s || s->tid != tid)
        return 0;
    return s;
}

TRACEPOINT_PROBE(sched, sched_switch) {
    u64 now = bpf_ktime_get_ns();
    u32 prev = args->prev_pid;
    u32 next = args->next_pid;
    struct tstat *p = prev ? slot(prev) : 0;
    if (p) {
        long state = args->prev_state;
        // prev is current here (__schedule() traces before context_switch()), and update_curr() has run.
        char *task = (char *)bpf_get_current_task();
        u64 run = 0, delay = 0, pcount = 0;
        bpf_probe_read_kernel(&run, sizeof(run), task + OFF_SUM_EXEC);
#if OFF_RUN_DELAY == OFF_PCOUNT + 8
        // struct sched_info begins pcount, run_delay (include/linux/sched/types.h): one read for both, one
        // helper call fewer per switch-out.
        u64 info[2] = {0, 0};
        bpf_probe_read_kernel(info, sizeof(info), task + OFF_PCOUNT);
        pcount = info[0];
        delay = info[1];
#else
        bpf_probe_read_kernel(&delay, sizeof(delay), task + OFF_RUN_DELAY);
        bpf_probe_read_kernel(&pcount, sizeof(pcount), task + OFF_PCOUNT);
#endif
        u64 majflt = 0;
        bpf_probe_read_kernel(&majflt, sizeof(majflt), task + OFF_MAJ_FLT);
        p->since_ns = now;
        BARRIER();
        p->run_ns = run;
        p->wait_ns = delay;
        p->switches = pcount;
        p->prev_state = (u32)state;
        p->maj_flt = (u32)majflt;
        p->event_ns = now;
        BARRIER();
        if (p->phase != PHASE_EXITED)  // the last switch-out after sched_process_exit keeps it so
            p->phase = (state & STATE_MASK) ? PHASE_OFF : PHASE_RUNNABLE;
    }
    struct tstat *n = next ? slot(next) : 0;
    if (n) {
        u64 since = n->since_ns;
        u8 phase = n->phase;
        n->since_ns = now;
        BARRIER();
        if (phase == PHASE_RUNNABLE && since && now > since)
            n->wait_ns += now - since;
        n->switches += 1;
        n->cpu = bpf_get_smp_processor_id();
        n->event_ns = now;
        BARRIER();
        n->phase = PHASE_ON_CPU;
    }
    return 0;
}

static __always_inline int on_wakeup(u32 tid, int target_cpu) {
    struct tstat *s = slot(tid);
    if (!s)
        return 0;
    u8 phase = s->phase;
    if (phase == PHASE_ON_CPU || phase == PHASE_RUNNABLE || phase == PHASE_EXITED)
        return 0;  // a wake-up of a task already on a run queue changes nothing (ttwu_runnable)
    u64 now = bpf_ktime_get_ns();
    s->since_ns = now;
    s->cpu = target_cpu;
    s->event_ns = now;
    BARRIER();
    s->phase = PHASE_RUNNABLE;
    return 0;
}

TRACEPOINT_PROBE(sched, sched_wakeup) {
    return on_wakeup(args->pid, args->target_cpu);
}

TRACEPOINT_PROBE(sched, sched_wakeup_new) {
    return on_wakeup(args->pid, args->target_cpu);
}

TRACEPOINT_PROBE(sched, sched_process_exit) {
    struct tstat *s = slot((u32)bpf_get_current_pid_tgid());
    if (s) {
        s->event_ns = bpf_ktime_get_ns();
        BARRIER();
        s->phase = PHASE_EXITED;
    }
    return 0;
}

#ifdef WITH_FAULTS
TRACEPOINT_PROBE(exceptions, page_fault_user) {
    struct tstat *s = slot((u32)bpf_get_current_pid_tgid());
    if (s)
        s->faults += 1;
    return 0;
}
#endif

#ifdef KERNEL_TICK
// The tick taken by the kernel (sampler.py KernelTicks): `kernel_tick` runs every TICK_NS on a CPU-clock
// software perf event of one CPU (it fires in idle too), and writes into the ring buffer `ticks` one record
// per slot whose bytes differ from those it sent last (`sent`), then one record closing the tick. The
// recorder wakes every 125 ms (recorder.py KERNEL_TICK_WAKE_NS) to drain them: no 2 ms wake-up in Python.
//
// "Changed" is a comparison of the slot's 64 bytes, copied once, with the copy sent last, not a test of
// event_ns: the fault probe moves `faults` without an event time, and the recorder rewrites slots itself
// (add, remove). A copy taken while a probe writes the slot (a probe on another CPU, or the one this
// interrupt cut into) may mix old and new fields, as the Python tick's memcpy may (see "Store order"): it
// is sent as copied, and the probe's completed stores differ from it at the next tick, which sends it again.
// `sent` is updated only for a record the ring took, so a slot the full ring refused is sent at the next
// tick; a tick whose closing record it refused is missing from the stream (the recorder counts the gap).
struct tick_conf {
    u32 used;     // slots [0, used) are compared (the recorder's EbpfSampler.used)
    u32 layout;   // the recorder's layout id in force: each tick record names the one its slots belong to
};

#define TICK_INDEX 0xffffffffU  // the index of a tick's closing record

struct tick_rec {
    u32 index;    // the slot, or TICK_INDEX
    u32 used;     // closing record: the slot count of the tick
    union {
        struct tstat slot;
        struct {
            u64 t_ns;     // bpf_ktime_get_ns() when the tick began (CLOCK_MONOTONIC, the recorder's clock)
            u64 layout;
            u64 changed;  // slot records of this tick before this one
            u64 refused;  // records the full ring refused so far
            u64 pad[4];
        } tick;
    };
};

BPF_ARRAY(tick_conf, struct tick_conf, 1);
BPF_ARRAY(sent, struct tstat, SLOTS);
BPF_ARRAY(refused, u64, 1);
BPF_RINGBUF_OUTPUT(ticks, TICK_PAGES);

// A tick walks the slots in parts of TICK_PART, each part a tail call of the one before (BCC 0.26 cannot
// load bpf_loop's callback, and the verifier gives up on one bounded loop over 8192 slots: too many
// branches pending). 33 tail calls at most: SLOTS <= 33 * TICK_PART (sampler.py checks it).
#define TICK_PART 512
struct tick_state {
    u64 t_ns;
    u64 changed;
    u64 refusals;
    u32 next;     // the first slot of the next part
    u32 used;
    u32 layout;
    u32 pad;
};
BPF_ARRAY(tick_state, struct tick_state, 1);  // one CPU runs the tick: no two ticks at once
BPF_PROG_ARRAY(tick_parts, 1);

static __always_inline void tick_end(struct tick_state *st) {
    u32 zero = 0;
    u64 *lost = refused.lookup(&zero);
    if (!lost)
        return;
    struct tick_rec *r = ticks.ringbuf_reserve(sizeof(struct tick_rec));
    if (!r) {
        __sync_fetch_and_add(lost, st->refusals + 1);
        return;
    }
    *lost += st->refusals;
    r->index = TICK_INDEX;
    r->used = st->used;
    r->tick.t_ns = st->t_ns;
    r->tick.layout = st->layout;
    r->tick.changed = st->changed;
    r->tick.refused = *lost;
    ticks.ringbuf_submit(r, 0);
}

int kernel_tick_part(void *perf_ctx) {
    u32 zero = 0;
    struct tick_state *st = tick_state.lookup(&zero);
    if (!st)
        return 0;
    u32 first = st->next, used = st->used;
    u64 changed = 0, refusals = 0;
#pragma clang loop unroll(disable)
    for (u32 n = 0; n < TICK_PART; n++) {
        u32 i = first + n;
        if (i >= used)
            break;
        struct tstat *s = stats.lookup(&i);
        struct tstat *last = sent.lookup(&i);
        if (!s || !last)
            break;
        struct tstat copy;
        __builtin_memcpy(&copy, s, sizeof(copy));
        u64 *a = (u64 *)&copy, *b = (u64 *)last;
        // One branch for the 64 bytes: the verifier's pending branches grow with each one in the loop.
        u64 differ = (a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4]) |
                     (a[5] ^ b[5]) | (a[6] ^ b[6]) | (a[7] ^ b[7]);
        if (!differ)
            continue;
        struct tick_rec *r = ticks.ringbuf_reserve(sizeof(struct tick_rec));
        if (!r) {
            refusals += 1;
            continue;
        }
        r->index = i;
        r->used = 0;
        __builtin_memcpy(&r->slot, &copy, sizeof(copy));
        ticks.ringbuf_submit(r, 0);
        __builtin_memcpy(last, &copy, sizeof(copy));
        changed += 1;
    }
    st->changed += changed;
    st->refusals += refusals;
    st->next = first + TICK_PART;
    if (st->next < used)
        tick_parts.call(perf_ctx, 0);  // returns only when the call fails: the tick ends here
    tick_end(st);
    return 0;
}

int kernel_tick(void *perf_ctx) {
    u32 zero = 0;
    struct tick_conf *conf = tick_conf.lookup(&zero);
    struct tick_state *st = tick_state.lookup(&zero);
    if (!conf || !st)
        return 0;
    st->t_ns = bpf_ktime_get_ns();
    st->changed = 0;
    st->refusals = 0;
    st->next = 0;
    st->used = conf->used < SLOTS ? conf->used : SLOTS;
    st->layout = conf->layout;
    if (st->used)
        tick_parts.call(perf_ctx, 0);
    tick_end(st);
    return 0;
}
#endif
