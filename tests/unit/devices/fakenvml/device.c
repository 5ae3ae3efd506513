/*
 * Per-device queries of the fake NVML: identity, memory, PCI, compute
 * capability, topology, NVLink, fabric and the memory-repair checks.
 *
 * A lost GPU (the `lost` fault) still answers what the library read at init
 * (name, UUID, PCI info, minor number), and GPU_IS_LOST to everything that
 * has to ask the GPU. Features a GPU does not have answer NOT_SUPPORTED, a
 * link number past the GPU's links INVALID_ARGUMENT, and a versioned struct
 * with a version this library does not know ARGUMENT_VERSION_MISMATCH, as
 * the driver does.
 */
#include <string.h>

#include "fakenvml.h"

#define EXPORT __attribute__((visibility("default")))

#define DEVICE(handle, live)                                 \
    struct fake_gpu *gpu;                                    \
    struct fake_mig *mig;                                    \
    ENTER();                                                 \
    do {                                                     \
        nvmlReturn_t found = fake_device(handle, live, &gpu, &mig); \
        if (found != NVML_SUCCESS) {                         \
            LEAVE(found);                                    \
        }                                                    \
    } while (0)

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    DEVICE(device, 0);
    LEAVE(fake_copy_text(name, length, gpu->name));
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    DEVICE(device, 0);
    LEAVE(fake_copy_text(uuid, length, mig != NULL ? mig->uuid : gpu->uuid));
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor) {
    DEVICE(device, 0);
    if (minor == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (mig != NULL) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    *minor = gpu->minor;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEVICE(device, 0);
    if (pci == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    fake_fill_pci(pci, gpu->bus_id, gpu->pci_device_id, gpu->pci_subsystem_id);
    LEAVE(NVML_SUCCESS);
}

static unsigned long long total_bytes(const struct fake_gpu *gpu, const struct fake_mig *mig) {
    return mig != NULL ? mig->memory_mib << 20U : gpu->memory_bytes;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    DEVICE(device, 1);
    if (memory == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    memory->total = total_bytes(gpu, mig);
    memory->used = 0;
    memory->free = memory->total;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    DEVICE(device, 1);
    if (memory == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (memory->version != nvmlMemory_v2) {
        LEAVE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    }
    memory->total = total_bytes(gpu, mig);
    memory->reserved = 0;
    memory->used = 0;
    memory->free = memory->total;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major,
                                                        int *minor) {
    DEVICE(device, 1);
    if (major == NULL || minor == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    *major = gpu->cc_major;
    *minor = gpu->cc_minor;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, int *brand) {
    DEVICE(device, 0);
    if (brand == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (gpu->brand < 0 || mig != NULL) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    *brand = gpu->brand;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t first, nvmlDevice_t second,
                                                         nvmlGpuTopologyLevel_t *level) {
    DEVICE(first, 1);
    struct fake_gpu *other;
    struct fake_mig *other_mig;
    nvmlReturn_t found = fake_device(second, 1, &other, &other_mig);
    if (found != NVML_SUCCESS) {
        LEAVE(found);
    }
    if (level == NULL || mig != NULL || other_mig != NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (other == gpu) {
        *level = NVML_TOPOLOGY_INTERNAL;
        LEAVE(NVML_SUCCESS);
    }
    if (gpu->topology[other->index] < 0) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    *level = (nvmlGpuTopologyLevel_t)gpu->topology[other->index];
    LEAVE(NVML_SUCCESS);
}

/* ---- NVLink --------------------------------------------------------------------- */

static nvmlReturn_t link_of(struct fake_gpu *gpu, struct fake_mig *mig, unsigned int link,
                            struct fake_link **out) {
    if (mig != NULL || gpu->link_count == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (link >= (unsigned int)gpu->link_count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *out = &gpu->links[link];
    return NVML_SUCCESS;
}

#define LINK(device, link)                                 \
    struct fake_link *nvlink = NULL;                       \
    DEVICE(device, 1);                                     \
    do {                                                   \
        nvmlReturn_t usable = link_of(gpu, mig, link, &nvlink); \
        if (usable != NVML_SUCCESS) {                      \
            LEAVE(usable);                                 \
        }                                                  \
    } while (0)

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                             nvmlEnableState_t *active) {
    LINK(device, link);
    if (active == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    *active = nvlink->present && nvlink->active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                        nvmlPciInfo_t *pci) {
    LINK(device, link);
    if (pci == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!nvlink->present) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    fake_fill_pci(pci, nvlink->remote_bus, 0, 0);
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                        nvmlIntNvLinkDeviceType_t *type) {
    LINK(device, link);
    if (type == NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    *type = nvlink->present ? (nvmlIntNvLinkDeviceType_t)nvlink->remote_type
                            : NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
    LEAVE(NVML_SUCCESS);
}

/* ---- fabric ----------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info) {
    DEVICE(device, 1);
    if (info == NULL || mig != NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_fabric) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    memcpy(info->clusterUuid, gpu->cluster_uuid, sizeof info->clusterUuid);
    info->status = (nvmlReturn_t)gpu->fabric_status;
    info->cliqueId = gpu->clique_id;
    info->state = gpu->fabric_state;
    LEAVE(NVML_SUCCESS);
}

/* `info` is a v2 or a v3 record; its first field says which. */
EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfo_v3_t *info) {
    DEVICE(device, 1);
    if (info == NULL || mig != NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (info->version != nvmlGpuFabricInfo_v2 && info->version != nvmlGpuFabricInfo_v3) {
        LEAVE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    }
    if (!gpu->has_fabric) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    memcpy(info->clusterUuid, gpu->cluster_uuid, sizeof info->clusterUuid);
    info->status = (nvmlReturn_t)gpu->fabric_status;
    info->cliqueId = gpu->clique_id;
    info->state = gpu->fabric_state;
    info->healthMask = 0;
    if (info->version == nvmlGpuFabricInfo_v3) {
        info->healthSummary = 0;
    }
    LEAVE(NVML_SUCCESS);
}

/* ---- memory repairs and events ------------------------------------------------------ */

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                           nvmlEnableState_t *pending) {
    DEVICE(device, 1);
    if (pending == NULL || mig != NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (gpu->memory_errors != FAKE_MEMERR_RETIRE) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    *pending = gpu->memory_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrected,
                                              unsigned int *uncorrected, unsigned int *pending,
                                              unsigned int *failed) {
    DEVICE(device, 1);
    if (corrected == NULL || uncorrected == NULL || pending == NULL || failed == NULL ||
        mig != NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (gpu->memory_errors != FAKE_MEMERR_REMAP) {
        LEAVE(NVML_ERROR_NOT_SUPPORTED);
    }
    *corrected = 0;
    *uncorrected = gpu->memory_pending ? 1 : 0;
    *pending = gpu->memory_pending ? 1 : 0;
    *failed = 0;
    LEAVE(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                     unsigned long long *types) {
    DEVICE(device, 1);
    if (types == NULL || mig != NULL) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    *types = gpu->event_types;
    LEAVE(NVML_SUCCESS);
}
