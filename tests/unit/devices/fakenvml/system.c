/*
 * Starting and stopping the fake NVML, error strings, system queries and
 * device handles.
 *
 * Init is reference counted as in the real library: every successful init
 * needs its shutdown, the node file is read when the count goes from 0 to 1,
 * and every handle and event set dies when it returns to 0. Without
 * $FAKE_NVML_NODE the library behaves like NVML on a machine whose kernel
 * module is not loaded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakenvml.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&fake_lock);
    if (fake_refcount == 0) {
        const char *path = getenv("FAKE_NVML_NODE");
        nvmlReturn_t loaded = path == NULL || *path == '\0' ? NVML_ERROR_DRIVER_NOT_LOADED
                                                             : fake_load(path);
        if (loaded == NVML_SUCCESS && fake.init_error != NVML_SUCCESS) {
            loaded = fake.init_error;
        }
        if (loaded != NVML_SUCCESS) {
            pthread_mutex_unlock(&fake_lock);
            return loaded;
        }
    }
    fake_refcount++;
    pthread_mutex_unlock(&fake_lock);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&fake_lock);
    if (fake_refcount == 0) {
        pthread_mutex_unlock(&fake_lock);
        return NVML_ERROR_UNINITIALIZED;
    }
    if (--fake_refcount == 0) {
        memset(fake.sets, 0, sizeof fake.sets);
    }
    pthread_mutex_unlock(&fake_lock);
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    ENTER();
    LEAVE(fake_copy_text(version, length, fake.driver_version));
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    ENTER();
    if (version == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    *version = fake.cuda_version;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    return nvmlSystemGetCudaDriverVersion(version);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    ENTER();
    if (count == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    *count = (unsigned int)fake.gpu_count;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    ENTER();
    if (device == NULL || index >= (unsigned int)fake.gpu_count) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (fake.gpus[index].lost) {
        LEAVE(NVML_ERROR_GPU_IS_LOST);
    }
    *device = &fake.gpus[index];
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* GPU and MIG UUIDs both resolve, as they do since MIG exists. */
EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    ENTER();
    if (uuid == NULL || device == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    for (int i = 0; i < fake.gpu_count; i++) {
        struct fake_gpu *gpu = &fake.gpus[i];
        nvmlDevice_t found = NULL;
        if (strcmp(gpu->uuid, uuid) == 0) {
            found = gpu;
        }
        for (int slot = 0; found == NULL && slot < FAKE_MAX_MIGS; slot++) {
            if (gpu->migs[slot].present && strcmp(gpu->migs[slot].uuid, uuid) == 0) {
                found = (nvmlDevice_t)&gpu->migs[slot];
            }
        }
        if (found != NULL) {
            if (gpu->lost) {
                LEAVE(NVML_ERROR_GPU_IS_LOST);
            }
            *device = found;
            LEAVE(NVML_SUCCESS);
        }
    }
    LEAVE(NVML_ERROR_NOT_FOUND);
}
