/* C reference kernels for scripts/compare-anchors: pointer chase and top-k record gather.
 *
 * Same buffer recipe as sactool: anonymous mmap, mbind(MPOL_BIND) to one node, MADV_HUGEPAGE
 * (or MADV_NOHUGEPAGE), every page written before timing. Same chains (page-local / random cyclic
 * permutation of 64 B lines; the two chains live in the two halves of the buffer) and the same
 * gather (uniform distinct indices per top-k step, record i+D prefetched line by line while
 * record i is copied; record size a compile-time constant for the default sizes).
 *
 * Build: gcc -O3 -march=native -fno-tree-loop-distribute-patterns -pthread -o anchor anchor.c
 * As a library (the same kernels called from Python on sactool's own buffer, so both run on the
 * very same pages): gcc -O3 -march=native -shared -fPIC -DANCHOR_LIB -o libanchor.so anchor.c
 * Usage: anchor NODE SIZE_BYTES thp|none CPULIST LLC_BYTES SAMPLES MIN_SECONDS TEST...
 *   TEST = chase:page_local | chase:random | gather:R:TOPK:THREADS:D
 * Output: one JSON object per test on stdout with all samples (wall clock) and the same samples
 * computed from each thread's on-CPU time (CLOCK_THREAD_CPUTIME_ID), which leaves out the time
 * other processes held the CPU on a shared host.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LINE 64
#define MPOL_BIND 2

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* on-CPU seconds of the calling thread: time other processes held the CPU is not counted */
static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

