/* Hand-written C references for scripts/bench-vs-c: pointer chase, sequential read, top-k gather.
 *
 * The contract of sactool's kernels (sactool/bench/kernels.py, gathergen.py, suite.py):
 *   chase   i = buf[i] over a random cyclic permutation of 64 B lines, one thread;
 *   read    sum of uint64 words, each thread its own contiguous slice;
 *   gather  memcpy of record (idx[i] + shift) mod records into slot i & (slots-1) of a ring of
 *           slots = topk rounded up to a power of two, one ring per thread; while copying record i,
 *           prefetch the first P bytes of record i+D (P = R: every line of it); every pass over the
 *           stored index stream shifted by splitmix64(seed, thread, pass) mod records, as sactool does.
 * The record size is a compile-time constant for 64, 656, 4096 and 16384 B (as gcc sees it in a
 * hand-written kernel); P and D are run-time values (a loop of prefetches; D=0: none).
 *
 * Build (scripts/bench-vs-c does it): gcc -O3 -march=native -pthread -o vsc vsc.c
 *   and as a library for ctypes: gcc -O3 -march=native -shared -fPIC -DVSC_LIB -o libvsc.so vsc.c
 * Usage: vsc SIZE_BYTES thp|none CPULIST SAMPLES MIN_SECONDS SEED TEST...
 *   TEST = chase | read:THREADS | gather:R:TOPK:THREADS:D:P:STEPS
 * Output: one JSON object per test: wall-clock samples and the same samples from each thread's
 * on-CPU time (CLOCK_THREAD_CPUTIME_ID), chase in ns per load, the others in bytes per second.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define LINE 64

#define GATHER_BODY(RR)                                                                             \
    for (size_t i = lo; i < hi; i++) {                                                              \
        if (D && i + D < hi) {                                                                      \
            uint64_t p = idx[i + D] + shift;                                                        \
            if (p >= records) p -= records;                                                         \
            const char *a = src + p * (RR);                                                         \
            for (size_t off = 0; off < P; off += LINE) __builtin_prefetch(a + off, 0, 3);           \
            if ((P | (RR)) % LINE) __builtin_prefetch(a + P - 1, 0, 3);                             \
        }                                                                                           \
        uint64_t r = idx[i] + shift;                                                                \
        if (r >= records) r -= records;                                                             \
        memcpy(dst + (i & mask) * (RR), src + r * (RR), (RR));                                      \
    }

void vsc_gather(const char *src, char *dst, const uint64_t *idx, size_t lo, size_t hi, uint64_t shift,
                uint64_t records, size_t R, size_t D, size_t P, size_t mask) {
    switch (R) {
    case 64: GATHER_BODY(64) break;
    case 656: GATHER_BODY(656) break;
    case 4096: GATHER_BODY(4096) break;
    case 16384: GATHER_BODY(16384) break;
    default: GATHER_BODY(R) break;
    }
}

uint64_t vsc_chase(const uint64_t *b, uint64_t i, uint64_t steps) {
    for (uint64_t s = 0; s < steps; s++) i = b[i];
    return i;
}

uint64_t vsc_read(const uint64_t *a, size_t lo, size_t hi) {
    uint64_t s = 0;
    for (size_t i = lo; i < hi; i++) s += a[i];
    return s;
}

#ifndef VSC_LIB
static uint64_t splitmix(uint64_t seed, uint64_t thread, uint64_t n) {
    uint64_t z = seed * 0x100000001B3ull + thread * 0x1000193ull + (n + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static double cpu_now(void) {
    struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9;
}
static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void) { rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27; return rng * 2685821657736338717ull; }

static char *buf; static size_t size_bytes; static int ncpus; static int cpus[256]; static uint64_t seed;
static void pin(int cpu) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(cpu, &s); pthread_setaffinity_np(pthread_self(), sizeof s, &s); }

typedef struct {
    int kind; /* 0 chase, 1 read, 2 gather */
    int threads; size_t R, topk, D, P, steps, n, records; uint64_t *idx; uint64_t passes[256]; uint64_t reps;
} test_t;
typedef struct { test_t *t; int k; uint64_t reps; pthread_barrier_t *bar; double cpu, work; char *dst; } targ;

