/* decode_clock: an LD_PRELOAD library that counts a process's decode calls
 * (llama_decode, and llama_process as llama-server calls it), the time spent in them and
 * the tokens they computed, so that a benchmark can split llama-server's wall time into
 * decode and the rest (its host work), as llamabatch's Stats.step_split does in process.
 *
 * The totals live in a 24-byte file named by $LLAMABATCH_DECODE_CLOCK (made by the
 * benchmark, zero-filled), mapped shared: three uint64 in native order: calls,
 * nanoseconds in them, and the context's token count (llama_perf_context's n_p_eval +
 * n_eval after the last call). The benchmark reads the file between passes, while the
 * server is idle. Without the variable, or if the file cannot be mapped, calls pass
 * through uncounted.
 *
 * The real functions are found with dlsym(RTLD_NEXT): the program must link libllama
 * dynamically (llama.cpp's default CMake build does).
 *
 *     gcc -O2 -shared -fPIC -o decode_clock.so decode_clock.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* llama.h's struct llama_batch and struct llama_perf_context_data, as llama-cpp-python
 * 0.3.36 vendors them; the batch is passed on as is. */
struct llama_batch {
    int32_t n_tokens;
    void *token, *embd, *pos, *n_seq_id, *seq_id;
    int8_t *logits;
};
struct llama_perf_context_data {
    double t_start_ms, t_load_ms, t_p_eval_ms, t_eval_ms;
    int32_t n_p_eval, n_eval, n_reused;
};

typedef int32_t (*decode_fn)(void *ctx, struct llama_batch batch);
typedef int32_t (*process_fn)(void *ctx, int type, void *batch);
typedef struct llama_perf_context_data (*perf_fn)(const void *ctx);

static decode_fn real_decode;
static process_fn real_process;
static perf_fn perf;
static uint64_t *totals; /* calls, nanoseconds, tokens */
static int attached;

static void attach(void) {
    attached = 1;
    real_decode = (decode_fn)dlsym(RTLD_NEXT, "llama_decode");
    real_process = (process_fn)dlsym(RTLD_NEXT, "llama_process");
    perf = (perf_fn)dlsym(RTLD_NEXT, "llama_perf_context");
    const char *path = getenv("LLAMABATCH_DECODE_CLOCK");
    if (path == NULL) return;
    int fd = open(path, O_RDWR);
    if (fd < 0) return;
    void *p = mmap(NULL, 3 * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p != MAP_FAILED) totals = p;
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void count(void *ctx, uint64_t t0, uint64_t t1) {
    if (totals == NULL) return;
    totals[0] += 1;
    totals[1] += t1 - t0;
    if (perf != NULL) {
        struct llama_perf_context_data d = perf(ctx);
        totals[2] = (uint64_t)d.n_p_eval + (uint64_t)d.n_eval;
    }
}

int32_t llama_decode(void *ctx, struct llama_batch batch) {
    if (!attached) attach();
    uint64_t t0 = now_ns();
    int32_t rc = real_decode(ctx, batch);
    count(ctx, t0, now_ns());
    return rc;
}

int32_t llama_process(void *ctx, int type, void *batch) {
    if (!attached) attach();
    uint64_t t0 = now_ns();
    int32_t rc = real_process(ctx, type, batch);
    count(ctx, t0, now_ns());
    return rc;
}
