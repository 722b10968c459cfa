// Per-thread scheduler counters kept in the kernel, for `catch-load --sampler ebpf` (samplers/ebpf/sampler.py).
//
// Compiled with -D switches by sampler.py:
//   SLOTS          number of thread slots (the `stats` array's size)
//   STATE_MASK     prev_state bits that are sleep states (this kernel's format file); 0 of them = runnable
//   OFF_SUM_EXEC, OFF_RUN_DELAY, OFF_PCOUNT   byte offsets in struct task_struct of se.sum_exec_runtime,
//                  sched_info.run_delay and sched_info.pcount, read from this kernel's BTF (btf.py)
//   WITH_NEWTASK   the kernel has task:task_newtask: `born` counts the tasks the processes in `targets` create
//
// `stats` is an array user space maps into its memory (BPF_F_MMAPABLE): one slot per target thread, read
// with one memcpy per tick, no system call. `slot_of` maps a thread id to its slot; user space fills both
// (the slot first, seeded with the thread's /proc counters, then the tid), and deletes the tid at exit.
// Every probe is one hash lookup and a few stores: the cost grows with switches, not with threads x ticks.
//
// What the counters mean (the /proc schedstat fields, DESIGN.md "The eBPF sampler"): at each switch-out the
// scheduler's own counters of the thread leaving (current, in sched_switch) are copied, so they equal what
// /proc/<pid>/task/<tid>/schedstat shows then; between switches the probes extend them by their own clock:
//   run_ns    se.sum_exec_runtime; on a CPU since since_ns: the slice in progress is since_ns..now
//   wait_ns   sched_info.run_delay; plus, at switch-in, the wait since the wake-up or preemption (since_ns),
//             which the kernel adds itself only after the tracepoint; while runnable: since_ns..now
//   switches  sched_info.pcount (switch-ins); +1 at switch-in, as the kernel does just after the tracepoint
//   faults    user page faults (exceptions:page_fault_user), minor and major
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
    u32 pad1;
};

BPF_F_TABLE("array", u32, struct tstat, stats, SLOTS, (1U << 10) /* BPF_F_MMAPABLE */);
BPF_HASH(slot_of, u32, u32, SLOTS);

#define BARRIER() asm volatile("" ::: "memory")

#ifdef WITH_NEWTASK
// The recorder lists a target's threads (a listdir of /proc/<pid>/task) only when `born` moved since its last
// listing. task_newtask fires after the new task joined its thread group (copy_process()), so a listing made
// after reading `born` shows every task counted in what it read.
BPF_HASH(targets, u32, u8, TARGETS);
BPF_ARRAY(born, u64, 1);

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
    u32 *index = slot_of.lookup(&tid);
    if (!index)
        return 0;
    u32 i = *index;
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
        bpf_probe_read_kernel(&delay, sizeof(delay), task + OFF_RUN_DELAY);
        bpf_probe_read_kernel(&pcount, sizeof(pcount), task + OFF_PCOUNT);
        p->since_ns = now;
        BARRIER();
        p->run_ns = run;
        p->wait_ns = delay;
        p->switches = pcount;
        p->prev_state = (u32)state;
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
