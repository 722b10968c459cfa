// Scheduler, fault and block events of the target processes, filtered in the kernel (BCC, tracepoints only).
//
// Compiled by samplers/ebpf/collector.py with -D switches:
//   RINGBUF_PAGES  ring buffer size in pages (a power of two)
//   WITH_SCHED     sched_switch, sched_waking, sched_wakeup, sched_wakeup_new
//   WITH_FAULTS    exceptions:page_fault_user
//   WITH_BLOCK     block:block_rq_issue / block_rq_complete (BLOCK_ALL: every request, not only the targets')
//   WITH_WAKE_CONTEXT  irq/softirq/hrtimer entry/exit, to tell a wake-up from interrupt context apart
//
// Every record is one fixed-size struct event (EVENT_SIZE bytes, checked by the Python side), so user
// space reads whole batches out of the ring buffer as one numpy array.
//
// Targets: `targets` holds the thread-group ids (processes) user space asked for; `tids` maps the thread
// ids known to belong to them -> their tgid. sched_switch's next_pid and the wakee of a wake-up are
// thread ids without a tgid in the tracepoint, so `tids` is what decides for them. It is filled by user
// space (the threads that exist when a process is added), at fork (the child of a target thread), and
// whenever a target thread runs (current's tgid is exact); it is emptied at exit.

#ifndef __always_inline  // from linux/compiler.h, which the header stub does not have
#define __always_inline inline __attribute__((always_inline))
#endif

#define KIND_SWITCH 1
#define KIND_WAKING 2
#define KIND_WAKEUP 3
#define KIND_WAKEUP_NEW 4
#define KIND_PAGE_FAULT 5
#define KIND_RQ_ISSUE 6
#define KIND_RQ_COMPLETE 7
#define NR_KINDS 8

#define CTX_TASK 0
#define CTX_HARDIRQ 1
#define CTX_SOFTIRQ 2
#define CTX_HRTIMER 3

struct event {
    u64 t_ns;        // bpf_ktime_get_ns(): CLOCK_MONOTONIC, the clock of the /proc samples
    u32 kind;
    u32 cpu;         // CPU the event happened on
    s32 tid;         // switch: prev; wake-ups: wakee; fault: faulting thread; block: issuer (or -1)
    s32 pid;         // tgid of tid, -1 when not known
    s32 tid2;        // switch: next; waking/wakeup_new: current (the waker); else -1
    s32 pid2;        // tgid of tid2, -1 when not known
    s32 a;           // switch: prev_prio; wake-ups: prio; block: nr_sector
    s32 b;           // switch: next_prio; wake-ups: target_cpu; rq_issue: bytes; rq_complete: error
    s64 x;           // switch: prev_state (raw); fault: address; block: sector; waking: hrtimer function
    u64 y;           // fault: ip; block: dev
    u64 z;           // fault: error_code; waking/wakeup_new: context (CTX_*)
    char comm[16];   // switch: prev_comm; wake-ups: wakee comm; block: rwbs
    char comm2[16];  // switch: next_comm; waking/wakeup_new: waker comm; block issue: current comm
};

// When the running interrupt handler of each kind started on this CPU (0: none). Flags, not nesting
// counters: handlers of one kind do not nest on a CPU, and a flag heals itself at the next entry/exit
// pair, where a counter that missed one edge (probes attached between an entry and its exit) would be
// wrong for the rest of the recording. A flag older than CONTEXT_STALE_NS is ignored for the same reason.
struct irq_context {
    u64 hardirq_ns;
    u64 softirq_ns;
    u64 hrtimer_ns;
    u64 hrtimer_function;
};
#define CONTEXT_STALE_NS 20000000ULL

struct rq_key {
    u32 dev;
    u32 pad;
    u64 sector;
};

struct rq_owner {
    s32 tid;
    s32 pid;
};

BPF_RINGBUF_OUTPUT(events, RINGBUF_PAGES);
BPF_HASH(targets, u32, u8, 4096);
BPF_HASH(tids, u32, u32, 65536);
// [kind * 2] events written, [kind * 2 + 1] events lost (ring buffer full), summed over CPUs by user space
BPF_PERCPU_ARRAY(counters, u64, 2 * NR_KINDS);
BPF_PERCPU_ARRAY(irqctx, struct irq_context, 1);
BPF_TABLE("lru_hash", struct rq_key, struct rq_owner, inflight, 16384);

static __always_inline void count(u32 slot) {
    u64 *n = counters.lookup(&slot);
    if (n)
        *n += 1;
}

