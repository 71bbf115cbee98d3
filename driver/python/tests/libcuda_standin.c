/* A stand-in for libcuda.so.1 with just the entry points hostcopy's launch
 * functions call, so that CPU tests can check who owns and frees records.
 *
 * - cuLaunchHostFunc on an ordinary stream runs the host function at once,
 *   on the calling thread (the real driver runs it later on its own thread).
 * - STANDIN_CAPTURING_STREAM and STANDIN_CAPTURING_STREAM_TOO report an
 *   active capture into STANDIN_GRAPH (two streams of one capture);
 *   launches on them are stored as graph nodes instead of run.
 * - STANDIN_FAILING_STREAM fails every call with CUDA_ERROR_INVALID_HANDLE,
 *   STANDIN_REFUSING_STREAM only cuLaunchHostFunc, and STANDIN_FAILING_GRAPH
 *   refuses user objects.
 * - standin_replay(graph) runs every node of a graph once;
 *   standin_destroy_graph(graph) runs the destructors of the user objects
 *   the graph holds, as the driver does when a graph and its executables
 *   are gone.
 * - CUDA graph objects are not thread-safe: the calls that change a graph
 *   (cuGraphRetainUserObject, cuGraphAddHostNode, a captured
 *   cuLaunchHostFunc) count each time a thread enters one while another
 *   thread is inside one on the same graph (standin_overlaps()). After
 *   standin_set_rendezvous_us(us) each such call waits up to `us`
 *   microseconds for another thread to join it on that graph, so that
 *   unserialized callers meet there instead of slipping past each other.
 *   The tables are locked, as the real driver's own state is.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*host_fn)(void *);
typedef struct { host_fn fn; void *user_data; } host_node_params;

#define STANDIN_CAPTURING_STREAM ((void *)0xCA9)
#define STANDIN_CAPTURING_STREAM_TOO ((void *)0xCAA)
#define STANDIN_FAILING_STREAM ((void *)0xBAD)
#define STANDIN_REFUSING_STREAM ((void *)0xBAE)
#define STANDIN_FAILING_GRAPH ((void *)0xBAD)
#define STANDIN_GRAPH ((void *)0x6A)
#define INVALID_HANDLE 400
#define MAX 4096

static struct { void *graph; host_fn fn; void *user_data; } nodes[MAX];
static int node_count;
static struct { void *graph; host_fn destroy; void *ptr; int refs; } objects[MAX];
static int object_count;
static pthread_mutex_t tables = PTHREAD_MUTEX_INITIALIZER;

static struct { void *graph; int inside; } busy[64];
static int busy_count;
static int overlaps;
static long rendezvous_us;

static int capturing(void *stream) {
    return stream == STANDIN_CAPTURING_STREAM || stream == STANDIN_CAPTURING_STREAM_TOO;
}

/* How many threads are inside a call on `graph`; under `tables`. */
static int *inside(void *graph) {
    for (int i = 0; i < busy_count; i++)
        if (busy[i].graph == graph) return &busy[i].inside;
    if (busy_count == 64) abort();
    busy[busy_count].graph = graph;
    return &busy[busy_count++].inside;
}

static void enter_graph(void *graph) {
    pthread_mutex_lock(&tables);
    int *count = inside(graph);
    if (*count > 0) overlaps++;
    (*count)++;
    long wait_us = rendezvous_us;
    pthread_mutex_unlock(&tables);
    struct timespec nap = {0, 50 * 1000};
    for (long waited = 0; waited < wait_us; waited += 50) {
        pthread_mutex_lock(&tables);
        int joined = *count > 1;
        pthread_mutex_unlock(&tables);
        if (joined) break;
        nanosleep(&nap, NULL);
    }
}

static void leave_graph(void *graph) {
    pthread_mutex_lock(&tables);
    (*inside(graph))--;
    pthread_mutex_unlock(&tables);
}

int cuInit(unsigned flags) { (void)flags; return 0; }

int cuGetErrorName(unsigned code, const char **name) {
    if (code != INVALID_HANDLE) return 1;
    *name = "CUDA_ERROR_INVALID_HANDLE";
    return 0;
}

