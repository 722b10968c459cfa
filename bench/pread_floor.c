/* The floor for the sampler's per-read cost: the same pread loop in C, on the same files.
 * Opens /proc/PID/task/TID/{schedstat,stat} of every thread of PID, then reads every file
 * ROUNDS times at offset 0 and prints CPU ns per read (CLOCK_PROCESS_CPUTIME_ID) and wall ns per read.
 * With INTERVAL_US, the rounds are ticks INTERVAL_US apart on an absolute clock, as the sampler's
 * are: the CPU per read then includes what ticking costs (the wake-up, cold caches after a sleep).
 * usage: pread_floor PID ROUNDS [INTERVAL_US]
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double ns(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) { fprintf(stderr, "usage: %s PID ROUNDS [INTERVAL_US]\n", argv[0]); return 2; }
    long interval_ns = argc == 4 ? atol(argv[3]) * 1000L : 0;
    char path[256], buf[1024];
    snprintf(path, sizeof path, "/proc/%s/task", argv[1]);
    DIR *dir = opendir(path);
    if (!dir) { perror(path); return 1; }
    int fds[8192], n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) && n < 8190) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/%s/task/%s/schedstat", argv[1], e->d_name);
        fds[n] = open(path, O_RDONLY);
        if (fds[n] >= 0) n++;
        snprintf(path, sizeof path, "/proc/%s/task/%s/stat", argv[1], e->d_name);
        fds[n] = open(path, O_RDONLY);
        if (fds[n] >= 0) n++;
    }
    closedir(dir);
    long rounds = atol(argv[2]);
    struct timespec due;
    clock_gettime(CLOCK_MONOTONIC, &due);
    double c0 = ns(CLOCK_PROCESS_CPUTIME_ID), w0 = ns(CLOCK_MONOTONIC);
    for (long r = 0; r < rounds; r++) {
        if (interval_ns) {
            due.tv_nsec += interval_ns;
            while (due.tv_nsec >= 1000000000L) { due.tv_nsec -= 1000000000L; due.tv_sec++; }
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL);
        }
        for (int i = 0; i < n; i++)
            if (pread(fds[i], buf, (i % 2) ? sizeof buf : 128, 0) < 0) { /* thread gone: fine */ }
    }
    double c1 = ns(CLOCK_PROCESS_CPUTIME_ID), w1 = ns(CLOCK_MONOTONIC);
    printf("{\"files\": %d, \"reads\": %ld, \"cpu_ns_per_read\": %.1f, \"wall_ns_per_read\": %.1f}\n",
           n, n * rounds, (c1 - c0) / (n * rounds), (w1 - w0) / (n * rounds));
    return 0;
}