static __always_inline struct event *reserve(u32 kind) {
    struct event *e = events.ringbuf_reserve(sizeof(struct event));
    if (!e) {
        count(kind * 2 + 1);
        return 0;
    }
    count(kind * 2);
    e->t_ns = bpf_ktime_get_ns();
    e->kind = kind;
    e->cpu = bpf_get_smp_processor_id();
    e->tid = -1;
    e->pid = -1;
    e->tid2 = -1;
    e->pid2 = -1;
    e->a = 0;
    e->b = 0;
    e->x = 0;
    e->y = 0;
    e->z = 0;
    __builtin_memset(e->comm, 0, sizeof(e->comm));
    __builtin_memset(e->comm2, 0, sizeof(e->comm2));
    return e;
}

// tgid of a thread id, -1 when it is not a known target thread.
static __always_inline s32 target_tgid(u32 tid) {
    u32 *tgid = tids.lookup(&tid);
    return tgid ? (s32)*tgid : -1;
}

// Is the current task in a target process? Learns (or corrects) its tid -> tgid entry on the way.
static __always_inline int current_is_target(u32 *tid_out, u32 *tgid_out) {
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
    u32 tid = (u32)id;
    *tid_out = tid;
    *tgid_out = tgid;
    if (targets.lookup(&tgid)) {
        u32 *known = tids.lookup(&tid);
        if (!known || *known != tgid)
            tids.update(&tid, &tgid);
        return 1;
    }
    return 0;
}

static __always_inline int active(u64 since, u64 now) {
    return since && now - since < CONTEXT_STALE_NS;
}

static __always_inline u64 wake_context(u64 *function) {
    u32 zero = 0;
    struct irq_context *c = irqctx.lookup(&zero);
    if (!c)
        return CTX_TASK;
    u64 now = bpf_ktime_get_ns();
    if (active(c->hrtimer_ns, now)) {
        *function = c->hrtimer_function;
        return CTX_HRTIMER;
    }
    if (active(c->hardirq_ns, now))
        return CTX_HARDIRQ;
    if (active(c->softirq_ns, now))
        return CTX_SOFTIRQ;
    return CTX_TASK;
}

#ifdef WITH_WAKE_CONTEXT
// Interrupt context per CPU, so that a wake-up done by an interrupt is not blamed on the task it
// interrupted. The exit probes come first in this file: BCC attaches in this order, so no handler can
// be seen entering without its exit being watched already; and they come before the sched probes, so
// the context is tracked before the first wake-up is recorded.
static __always_inline struct irq_context *ctx_now(void) {
    u32 zero = 0;
    return irqctx.lookup(&zero);
}

TRACEPOINT_PROBE(irq, irq_handler_exit) {
    struct irq_context *c = ctx_now();
    if (c)
        c->hardirq_ns = 0;
    return 0;
}

TRACEPOINT_PROBE(irq, softirq_exit) {
    struct irq_context *c = ctx_now();
    if (c)
        c->softirq_ns = 0;
    return 0;
}

TRACEPOINT_PROBE(timer, hrtimer_expire_exit) {
    struct irq_context *c = ctx_now();
    if (c)
        c->hrtimer_ns = 0;
    return 0;
}

TRACEPOINT_PROBE(irq, irq_handler_entry) {
    struct irq_context *c = ctx_now();
    if (c)
        c->hardirq_ns = bpf_ktime_get_ns();
    return 0;
}

TRACEPOINT_PROBE(irq, softirq_entry) {
    struct irq_context *c = ctx_now();
    if (c)
        c->softirq_ns = bpf_ktime_get_ns();
    return 0;
}

TRACEPOINT_PROBE(timer, hrtimer_expire_entry) {
    struct irq_context *c = ctx_now();
    if (c) {
        c->hrtimer_function = (u64)args->function;
        c->hrtimer_ns = bpf_ktime_get_ns();
    }
    return 0;
}
#endif

#ifdef WITH_SCHED
TRACEPOINT_PROBE(sched, sched_switch) {
    u32 cur_tid, cur_tgid;
    int prev_is_target = current_is_target(&cur_tid, &cur_tgid);  // current is prev here (__schedule)
    if (!prev_is_target) {
        // A fork child learned at sched_process_fork that turned out to be another process: forget it.
        u32 *stale = tids.lookup(&cur_tid);
        if (stale)
            tids.delete(&cur_tid);
    }
    u32 next = args->next_pid;
    s32 next_tgid = target_tgid(next);
    if (!prev_is_target && next_tgid < 0)
        return 0;
    struct event *e = reserve(KIND_SWITCH);
    if (!e)
        return 0;
    e->tid = args->prev_pid;
    e->pid = cur_tgid;
    e->tid2 = next;
    e->pid2 = next_tgid;
    e->a = args->prev_prio;
    e->b = args->next_prio;
    e->x = args->prev_state;
    bpf_probe_read_kernel(e->comm, sizeof(e->comm), args->prev_comm);
    bpf_probe_read_kernel(e->comm2, sizeof(e->comm2), args->next_comm);
    events.ringbuf_submit(e, 0);
    return 0;
}

