/* A SCHED_FIFO CPU hog on every CPU at once, on cue: what starves an audio engine's driver.
 *
 * fifo_hog PRIORITY SPIN_MS COUNT GAP_MS
 * One child per online CPU, pinned to it, SCHED_FIFO at PRIORITY. Every child spins from the same
 * absolute CLOCK_MONOTONIC instants (clock_nanosleep TIMER_ABSTIME), COUNT times, GAP_MS apart, for
 * SPIN_MS each. Python threads cannot do this (one holds the GIL at a time), hence C and processes.
 * Prints one line per injection: "hog START_NS END_NS STEAL_NS" (CLOCK_MONOTONIC, the capture's clock;
 * STEAL_NS: the machine's hypervisor steal over it, /proc/stat read by the parent 1 ms before the spin and
 * as soon as it ends, so the 300 ms the children take to get ready never count; in 10 ms ticks, -1 where
 * /proc/stat has no steal field).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* /proc/stat's first line, field 8: all CPUs' steal in USER_HZ ticks (proc(5)); -1 if absent. */
static long long steal_ns(void) {
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                       &v[6], &v[7])
              : 0;
    if (f) {
        fclose(f);
    }
    return n == 8 ? (long long)v[7] * (1000000000LL / sysconf(_SC_CLK_TCK)) : -1;
}

static void sleep_until(long long t) {
    struct timespec ts = {.tv_sec = t / 1000000000LL, .tv_nsec = t % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: fifo_hog PRIORITY SPIN_MS COUNT GAP_MS\n");
        return 2;
    }
    int prio = atoi(argv[1]);
    long long spin = atoll(argv[2]) * 1000000LL;
    int count = atoi(argv[3]);
    long long gap = atoll(argv[4]) * 1000000LL;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long long first = now_ns() + 300000000LL; /* time for every child to get ready */
    for (long cpu = 0; cpu < cpus; cpu++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(cpu, &set);
            if (sched_setaffinity(0, sizeof set, &set) != 0) {
                perror("sched_setaffinity");
                _exit(1);
            }
            struct sched_param sp = {.sched_priority = prio};
            if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
                perror("sched_setscheduler");
                _exit(1);
            }
            for (int k = 0; k < count; k++) {
                long long start = first + k * gap;
                sleep_until(start);
                while (now_ns() < start + spin) {
                }
            }
            _exit(0);
        }
    }
    /* The parent is SCHED_OTHER: it wakes 1 ms before each spin and reads again as soon as a CPU is free,
     * that is when the children's spin ends. */
    long long *stolen = calloc(count > 0 ? count : 1, sizeof *stolen);
    for (int k = 0; k < count; k++) {
        long long start = first + k * gap;
        sleep_until(start - 1000000LL);
        long long before = steal_ns();
        sleep_until(start + spin);
        long long after = steal_ns();
        stolen[k] = before < 0 || after < 0 ? -1 : after - before;
    }
    int failed = 0, status;
    while (wait(&status) > 0) {
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            failed = 1;
        }
    }
    for (int k = 0; k < count; k++) {
        printf("hog %lld %lld %lld\n", first + k * gap, first + k * gap + spin, stolen[k]);
    }
    return failed;
}