static uint64_t chase_at; static volatile uint64_t sink;

static void *worker(void *p) {
    targ *a = p; test_t *t = a->t;
    pin(cpus[a->k % ncpus]);
    pthread_barrier_wait(a->bar);
    double c0 = cpu_now();
    if (t->kind == 1) {
        size_t words = size_bytes / 8, per = (words / t->threads) / 512 * 512;
        size_t lo = a->k * per, hi = a->k == t->threads - 1 ? words : lo + per;
        uint64_t s = 0;
        for (uint64_t r = 0; r < a->reps; r++) s += vsc_read((const uint64_t *)buf, lo, hi);
        sink = s;
        a->work = (double)a->reps * (hi - lo) * 8;
    } else {
        size_t per = (t->n + t->threads - 1) / t->threads, lo = a->k * per, hi = lo + per > t->n ? t->n : lo + per;
        size_t slots = 1; while (slots < t->topk) slots <<= 1;
        for (uint64_t r = 0; r < a->reps; r++) {
            uint64_t sh = splitmix(seed, a->k, t->passes[a->k]++) % t->records;
            vsc_gather(buf, a->dst, t->idx, lo, hi, sh, t->records, t->R, t->D, t->P, slots - 1);
        }
        a->work = (double)a->reps * (hi - lo) * t->R;
    }
    a->cpu = cpu_now() - c0;
    return NULL;
}

static double cpu_value;
static double run(test_t *t, uint64_t reps) {
    if (t->kind == 0) {
        double t0 = now(), c0 = cpu_now();
        chase_at = vsc_chase((const uint64_t *)buf, chase_at, reps);
        double s = now() - t0;
        cpu_value = (cpu_now() - c0) * 1e9 / reps;
        return s * 1e9 / reps;
    }
    pthread_t th[256]; targ args[256]; pthread_barrier_t bar;
    size_t slots = 1; while (slots < t->topk) slots <<= 1;
    pthread_barrier_init(&bar, NULL, t->threads + 1);
    for (int k = 0; k < t->threads; k++) {
        args[k] = (targ){t, k, reps, &bar, 0, 0, NULL};
        if (t->kind == 2) { args[k].dst = aligned_alloc(4096, slots * t->R); memset(args[k].dst, 0, slots * t->R); }
        pthread_create(&th[k], NULL, worker, &args[k]);
    }
    pthread_barrier_wait(&bar);
    double t0 = now();
    for (int k = 0; k < t->threads; k++) pthread_join(th[k], NULL);
    double s = now() - t0, work = 0;
    cpu_value = 0;
    for (int k = 0; k < t->threads; k++) {
        work += args[k].work;
        if (args[k].cpu > 0) cpu_value += args[k].work / args[k].cpu;
        free(args[k].dst);
    }
    pthread_barrier_destroy(&bar);
    return work / s;
}

static void build_chain(void) {
    size_t lines = size_bytes / LINE, wpl = LINE / 8;
    uint64_t *order = malloc(lines * sizeof *order);
    for (size_t i = 0; i < lines; i++) order[i] = i;
    for (size_t i = lines - 1; i > 0; i--) { size_t j = rnd() % (i + 1); uint64_t x = order[i]; order[i] = order[j]; order[j] = x; }
    uint64_t *w = (uint64_t *)buf;
    for (size_t k = 0; k < lines; k++) w[order[k] * wpl] = order[(k + 1) % lines] * wpl;
    chase_at = order[0] * wpl;
    free(order);
}

static void make_indices(test_t *t) {  /* uniform, distinct within each step, in draw order */
    t->records = size_bytes / t->R; t->n = t->steps * t->topk;
    t->idx = malloc(t->n * sizeof *t->idx);
    uint8_t *seen = calloc(t->records / 8 + 1, 1);
    for (size_t s = 0; s < t->steps; s++) {
        uint64_t *row = t->idx + s * t->topk;
        for (size_t k = 0; k < t->topk;) {
            uint64_t r = rnd() % t->records;
            if (seen[r / 8] & (1 << (r % 8))) continue;
            seen[r / 8] |= 1 << (r % 8); row[k++] = r;
        }
        for (size_t k = 0; k < t->topk; k++) seen[row[k] / 8] &= ~(1 << (row[k] % 8));
    }
    free(seen);
}

