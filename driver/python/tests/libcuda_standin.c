/* A stand-in for libcuda.so.1 with just the entry points hostcopy's launch
 * functions call, so that CPU tests can check who owns and frees records.
 *
 * - cuLaunchHostFunc on an ordinary stream runs the host function at once,
 *   on the calling thread (the real driver runs it later on its own thread).
 * - STANDIN_CAPTURING_STREAM reports an active capture into STANDIN_GRAPH;
 *   launches on it are stored as graph nodes instead of run.
 * - STANDIN_FAILING_STREAM fails every call with CUDA_ERROR_INVALID_HANDLE,
 *   STANDIN_REFUSING_STREAM only cuLaunchHostFunc, and STANDIN_FAILING_GRAPH
 *   refuses user objects.
 * - standin_replay(graph) runs every node of a graph once;
 *   standin_destroy_graph(graph) runs the destructors of the user objects
 *   the graph holds, as the driver does when a graph and its executables
 *   are gone.
 */
#include <stddef.h>
#include <stdint.h>

typedef void (*host_fn)(void *);
typedef struct { host_fn fn; void *user_data; } host_node_params;

#define STANDIN_CAPTURING_STREAM ((void *)0xCA9)
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

int cuInit(unsigned flags) { (void)flags; return 0; }

int cuGetErrorName(unsigned code, const char **name) {
    if (code != INVALID_HANDLE) return 1;
    *name = "CUDA_ERROR_INVALID_HANDLE";
    return 0;
}

static int add_node(void *graph, host_fn fn, void *user_data) {
    if (node_count == MAX) return 2;
    nodes[node_count].graph = graph;
    nodes[node_count].fn = fn;
    nodes[node_count].user_data = user_data;
    node_count++;
    return 0;
}

int cuLaunchHostFunc(void *stream, host_fn fn, void *user_data) {
    if (stream == STANDIN_FAILING_STREAM || stream == STANDIN_REFUSING_STREAM) return INVALID_HANDLE;
    if (stream == STANDIN_CAPTURING_STREAM) return add_node(STANDIN_GRAPH, fn, user_data);
    fn(user_data);
    return 0;
}

int cuStreamGetCaptureInfo_v2(void *stream, unsigned *status, uint64_t *id, void **graph,
                              const void ***dependencies, size_t *count) {
    (void)dependencies; (void)count;
    if (stream == STANDIN_FAILING_STREAM) return INVALID_HANDLE;
    int capturing = stream == STANDIN_CAPTURING_STREAM;
    *status = capturing;
    if (id) *id = capturing;
    if (graph) *graph = capturing ? STANDIN_GRAPH : NULL;
    return 0;
}

int cuUserObjectCreate(void **object, void *ptr, host_fn destroy, unsigned refs, unsigned flags) {
    (void)flags;
    if (object_count == MAX) return 2;
    objects[object_count].graph = NULL;
    objects[object_count].destroy = destroy;
    objects[object_count].ptr = ptr;
    objects[object_count].refs = (int)refs;
    *object = (void *)(intptr_t)(object_count + 1);
    object_count++;
    return 0;
}

int cuUserObjectRelease(void *object, unsigned count) {
    int i = (int)(intptr_t)object - 1;
    objects[i].refs -= (int)count;
    if (objects[i].refs == 0 && objects[i].graph == NULL) objects[i].destroy(objects[i].ptr);
    return 0;
}

int cuGraphRetainUserObject(void *graph, void *object, unsigned count, unsigned flags) {
    int i = (int)(intptr_t)object - 1;
    if (graph == STANDIN_FAILING_GRAPH) return INVALID_HANDLE;
    objects[i].graph = graph;
    if (!(flags & 1)) objects[i].refs += (int)count; /* without MOVE: a new reference */
    return 0;
}

int cuGraphAddHostNode(void **node, void *graph, const void **dependencies, size_t count,
                       const host_node_params *params) {
    (void)dependencies; (void)count;
    int status = add_node(graph, params->fn, params->user_data);
    if (status == 0) *node = (void *)(intptr_t)(0x1000 + node_count);
    return status;
}

/* Test hooks. */
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