/* Returns the node's number (from 1), or 0 when the table is full. */
static int add_node(void *graph, host_fn fn, void *user_data) {
    pthread_mutex_lock(&tables);
    int number = 0;
    if (node_count < MAX) {
        nodes[node_count].graph = graph;
        nodes[node_count].fn = fn;
        nodes[node_count].user_data = user_data;
        number = ++node_count;
    }
    pthread_mutex_unlock(&tables);
    return number;
}

int cuLaunchHostFunc(void *stream, host_fn fn, void *user_data) {
    if (stream == STANDIN_FAILING_STREAM || stream == STANDIN_REFUSING_STREAM) return INVALID_HANDLE;
    if (capturing(stream)) {
        enter_graph(STANDIN_GRAPH);
        int number = add_node(STANDIN_GRAPH, fn, user_data);
        leave_graph(STANDIN_GRAPH);
        return number ? 0 : 2;
    }
    fn(user_data);
    return 0;
}

int cuStreamGetCaptureInfo_v2(void *stream, unsigned *status, uint64_t *id, void **graph,
                              const void ***dependencies, size_t *count) {
    (void)dependencies; (void)count;
    if (stream == STANDIN_FAILING_STREAM) return INVALID_HANDLE;
    int active = capturing(stream);
    *status = active;
    if (id) *id = active;
    if (graph) *graph = active ? STANDIN_GRAPH : NULL;
    return 0;
}

int cuUserObjectCreate(void **object, void *ptr, host_fn destroy, unsigned refs, unsigned flags) {
    (void)flags;
    pthread_mutex_lock(&tables);
    int status = 2;
    if (object_count < MAX) {
        objects[object_count].graph = NULL;
        objects[object_count].destroy = destroy;
        objects[object_count].ptr = ptr;
        objects[object_count].refs = (int)refs;
        *object = (void *)(intptr_t)(object_count + 1);
        object_count++;
        status = 0;
    }
    pthread_mutex_unlock(&tables);
    return status;
}

int cuUserObjectRelease(void *object, unsigned count) {
    int i = (int)(intptr_t)object - 1;
    pthread_mutex_lock(&tables);
    objects[i].refs -= (int)count;
    int destroy = objects[i].refs == 0 && objects[i].graph == NULL;
    pthread_mutex_unlock(&tables);
    if (destroy) objects[i].destroy(objects[i].ptr);
    return 0;
}

int cuGraphRetainUserObject(void *graph, void *object, unsigned count, unsigned flags) {
    int i = (int)(intptr_t)object - 1;
    if (graph == STANDIN_FAILING_GRAPH) return INVALID_HANDLE;
    enter_graph(graph);
    pthread_mutex_lock(&tables);
    objects[i].graph = graph;
    if (!(flags & 1)) objects[i].refs += (int)count; /* without MOVE: a new reference */
    pthread_mutex_unlock(&tables);
    leave_graph(graph);
    return 0;
}

int cuGraphAddHostNode(void **node, void *graph, const void **dependencies, size_t count,
                       const host_node_params *params) {
    (void)dependencies; (void)count;
    enter_graph(graph);
    int number = add_node(graph, params->fn, params->user_data);
    leave_graph(graph);
    if (number == 0) return 2;
    *node = (void *)(intptr_t)(0x1000 + number);
    return 0;
}

/* Test hooks. */
void standin_set_rendezvous_us(long us) {
    pthread_mutex_lock(&tables);
    rendezvous_us = us;
    pthread_mutex_unlock(&tables);
}

int standin_overlaps(void) {
    pthread_mutex_lock(&tables);
    int count = overlaps;
    pthread_mutex_unlock(&tables);
    return count;
}

int standin_replay(void *graph) {
    int ran = 0;
    for (int i = 0; i < node_count; i++)
        if (nodes[i].graph == graph) { nodes[i].fn(nodes[i].user_data); ran++; }
    return ran;
}

int standin_destroy_graph(void *graph) {
    int freed = 0;
    for (int i = 0; i < object_count; i++)
        if (objects[i].graph == graph && objects[i].destroy) {
            objects[i].destroy(objects[i].ptr);
            objects[i].destroy = NULL;
            freed++;
        }
    for (int i = 0; i < node_count; i++)
        if (nodes[i].graph == graph) nodes[i].graph = NULL;
    return freed;
}
