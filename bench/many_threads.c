/* A target for the sampler benchmark: N threads shaped like a plugin host's.
 * One in ten is periodic (wakes every 5.333 ms on an absolute clock, computes ~50 us), the rest
 * block (as most of a DAW's threads do). With --churn S, a further thread is created and ended
 * every S seconds (thread churn for the fd/memory bound check).
 * usage: many_threads N SECONDS [--churn S]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static volatile int stop;
static volatile double sink;

static void add_ns(struct timespec *t, long ns) {
    t->tv_nsec += ns;
    while (t->tv_nsec >= 1000000000L) { t->tv_nsec -= 1000000000L; t->tv_sec++; }
}

static void *periodic(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "periodic-%ld", (long)arg);
    prctl(PR_SET_NAME, name);
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (!stop) {
        add_ns(&next, 5333333);
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        double x = 0;
        for (int i = 0; i < 20000; i++) x += i * 0.5;
        sink = x;
    }
    return NULL;
}

static void *idle(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "idle-%ld", (long)arg);
    prctl(PR_SET_NAME, name);
    while (!stop) sleep(1);
    return NULL;
}

static void *short_lived(void *arg) {
    prctl(PR_SET_NAME, "churn");
    usleep(200000);
    return arg;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s N SECONDS [--churn S]\n", argv[0]); return 2; }
    int n = atoi(argv[1]);
    double seconds = atof(argv[2]);
    double churn = (argc >= 5 && !strcmp(argv[3], "--churn")) ? atof(argv[4]) : 0;
    pthread_t *threads = calloc(n, sizeof *threads);
    for (long i = 1; i < n; i++)  /* the main thread is thread 0 */
        pthread_create(&threads[i], NULL, (i % 10 == 1) ? periodic : idle, (void *)i);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    long churned = 0;
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        double elapsed = (now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9;
        if (elapsed >= seconds) break;
        if (churn > 0) {
            pthread_t t;
            pthread_create(&t, NULL, short_lived, NULL);
            pthread_detach(t);
            churned++;
            usleep((useconds_t)(churn * 1e6));
        } else {
            usleep(100000);
        }
    }
    stop = 1;
    printf("%ld\n", churned);
    return 0;
}