static long thp_kb(void) {
    FILE *f = fopen("/proc/self/smaps", "r"); char line[256]; int in = 0; long kb = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, ':') > strchr(line, ' ')) {
            if (in) break;
            in = (uintptr_t)buf >= lo && (uintptr_t)buf < hi;
        } else if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
    }
    fclose(f);
    return kb;
}

int main(int argc, char **argv) {
    if (argc < 8) { fprintf(stderr, "usage: vsc SIZE thp|none CPULIST SAMPLES MIN_SECONDS SEED TEST...\n"); return 2; }
    size_bytes = strtoull(argv[1], NULL, 10);
    int thp = !strcmp(argv[2], "thp");
    for (char *tok = strtok(argv[3], ","); tok && ncpus < 256; tok = strtok(NULL, ",")) cpus[ncpus++] = atoi(tok);
    int samples = atoi(argv[4]); double min_s = atof(argv[5]); seed = strtoull(argv[6], NULL, 10);
    int ntest = argc - 7; char **names = argv + 7;
    if (samples > 256 || ntest > 256 || ncpus < 1) { fprintf(stderr, "too many samples or tests, or no CPU\n"); return 2; }
    buf = mmap(NULL, size_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) { perror("mmap"); return 1; }
    madvise(buf, size_bytes, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    pin(cpus[0]);
    for (size_t off = 0; off < size_bytes; off += 4096) ((volatile char *)buf)[off] = 1;
    test_t *t = calloc(ntest, sizeof *t);
    int chase = 0;
    for (int k = 0; k < ntest; k++) {
        if (!strcmp(names[k], "chase")) { t[k].kind = 0; t[k].threads = 1; chase = 1; }
        else if (sscanf(names[k], "read:%d", &t[k].threads) == 1) t[k].kind = 1;
        else if (sscanf(names[k], "gather:%zu:%zu:%d:%zu:%zu:%zu", &t[k].R, &t[k].topk, &t[k].threads, &t[k].D,
                        &t[k].P, &t[k].steps) == 6) { t[k].kind = 2; make_indices(&t[k]); }
        else { fprintf(stderr, "unknown test %s\n", names[k]); return 2; }
        if (t[k].threads < 1 || t[k].threads > 256) { fprintf(stderr, "bad thread count in %s\n", names[k]); return 2; }
    }
    if (chase) build_chain();  /* after the gathers' records were drawn: the chain overwrites the buffer */
    for (int k = 0; k < ntest; k++) {  /* warm-up and calibration */
        uint64_t r = t[k].kind == 0 ? 1 << 15 : 1;
        for (;;) {
            double v = run(&t[k], r), secs = t[k].kind == 0 ? v * r * 1e-9 : 0;
            if (t[k].kind != 0) { double bytes = t[k].kind == 1 ? (double)size_bytes * r : (double)t[k].n * t[k].R * r; secs = bytes / v; }
            if (secs >= min_s || r > (1ull << 40)) break;
            r = secs > 0 ? (uint64_t)(r * min_s / secs * 1.2) + 1 : r * 2;
        }
        t[k].reps = r;
    }
    static double wall[256][256], oncpu[256][256];
    for (int s = 0; s < samples; s++)  /* rotated rounds */
        for (int j = 0; j < ntest; j++) {
            int k = (j + s) % ntest;
            wall[k][s] = run(&t[k], t[k].reps);
            oncpu[k][s] = cpu_value;
        }
    long kb = thp_kb();
    for (int k = 0; k < ntest; k++) {
        printf("{\"test\": \"%s\", \"anon_huge_bytes\": %ld, \"samples\": [", names[k], kb < 0 ? -1 : kb * 1024);
        for (int s = 0; s < samples; s++) printf("%s%.6g", s ? ", " : "", wall[k][s]);
        printf("], \"on_cpu_samples\": [");
        for (int s = 0; s < samples; s++) printf("%s%.6g", s ? ", " : "", oncpu[k][s]);
        printf("]}\n");
    }
    return 0;
}
#endif
