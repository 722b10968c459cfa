/* A SCHED_FIFO CPU hog on every CPU at once, on cue: what starves an audio engine's driver.
 *
 * fifo_hog PRIORITY SPIN_MS COUNT GAP_MS
 * One child per online CPU, pinned to it, SCHED_FIFO at PRIORITY. Every child spins from the same
 * absolute CLOCK_MONOTONIC instants (clock_nanosleep TIMER_ABSTIME), COUNT times, GAP_MS apart, for
 * SPIN_MS each. Python threads cannot do this (one holds the GIL at a time), hence C and processes.
 * Prints one line per injection: "hog START_NS END_NS" (CLOCK_MONOTONIC, the capture's clock).
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
    int failed = 0, status;
    while (wait(&status) > 0) {
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            failed = 1;
        }
    }
    for (int k = 0; k < count; k++) {
        printf("hog %lld %lld\n", first + k * gap, first + k * gap + spin);
    }
    return failed;
}
