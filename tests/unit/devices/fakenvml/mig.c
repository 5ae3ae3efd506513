/*
 * MIG in the fake NVML: the mode, MIG device handles by slot, GPU and compute
 * instances with their profile ids, and the profile tables behind them.
 *
 * A MIG device handle is the `struct fake_mig` of its slot; a GPU instance
 * handle the `struct fake_gi` of its id; a compute instance handle the one
 * embedded in its MIG device (each described MIG device is one GI + CI pair).
 * The profile tables are per GPU, as the driver's are: a GI profile constant
 * the GPU does not offer answers NOT_SUPPORTED, one past the enum
 * INVALID_ARGUMENT; a CI profile is offered inside a GPU instance when its
 * slices fit.
 */
#include <stdio.h>
#include <string.h>

#include "fakenvml.h"

#define EXPORT __attribute__((visibility("default")))

#define DEVICE(handle)                                       \
    struct fake_gpu *gpu;                                    \
    struct fake_mig *mig;                                    \
    ENTER();                                                 \
    do {                                                     \
        nvmlReturn_t found = fake_device(handle, 1, &gpu, &mig); \
        if (found != NVML_SUCCESS) {                         \
            LEAVE(found);                                    \
        }                                                    \
    } while (0)

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current,
                                         unsigned int *pending) {
    DEVICE(device);
    if (current == NULL || pending == NULL || mig != NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->mig_supported) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    *current = gpu->mig_current;
    *pending = gpu->mig_pending;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    DEVICE(device);
    if (count == NULL || mig != NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->mig_supported) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    *count = gpu->max_migs;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *out) {
    DEVICE(device);
    if (out == NULL || mig != NULL || index >= gpu->max_migs || index >= FAKE_MAX_MIGS) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->mig_supported || gpu->mig_current != 1) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    if (!gpu->migs[index].present) {
        LEAVE(NVML_ERROR_NOT_FOUND);
    }
    *out = (nvmlDevice_t)&gpu->migs[index];
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t device,
                                                                 nvmlDevice_t *parent) {
    DEVICE(device);
    if (parent == NULL || mig == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    *parent = gpu;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *is_mig) {
    DEVICE(device);
    if (is_mig == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    *is_mig = mig != NULL;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    DEVICE(device);
    if (id == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (mig == NULL) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    *id = mig->gi;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    DEVICE(device);
    if (id == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (mig == NULL) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    *id = mig->ci;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device,
                                               nvmlDeviceAttributes_t *attributes) {
    DEVICE(device);
    if (attributes == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (mig == NULL || !mig->has_attributes) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    attributes->multiprocessorCount = mig->multiprocessors;
    attributes->sharedCopyEngineCount = mig->copy_engines;
    attributes->sharedDecoderCount = mig->decoders;
    attributes->sharedEncoderCount = mig->encoders;
    attributes->sharedJpegCount = mig->jpegs;
    attributes->sharedOfaCount = mig->ofas;
    attributes->gpuInstanceSliceCount = gpu->gi_profiles[mig->gi_profile].slices;
    attributes->computeInstanceSliceCount = gpu->ci_profiles[mig->ci_profile].slices;
    attributes->memorySizeMB = mig->memory_mib;
    LEAVE(NVML_SUCCESS);
}

/* ---- GPU and compute instances -------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                 nvmlGpuInstance_t *instance) {
    DEVICE(device);
    if (instance == NULL || mig != NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->mig_supported || gpu->mig_current != 1) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    for (int i = 0; i < FAKE_MAX_MIGS; i++) {
        if (gpu->gis[i].present && gpu->gis[i].id == id) {
            *instance = &gpu->gis[i];
            LEAVE(NVML_SUCCESS);
        }
    }
    LEAVE(NVML_ERROR_NOT_FOUND);
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t instance, nvmlGpuInstanceInfo_t *info) {
    ENTER();
    struct fake_gi *gi = fake_gi_of(instance);
    if (gi == NULL || info == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (gi->gpu->lost) {
        LEAVE(NVML_ERROR_GPU_IS_LOST);
    }
    const struct fake_gi_profile *profile = &gi->gpu->gi_profiles[gi->profile];
    info->device = gi->gpu;
    info->id = gi->id;
    info->profileId = profile->id;
    info->placement.start = gi->start;
    info->placement.size = profile->slices;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t instance,
                                                          unsigned int id,
                                                          nvmlComputeInstance_t *out) {
    ENTER();
    struct fake_gi *gi = fake_gi_of(instance);
    if (gi == NULL || out == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (gi->gpu->lost) {
        LEAVE(NVML_ERROR_GPU_IS_LOST);
    }
    for (int slot = 0; slot < FAKE_MAX_MIGS; slot++) {
        struct fake_mig *mig = &gi->gpu->migs[slot];
        if (mig->present && mig->gi == gi->id && mig->ci == id) {
            *out = &mig->ci_handle;
            LEAVE(NVML_SUCCESS);
        }
    }
    LEAVE(NVML_ERROR_NOT_FOUND);
}

EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t instance,
                                                  nvmlComputeInstanceInfo_t *info) {
    ENTER();
    struct fake_mig *mig = fake_ci_of(instance);
    if (mig == NULL || info == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    struct fake_gpu *gpu = mig->parent;
    if (gpu->lost) {
        LEAVE(NVML_ERROR_GPU_IS_LOST);
    }
    info->device = gpu;
    info->gpuInstance = NULL;
    for (int i = 0; i < FAKE_MAX_MIGS; i++) {
        if (gpu->gis[i].present && gpu->gis[i].id == mig->gi) {
            info->gpuInstance = &gpu->gis[i];
        }
    }
    info->id = mig->ci;
    info->profileId = gpu->ci_profiles[mig->ci_profile].id;
    info->placement.start = 0;
    info->placement.size = gpu->ci_profiles[mig->ci_profile].slices;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t instance,
                                               nvmlComputeInstanceInfo_t *info) {
    return nvmlComputeInstanceGetInfo_v2(instance, info);
}

/* ---- profile tables ---------------------------------------------------------------------- */

static nvmlReturn_t gi_profile_of(nvmlDevice_t device, unsigned int constant,
                                  const struct fake_gi_profile **out) {
    struct fake_gpu *gpu;
    struct fake_mig *mig;
    nvmlReturn_t found = fake_device(device, 1, &gpu, &mig);
    if (found != NVML_SUCCESS) {
        return found;
    }
    if (mig != NULL || constant >= NVML_GPU_INSTANCE_PROFILE_COUNT) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!gpu->mig_supported || !gpu->gi_profiles[constant].present) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *out = &gpu->gi_profiles[constant];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int constant,
                                                        nvmlGpuInstanceProfileInfo_t *info) {
    const struct fake_gi_profile *profile = NULL;
    ENTER();
    if (info == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    nvmlReturn_t offered = gi_profile_of(device, constant, &profile);
    if (offered != NVML_SUCCESS) {
        LEAVE(offered);
    }
    *info = (nvmlGpuInstanceProfileInfo_t){
        .id = profile->id, .isP2pSupported = 0, .sliceCount = profile->slices,
        .instanceCount = profile->instances, .multiprocessorCount = profile->multiprocessors,
        .copyEngineCount = profile->copy_engines, .decoderCount = profile->decoders,
        .encoderCount = profile->encoders, .jpegCount = profile->jpegs, .ofaCount = profile->ofas,
        .memorySizeMB = profile->memory_mib};
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int constant,
                                                         nvmlGpuInstanceProfileInfo_v2_t *info) {
    const struct fake_gi_profile *profile = NULL;
    ENTER();
    if (info == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (info->version != nvmlGpuInstanceProfileInfo_v2) {
        LEAVE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    }
    nvmlReturn_t offered = gi_profile_of(device, constant, &profile);
    if (offered != NVML_SUCCESS) {
        LEAVE(offered);
    }
    *info = (nvmlGpuInstanceProfileInfo_v2_t){
        .version = info->version, .id = profile->id, .isP2pSupported = 0,
        .sliceCount = profile->slices, .instanceCount = profile->instances,
        .multiprocessorCount = profile->multiprocessors, .copyEngineCount = profile->copy_engines,
        .decoderCount = profile->decoders, .encoderCount = profile->encoders,
        .jpegCount = profile->jpegs, .ofaCount = profile->ofas,
        .memorySizeMB = profile->memory_mib};
    snprintf(info->name, sizeof info->name, "MIG %ug", profile->slices);
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t device, unsigned int profile_id, nvmlGpuInstancePlacement_t *placements,
    unsigned int *count) {
    DEVICE(device);
    if (count == NULL || mig != NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->mig_supported) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    const struct fake_gi_profile *profile = NULL;
    for (int constant = 0; constant < NVML_GPU_INSTANCE_PROFILE_COUNT; constant++) {
        if (gpu->gi_profiles[constant].present && gpu->gi_profiles[constant].id == profile_id) {
            profile = &gpu->gi_profiles[constant];
            break;
        }
    }
    if (profile == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (profile->placement_count == 0) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    /* A NULL array asks for the count; otherwise the array holds every placement. */
    if (placements != NULL) {
        for (unsigned int n = 0; n < profile->placement_count; n++) {
            placements[n].start = profile->placement_starts[n];
            placements[n].size = profile->placement_size;
        }
    }
    *count = profile->placement_count;
    LEAVE(NVML_SUCCESS);
}

static nvmlReturn_t ci_profile_of(nvmlGpuInstance_t instance, unsigned int constant,
                                  unsigned int engines, const struct fake_ci_profile **out) {
    struct fake_gi *gi = fake_gi_of(instance);
    if (gi == NULL || constant >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
        engines >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (gi->gpu->lost) {
        return NVML_ERROR_GPU_IS_LOST;
    }
    const struct fake_ci_profile *profile = &gi->gpu->ci_profiles[constant];
    if (!profile->present || profile->slices > gi->gpu->gi_profiles[gi->profile].slices) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *out = profile;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t instance, unsigned int constant, unsigned int engines,
    nvmlComputeInstanceProfileInfo_t *info) {
    const struct fake_ci_profile *profile = NULL;
    ENTER();
    if (info == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    nvmlReturn_t offered = ci_profile_of(instance, constant, engines, &profile);
    if (offered != NVML_SUCCESS) {
        LEAVE(offered);
    }
    *info = (nvmlComputeInstanceProfileInfo_t){
        .id = profile->id, .sliceCount = profile->slices, .instanceCount = 1};
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    nvmlGpuInstance_t instance, unsigned int constant, unsigned int engines,
    nvmlComputeInstanceProfileInfo_v2_t *info) {
    const struct fake_ci_profile *profile = NULL;
    ENTER();
    if (info == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (info->version != nvmlComputeInstanceProfileInfo_v2) {
        LEAVE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    }
    nvmlReturn_t offered = ci_profile_of(instance, constant, engines, &profile);
    if (offered != NVML_SUCCESS) {
        LEAVE(offered);
    }
    *info = (nvmlComputeInstanceProfileInfo_v2_t){
        .version = info->version, .id = profile->id, .sliceCount = profile->slices,
        .instanceCount = 1};
    snprintf(info->name, sizeof info->name, "MIG %uc", profile->slices);
    LEAVE(NVML_SUCCESS);
}
