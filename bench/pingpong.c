/* Two threads of one process hand a byte back and forth through two pipes, on one CPU, as fast as they can:
 * each round trip is two wake-ups and two context switches, so the time a round trip takes grows by what the
 * scheduler's tracepoints cost when a sampler's probes are attached (bench/probe_overhead.py). The process's
 * CPU time is reported beside the elapsed time: the probes are charged to the thread that hits them, and
 * CPU time, unlike elapsed time, leaves out the waits for a CPU that other load causes.
 * usage: pingpong CPU SECONDS   -> prints "ready", waits for a line on stdin, runs, then prints
 *                                   "<round trips> <elapsed ns> <process CPU ns>"
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int ab[2], ba[2];
static volatile int stop;

static long clock_ns(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static long now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *echo(void *arg) {
    pin((int)(long)arg);
    char c;
    while (read(ab[0], &c, 1) == 1 && c)
        if (write(ba[1], &c, 1) != 1) break;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: pingpong CPU SECONDS\n"); return 2; }
    int cpu = atoi(argv[1]);
    double seconds = atof(argv[2]);
    if (pipe(ab) || pipe(ba)) { perror("pipe"); return 1; }
    pin(cpu);
    pthread_t t;
    pthread_create(&t, NULL, echo, (void *)(long)cpu);
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 1;
    char c = 1;
    long cpu_start = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    long trips = 0, start = now_ns(), end = start + (long)(seconds * 1e9), t_now = start;
    while (t_now < end) {
        for (int i = 0; i < 1000; i++) {
            if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1) return 1;
        }
        trips += 1000;
        t_now = now_ns();
    }
    long cpu_ns = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu_start;
    c = 0;
    if (write(ab[1], &c, 1) != 1) return 1;
    pthread_join(t, NULL);
    printf("%ld %ld %ld\n", trips, t_now - start, cpu_ns);
    return 0;
}
