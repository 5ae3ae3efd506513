/*
 * Event sets of the fake NVML: create, register GPUs, wait, free.
 *
 * An injected event (see node.c) is queued on every live set that registered
 * its GPU for that event type, and nowhere else, like the driver's. Waiting
 * re-reads the control file every few milliseconds until an event is queued
 * or the timeout passes (NVML_ERROR_TIMEOUT), without holding the lock while
 * it sleeps, so other threads keep calling in. A `waiterror` fault makes the
 * next waits fail the way a broken event stream does.
 */
#include <string.h>
#include <time.h>

#include "fakenvml.h"

#define EXPORT __attribute__((visibility("default")))
#define POLL_NS 2000000L

void fake_post_event(struct fake_gpu *gpu, unsigned long long type, unsigned long long data,
                     unsigned int gi, unsigned int ci) {
    for (int i = 0; i < FAKE_MAX_SETS; i++) {
        struct fake_event_set *set = &fake.sets[i];
        if (!set->in_use || (set->masks[gpu->index] & type) == 0) {
            continue;
        }
        if (set->count == FAKE_MAX_QUEUE) {
            continue; /* the driver drops events nobody collects, too */
        }
        int tail = (set->head + set->count) % FAKE_MAX_QUEUE;
        set->queue[tail] = (struct fake_event){.gpu = gpu, .type = type, .data = data, .gi = gi,
                                               .ci = ci};
        set->count++;
    }
}

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *out) {
    ENTER();
    if (out == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    for (int i = 0; i < FAKE_MAX_SETS; i++) {
        if (!fake.sets[i].in_use) {
            memset(&fake.sets[i], 0, sizeof fake.sets[i]);
            fake.sets[i].in_use = 1;
            *out = &fake.sets[i];
            LEAVE(NVML_SUCCESS);
        }
    }
    LEAVE(NVML_ERROR_INSUFFICIENT_RESOURCES);
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t handle) {
    ENTER();
    struct fake_event_set *set = fake_set_of(handle);
    if (set == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    set->in_use = 0;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                             nvmlEventSet_t handle) {
    struct fake_gpu *gpu;
    struct fake_mig *mig;
    ENTER();
    nvmlReturn_t found = fake_device(device, 1, &gpu, &mig);
    if (found != NVML_SUCCESS) {
        LEAVE(found);
    }
    struct fake_event_set *set = fake_set_of(handle);
    if (set == NULL || mig != NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (types == 0 || (types & ~gpu->event_types) != 0) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    if (gpu->register_error != 0) {
        LEAVE((nvmlReturn_t)gpu->register_error);
    }
    set->masks[gpu->index] |= types;
    LEAVE(NVML_SUCCESS);
}

static long elapsed_ms(const struct timespec *since) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - since->tv_sec) * 1000L + (now.tv_nsec - since->tv_nsec) / 1000000L;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t handle, nvmlEventData_t *data,
                                        unsigned int timeout_ms) {
    struct timespec started;
    clock_gettime(CLOCK_MONOTONIC, &started);
    for (;;) {
        ENTER();
        struct fake_event_set *set = fake_set_of(handle);
        if (set == NULL || data == NULL) {
            LEAVE(NVML_ERROR_INVALID_ARGUMENT);
        }
        if (fake.wait_error_count > 0) {
            fake.wait_error_count--;
            LEAVE(fake.wait_error);
        }
        if (set->count > 0) {
            struct fake_event *event = &set->queue[set->head];
            data->device = event->gpu;
            data->eventType = event->type;
            data->eventData = event->data;
            data->gpuInstanceId = event->gi;
            data->computeInstanceId = event->ci;
            set->head = (set->head + 1) % FAKE_MAX_QUEUE;
            set->count--;
            LEAVE(NVML_SUCCESS);
        }
        pthread_mutex_unlock(&fake_lock);
        if (elapsed_ms(&started) >= (long)timeout_ms) {
            return NVML_ERROR_TIMEOUT;
        }
        struct timespec pause = {.tv_sec = 0, .tv_nsec = POLL_NS};
        nanosleep(&pause, NULL);
    }
}