static uint64_t rnd_pass(uint64_t thread, uint64_t pass) { /* splitmix64: a per-pass shift, no shared state */
    uint64_t z = (thread << 40) + pass * 0x9E3779B97F4A7C15ull + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t *buf; static size_t size_bytes; static int ncpus; static int cpus[256];

static void pin(int cpu) {
    cpu_set_t s; CPU_ZERO(&s); CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void shuffle(uint64_t *a, size_t n) {
    for (size_t i = n - 1; i > 0; i--) { size_t j = rnd() % (i + 1); uint64_t t = a[i]; a[i] = a[j]; a[j] = t; }
}

/* ---- chase --------------------------------------------------------------------------------- */
static uint64_t chain_start[2]; /* advanced by every run: samples continue along the chain */
static void build_chain(int which, int page_local) {
    size_t half_lines = size_bytes / LINE / 2, first = which * half_lines, wpl = LINE / 8;
    uint64_t *order = malloc(half_lines * sizeof *order);
    if (page_local) {
        size_t lpp = 4096 / LINE, pages = half_lines / lpp;
        uint64_t *pg = malloc(pages * sizeof *pg);
        for (size_t p = 0; p < pages; p++) pg[p] = p;
        shuffle(pg, pages);
        for (size_t p = 0; p < pages; p++) {
            uint64_t in[64];
            for (size_t k = 0; k < lpp; k++) in[k] = k;
            shuffle(in, lpp);
            for (size_t k = 0; k < lpp; k++) order[p * lpp + k] = pg[p] * lpp + in[k];
        }
        free(pg);
    } else {
        for (size_t i = 0; i < half_lines; i++) order[i] = i;
        shuffle(order, half_lines);
    }
    for (size_t k = 0; k < half_lines; k++)
        buf[(first + order[k]) * wpl] = (first + order[(k + 1) % half_lines]) * wpl;
    chain_start[which] = (first + order[0]) * wpl;
    free(order);
}

static volatile uint64_t sink;
static double last_cpu_value; /* the same sample's figure from on-CPU time */
static double run_chase(int which, uint64_t steps) {
    uint64_t i = chain_start[which];
    double t0 = now(), c0 = cpu_now();
    for (uint64_t s = 0; s < steps; s++) i = buf[i];
    double t = now() - t0;
    last_cpu_value = (cpu_now() - c0) * 1e9 / steps;
    chain_start[which] = i;
    sink = i;
    return t;
}

/* ---- gather -------------------------------------------------------------------------------- */
typedef struct { int R, topk, threads, D; uint64_t *idx; size_t n; double samples[1024]; int ns; uint64_t reps; } gcfg;
typedef struct { gcfg *g; int t; uint64_t reps; char *dst; pthread_barrier_t *bar; double cpu, bytes; } garg;

/* record (idx[i] + shift) mod records, as sactool's gather (every pass shifted, sactool/bench/gathergen.py) */
#define GATHER_BODY(RR)                                                                              \
    for (size_t i = lo; i < hi; i++) {                                                               \
        if (D && i + D < hi) {                                                                       \
            uint64_t p = idx[i + D] + shift; if (p >= records) p -= records;                         \
            const char *a = src + p * (RR);                                                          \
            for (size_t off = 0; off < (RR); off += LINE) __builtin_prefetch(a + off, 0, 3);         \
            __builtin_prefetch(a + (RR) - 1, 0, 3);                                                  \
        }                                                                                            \
        uint64_t r = idx[i] + shift; if (r >= records) r -= records;                                 \
        COPY(dst + (i & mask) * (RR), src + r * (RR), (RR));                                         \
    }

/* Record copy. Default: a loop of 8-byte words that gcc unrolls and vectorises for a constant
 * size (built with -fno-tree-loop-distribute-patterns so it is not turned back into a memcpy call);
 * -DANCHOR_MEMCPY uses glibc memcpy instead. compare-anchors builds both and keeps the faster. */
#ifdef ANCHOR_MEMCPY
#define COPY(d, s, n) memcpy((d), (s), (n))
#else
static inline void copy_words(char *restrict d, const char *restrict s, size_t n) {
    size_t k = 0;
    for (; k + 8 <= n; k += 8) { uint64_t v; memcpy(&v, s + k, 8); memcpy(d + k, &v, 8); }
    for (; k < n; k++) d[k] = s[k];
}
#define COPY(d, s, n) copy_words((d), (s), (n))
#endif

static void gather_range(const char *src, char *dst, const uint64_t *idx, size_t lo, size_t hi, uint64_t shift,
                         uint64_t records, size_t R, size_t D, size_t mask) {
    switch (R) {
    case 64: GATHER_BODY(64) break;
    case 128: GATHER_BODY(128) break;
    case 256: GATHER_BODY(256) break;
    case 656: GATHER_BODY(656) break;
    case 1152: GATHER_BODY(1152) break;
    case 4096: GATHER_BODY(4096) break;
    default: GATHER_BODY(R) break;
    }
}

static void *gather_thread(void *p) {
    garg *a = p; gcfg *g = a->g;
    pin(cpus[a->t % ncpus]);
    size_t per = (g->n + g->threads - 1) / g->threads, lo = a->t * per, hi = lo + per > g->n ? g->n : lo + per;
    size_t slots = 1; while (slots < (size_t)g->topk) slots <<= 1;
    pthread_barrier_wait(a->bar);
    double c0 = cpu_now();
    uint64_t records = size_bytes / g->R;
    for (uint64_t r = 0; r < a->reps; r++)   /* a fresh shift per pass, as sactool (its own generator) */
        gather_range((const char *)buf, a->dst, g->idx, lo, hi, rnd_pass(a->t, r) % records, records, g->R, g->D,
                     slots - 1);
    a->cpu = cpu_now() - c0;
    a->bytes = (double)a->reps * (hi - lo) * g->R;
    return NULL;
}

static double run_gather(gcfg *g, uint64_t reps) {
    pthread_t th[256]; garg args[256]; pthread_barrier_t bar;
    size_t slots = 1; while (slots < (size_t)g->topk) slots <<= 1;
    pthread_barrier_init(&bar, NULL, g->threads + 1);
    for (int t = 0; t < g->threads; t++) {
        args[t] = (garg){g, t, reps, aligned_alloc(64, slots * g->R + 64), &bar, 0, 0};
        memset(args[t].dst, 0, slots * g->R);
        pthread_create(&th[t], NULL, gather_thread, &args[t]);
    }
    pthread_barrier_wait(&bar);
    double t0 = now();
    for (int t = 0; t < g->threads; t++) pthread_join(th[t], NULL);
    double t = now() - t0;
    last_cpu_value = 0;
    for (int t2 = 0; t2 < g->threads; t2++) {
        if (args[t2].cpu > 0) last_cpu_value += args[t2].bytes / args[t2].cpu;
        free(args[t2].dst);
    }
    pthread_barrier_destroy(&bar);
    return t;
}

static void make_indices(gcfg *g, size_t llc) {
    size_t records = size_bytes / g->R, steps = (4 * llc + (size_t)g->R * g->topk - 1) / ((size_t)g->R * g->topk);
    size_t cap = (64u << 20) / (8 * (size_t)g->topk);
    if (steps < 16) steps = 16;
    if (steps > cap) steps = cap < 16 ? 16 : cap;
    g->n = steps * g->topk;
    g->idx = malloc(g->n * sizeof *g->idx);
    uint8_t *seen = calloc(records / 8 + 1, 1);
    for (size_t s = 0; s < steps; s++) {
        uint64_t *row = g->idx + s * g->topk;
        for (int k = 0; k < g->topk;) {
            uint64_t r = rnd() % records;
            if (seen[r / 8] & (1 << (r % 8))) continue;
            seen[r / 8] |= 1 << (r % 8); row[k++] = r;
        }
        for (int k = 0; k < g->topk; k++) seen[row[k] / 8] &= ~(1 << (row[k] % 8));
    }
    free(seen);
}

#ifdef ANCHOR_LIB
uint64_t anchor_chase(const uint64_t *b, uint64_t i, uint64_t steps) {
    for (uint64_t s = 0; s < steps; s++) i = b[i];
    return i;
}

void anchor_gather(const char *src, char *dst, const uint64_t *idx, size_t lo, size_t hi, uint64_t shift,
                   uint64_t records, size_t R, size_t D, size_t mask) {
    gather_range(src, dst, idx, lo, hi, shift, records, R, D, mask);
}
#else
/* ---- main ---------------------------------------------------------------------------------- */
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
    if (argc < 9) { fprintf(stderr, "usage: anchor NODE SIZE thp|none CPULIST LLC SAMPLES MIN_SECONDS TEST...\n"); return 2; }
    int node = atoi(argv[1]); size_bytes = strtoull(argv[2], NULL, 10);
    int thp = strcmp(argv[3], "thp") == 0;
    for (char *tok = strtok(argv[4], ","); tok && ncpus < 256; tok = strtok(NULL, ",")) cpus[ncpus++] = atoi(tok);
    size_t llc = strtoull(argv[5], NULL, 10); int samples = atoi(argv[6]); double min_s = atof(argv[7]);
    if (samples > 1024) samples = 1024;
    buf = mmap(NULL, size_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) { perror("mmap"); return 1; }
    madvise(buf, size_bytes, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    unsigned long mask[16] = {0}; mask[node / 64] = 1ul << (node % 64);
    if (syscall(SYS_mbind, buf, size_bytes, MPOL_BIND, mask, 16 * 64 + 1, 0) != 0) { perror("mbind"); return 1; }
    pin(cpus[0]);
    for (size_t off = 0; off < size_bytes; off += 4096) ((volatile char *)buf)[off] = 1;
    int ntest = argc - 8; char **tests = argv + 8;
    if (ntest > 256) { fprintf(stderr, "at most 256 tests\n"); return 2; }
    gcfg *g = calloc(ntest, sizeof *g); uint64_t reps[256];
    static double smp[256][1024], csmp[256][1024];
    int has_chase[2] = {0, 0};
    for (int t = 0; t < ntest; t++) {
        if (!strcmp(tests[t], "chase:page_local")) has_chase[0] = 1;
        else if (!strcmp(tests[t], "chase:random")) has_chase[1] = 1;
        else if (sscanf(tests[t], "gather:%d:%d:%d:%d", &g[t].R, &g[t].topk, &g[t].threads, &g[t].D) == 4) make_indices(&g[t], llc);
        else { fprintf(stderr, "unknown test %s\n", tests[t]); return 2; }
    }
    if (has_chase[0]) build_chain(0, 1);
    if (has_chase[1]) build_chain(1, 0);
    const uint64_t chase_steps = 1 << 15;
    for (int t = 0; t < ntest; t++) { /* warm-up and calibration */
        int is_chase = !strncmp(tests[t], "chase", 5), which = strstr(tests[t], "random") != NULL;
        uint64_t r = 1; double s;
        for (;;) {
            s = is_chase ? run_chase(which, r * chase_steps) : run_gather(&g[t], r);
            if (s >= min_s || r > (1ull << 30)) break;
            r = s > 0 ? (uint64_t)(r * min_s / s * 1.2) + 1 : r * 2;
        }
        reps[t] = r;
    }
    for (int k = 0; k < samples; k++) /* interleaved rounds, rotated order */
        for (int j = 0; j < ntest; j++) {
            int t = (j + k) % ntest;
            int is_chase = !strncmp(tests[t], "chase", 5), which = strstr(tests[t], "random") != NULL;
            double s = is_chase ? run_chase(which, reps[t] * chase_steps) : run_gather(&g[t], reps[t]);
            smp[t][k] = is_chase ? s * 1e9 / (reps[t] * chase_steps) : (double)reps[t] * g[t].n * g[t].R / s;
            csmp[t][k] = last_cpu_value;
        }
    long kb = thp_kb();
    for (int t = 0; t < ntest; t++) {
        printf("{\"test\": \"%s\", \"unit\": \"%s\", \"anon_huge_bytes\": %ld, \"samples\": [", tests[t],
               strncmp(tests[t], "chase", 5) ? "bytes_per_s" : "ns", kb < 0 ? -1 : kb * 1024);
        for (int k = 0; k < samples; k++) printf("%s%.6g", k ? ", " : "", smp[t][k]);
        printf("], \"on_cpu_samples\": [");
        for (int k = 0; k < samples; k++) printf("%s%.6g", k ? ", " : "", csmp[t][k]);
        printf("]}\n");
    }
    return 0;
}
#endif
