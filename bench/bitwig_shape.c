/* A target shaped like the Bitwig set-up of the users' investigation (121 real-time audio threads, 412
 * others): RT threads at SCHED_FIFO 10 woken every 5.333 ms on an absolute clock, each doing ~10 us of work
 * (about a quarter of a core in all); ASLEEP SCHED_OTHER threads that wake once a second and sleep again
 * (as a DAW's UI, disk and timer threads mostly do); BUSY SCHED_OTHER threads that compute 2 ms of every
 * 10 ms. SCHED_FIFO needs root (or an rtprio limit): without it the RT threads stay SCHED_OTHER, said on stderr.
 * usage: bitwig_shape RT ASLEEP BUSY SECONDS
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static volatile int stop;
static volatile double sink;

static void add_ns(struct timespec *t, long ns) {
    t->tv_nsec += ns;
    while (t->tv_nsec >= 1000000000L) { t->tv_nsec -= 1000000000L; t->tv_sec++; }
}

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void spin_ns(long ns) {
    long end = now_ns() + ns;
    double x = 0;
    while (now_ns() < end) for (int i = 0; i < 100; i++) x += i * 0.5;
    sink = x;
}

static void *audio(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "audio-%ld", (long)arg);
    prctl(PR_SET_NAME, name);
    struct sched_param param = {.sched_priority = 10};
    if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &param) != 0 && (long)arg == 0)
        fprintf(stderr, "bitwig_shape: SCHED_FIFO not permitted: audio threads stay SCHED_OTHER\n");
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (!stop) {
        add_ns(&next, 5333333);
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        spin_ns(10000);
    }
    return NULL;
}

static void *asleep(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "other-%ld", (long)arg);
    prctl(PR_SET_NAME, name);
    usleep((useconds_t)((long)arg * 7919 % 999983));  /* spread the wake-ups over the second */
    while (!stop) sleep(1);
    return NULL;
}

static void *busy(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "busy-%ld", (long)arg);
    prctl(PR_SET_NAME, name);
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (!stop) {
        spin_ns(2000000);
        add_ns(&next, 10000000);
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: %s RT ASLEEP BUSY SECONDS\n", argv[0]); return 2; }
    int rt = atoi(argv[1]), other = atoi(argv[2]), hot = atoi(argv[3]);
    pthread_t t;
    for (long i = 0; i < rt; i++) pthread_create(&t, NULL, audio, (void *)i);
    for (long i = 0; i < other; i++) pthread_create(&t, NULL, asleep, (void *)i);
    for (long i = 0; i < hot; i++) pthread_create(&t, NULL, busy, (void *)i);
    printf("ready %d\n", rt + other + hot + 1);  /* every thread started: a bench may record from here */
    fflush(stdout);
    long end = now_ns() + (long)(atof(argv[4]) * 1e9);
    while (now_ns() < end) usleep(100000);  /* usleep refuses a second or more */
    stop = 1;
    return 0;
}
