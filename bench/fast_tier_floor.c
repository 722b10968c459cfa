// The floor of the fast tier's /proc reads in C: bench/fast_tier_floor.py's loop without Python.
//
//     fast_tier_floor PID TICKS INTERVAL_US TID...
//
// Ticks every INTERVAL_US (absolute CLOCK_MONOTONIC deadlines, as the recorder) over the given threads of PID
// (fast_tier_floor.py passes its real-time ones), in three modes one after the other: schedstat every tick;
// stat too when schedstat moved; sched too when it moved. Prints one JSON line per mode: CPU as a share of a
// core (getrusage, user + system), reads, moves per tick, ticks missed.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static long long ns_of(struct timespec t) { return t.tv_sec * 1000000000LL + t.tv_nsec; }

static long long cpu_ns(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000000000LL + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1000LL;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: fast_tier_floor PID TICKS INTERVAL_US TID...\n");
        return 2;
    }
    int pid = atoi(argv[1]), ticks = atoi(argv[2]);
    long long interval = atoll(argv[3]) * 1000LL;
    int n = argc - 4;
    int *fd = calloc((size_t)n * 3, sizeof(int));
    char (*last)[128] = calloc((size_t)n, 128);
    static char buf[8192];
    const char *names[3] = {"schedstat", "stat", "sched"};
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 3; k++) {
            char path[128];
            snprintf(path, sizeof path, "/proc/%d/task/%s/%s", pid, argv[4 + i], names[k]);
            fd[i * 3 + k] = open(path, O_RDONLY);
            if (fd[i * 3 + k] < 0) {
                perror(path);
                return 1;
            }
        }
    const char *modes[3] = {"schedstat", "schedstat, stat on a move", "schedstat, stat and sched on a move"};
    for (int mode = 0; mode < 3; mode++) {
        memset(last, 0, (size_t)n * 128);
        long long reads = 0, moved = 0, missed = 0;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long start = ns_of(now), due = start, cpu0 = cpu_ns();
        for (int t = 0; t < ticks; t++) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            long long at = ns_of(now);
            if (at < due) {
                struct timespec wake = {due / 1000000000LL, due % 1000000000LL};
                clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &wake, NULL);
            } else if (at - due >= interval) {
                missed += (at - due) / interval;
                due += (at - due) / interval * interval;
            }
            for (int i = 0; i < n; i++) {
                ssize_t got = pread(fd[i * 3], buf, 128, 0);
                reads++;
                if (got <= 0 || got >= 128)
                    continue;
                buf[got] = 0;
                if (memcmp(buf, last[i], (size_t)got + 1) != 0) {
                    memcpy(last[i], buf, (size_t)got + 1);
                    moved++;
                    if (mode >= 1) {
                        pread(fd[i * 3 + 1], buf, 1024, 0);
                        reads++;
                    }
                    if (mode >= 2) {
                        pread(fd[i * 3 + 2], buf, sizeof buf, 0);
                        reads++;
                    }
                }
            }
            due += interval;
        }
        long long cpu = cpu_ns() - cpu0;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long wall = ns_of(now) - start;
        printf("{\"mode\": \"%s\", \"cpu_pct\": %.1f, \"us_per_tick\": %.0f, \"moved_per_tick\": %.1f, "
               "\"ns_per_read\": %.0f, \"missed\": %lld}\n",
               modes[mode], 100.0 * cpu / wall, cpu / 1000.0 / ticks, (double)moved / ticks, (double)cpu / reads,
               missed);
    }
    return 0;
}