static __always_inline int on_wakeup(u32 kind, u32 wakee, int prio, int target_cpu, const char *comm) {
    s32 wakee_tgid = target_tgid(wakee);
    if (wakee_tgid < 0)
        return 0;
    struct event *e = reserve(kind);
    if (!e)
        return 0;
    e->tid = wakee;
    e->pid = wakee_tgid;
    e->a = prio;
    e->b = target_cpu;
    bpf_probe_read_kernel(e->comm, sizeof(e->comm), comm);
    if (kind != KIND_WAKEUP) {
        // sched_waking and sched_wakeup_new run in the waker's context (try_to_wake_up(),
        // wake_up_new_task()): current is the waker, unless an interrupt is doing the waking.
        u64 id = bpf_get_current_pid_tgid();
        e->tid2 = (u32)id;
        e->pid2 = id >> 32;
        bpf_get_current_comm(e->comm2, sizeof(e->comm2));
        u64 function = 0;
        e->z = wake_context(&function);
        e->x = function;
    }
    events.ringbuf_submit(e, 0);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_waking) {
    return on_wakeup(KIND_WAKING, args->pid, args->prio, args->target_cpu, args->comm);
}

TRACEPOINT_PROBE(sched, sched_wakeup) {
    return on_wakeup(KIND_WAKEUP, args->pid, args->prio, args->target_cpu, args->comm);
}

TRACEPOINT_PROBE(sched, sched_wakeup_new) {
    return on_wakeup(KIND_WAKEUP_NEW, args->pid, args->prio, args->target_cpu, args->comm);
}

TRACEPOINT_PROBE(sched, sched_process_fork) {
    // Runs in the parent (kernel_clone() after copy_process()), before wake_up_new_task(): the child's
    // first wake-up and switch-in are caught. A new thread shares the parent's tgid; a new process
    // does not, and sched_switch forgets it when it first runs.
    u32 tid, tgid;
    if (!current_is_target(&tid, &tgid))
        return 0;
    u32 child = args->child_pid;
    tids.update(&child, &tgid);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exit) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    tids.delete(&tid);
    return 0;
}
#endif

#ifdef WITH_FAULTS
TRACEPOINT_PROBE(exceptions, page_fault_user) {
    u32 tid, tgid;
    if (!current_is_target(&tid, &tgid))
        return 0;
    struct event *e = reserve(KIND_PAGE_FAULT);
    if (!e)
        return 0;
    e->tid = tid;
    e->pid = tgid;
    e->x = args->address;
    e->y = args->ip;
    e->z = args->error_code;
    events.ringbuf_submit(e, 0);
    return 0;
}
#endif

#ifdef WITH_BLOCK
TRACEPOINT_PROBE(block, block_rq_issue) {
    u32 tid, tgid;
    int mine = current_is_target(&tid, &tgid);
#ifndef BLOCK_ALL
    if (!mine)
        return 0;
#endif
    struct rq_key key = {};
    key.dev = args->dev;
    key.sector = args->sector;
    struct rq_owner owner = {.tid = (s32)tid, .pid = (s32)tgid};
    inflight.update(&key, &owner);
    struct event *e = reserve(KIND_RQ_ISSUE);
    if (!e)
        return 0;
    e->tid = tid;
    e->pid = tgid;
    e->a = args->nr_sector;
    e->b = args->bytes;
    e->x = args->sector;
    e->y = args->dev;
    bpf_probe_read_kernel(e->comm, sizeof(args->rwbs), args->rwbs);
    bpf_get_current_comm(e->comm2, sizeof(e->comm2));
    events.ringbuf_submit(e, 0);
    return 0;
}

TRACEPOINT_PROBE(block, block_rq_complete) {
    // Runs in interrupt context: current means nothing; the issuer comes from `inflight`.
    struct rq_key key = {};
    key.dev = args->dev;
    key.sector = args->sector;
    struct rq_owner *owner = inflight.lookup(&key);
    if (!owner)
        return 0;
    s32 tid = owner->tid;
    s32 pid = owner->pid;
    inflight.delete(&key);
    struct event *e = reserve(KIND_RQ_COMPLETE);
    if (!e)
        return 0;
    e->tid = tid;
    e->pid = pid;
    e->a = args->nr_sector;
    e->b = args->error;
    e->x = args->sector;
    e->y = args->dev;
    bpf_probe_read_kernel(e->comm, sizeof(args->rwbs), args->rwbs);
    events.ringbuf_submit(e, 0);
    return 0;
}
#endif
