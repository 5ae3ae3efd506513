/*
 * A fake libnvidia-ml.so.1 for the tests: the NVML C API over a node described
 * in a small text file, so the plugin's pynvml backend runs through ctypes,
 * real struct layouts, struct versions and return codes on a machine without a
 * GPU.
 *
 * The types below mirror nvml.h: the same field order, sizes and version
 * numbers (NVML_STRUCT_VERSION = sizeof | version << 24), because a layout
 * mistake on either side is exactly what these tests exist to catch. Only the
 * entry points that the plugin's backend and the pynvml functions it calls use
 * are implemented; anything else is absent, and pynvml turns a missing symbol
 * into NVML_ERROR_FUNCTION_NOT_FOUND just as it does with an older driver.
 *
 * How the node is described and how faults are injected is documented in
 * node.c. Every entry point takes the one library lock, so the health
 * watcher's thread and discovery can call in at the same time.
 */
#ifndef FAKENVML_H
#define FAKENVML_H

#include <pthread.h>
#include <stddef.h>

/* ---- nvml.h: return codes ------------------------------------------------ */

typedef enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((unsigned int)(ver) << 24U))

/* ---- nvml.h: sizes and enums --------------------------------------------- */

#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_GPU_FABRIC_UUID_LEN 16
#define NVML_GPU_INSTANCE_PROFILE_COUNT 0x12
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT 0x09
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT 0x1
#define NVML_INSTANCE_NONE 0xFFFFFFFFU

#define nvmlEventTypeSingleBitEccError 0x0000000000000001ULL
#define nvmlEventTypeDoubleBitEccError 0x0000000000000002ULL
#define nvmlEventTypeXidCriticalError 0x0000000000000008ULL

typedef enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 } nvmlEnableState_t;

typedef enum {
    NVML_NVLINK_DEVICE_TYPE_GPU = 0x00,
    NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01,
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02,
    NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
} nvmlIntNvLinkDeviceType_t;

typedef enum {
    NVML_TOPOLOGY_INTERNAL = 0,
    NVML_TOPOLOGY_SINGLE = 10,
    NVML_TOPOLOGY_MULTIPLE = 20,
    NVML_TOPOLOGY_HOSTBRIDGE = 30,
    NVML_TOPOLOGY_NODE = 40,
    NVML_TOPOLOGY_SYSTEM = 50
} nvmlGpuTopologyLevel_t;

/* ---- nvml.h: handles (opaque to callers) ---------------------------------- */

typedef struct fake_gpu *nvmlDevice_t; /* a GPU or, for MIG handles, a struct fake_mig */
typedef struct fake_gi *nvmlGpuInstance_t;
typedef struct fake_ci *nvmlComputeInstance_t;
typedef struct fake_event_set *nvmlEventSet_t;

/* ---- nvml.h: structures ---------------------------------------------------- */

typedef struct {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 NVML_STRUCT_VERSION(sizeof(nvmlMemory_v2_t), 2)

typedef struct {
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    unsigned int gpuInstanceSliceCount;
    unsigned int computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

typedef struct {
    unsigned int start;
    unsigned int size;
} nvmlGpuInstancePlacement_t;

typedef struct {
    nvmlDevice_t device;
    unsigned int id;
    unsigned int profileId;
    nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct {
    unsigned int start;
    unsigned int size;
} nvmlComputeInstancePlacement_t;

typedef struct {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpuInstance;
    unsigned int id;
    unsigned int profileId;
    nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

typedef struct {
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct {
    unsigned int version;
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlGpuInstanceProfileInfo_v2_t;
#define nvmlGpuInstanceProfileInfo_v2 NVML_STRUCT_VERSION(sizeof(nvmlGpuInstanceProfileInfo_v2_t), 2)

typedef struct {
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

typedef struct {
    unsigned int version;
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlComputeInstanceProfileInfo_v2_t;
#define nvmlComputeInstanceProfileInfo_v2 \
    NVML_STRUCT_VERSION(sizeof(nvmlComputeInstanceProfileInfo_v2_t), 2)

typedef struct {
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned int state;
} nvmlGpuFabricInfo_t;

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned int state;
    unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;
#define nvmlGpuFabricInfo_v2 NVML_STRUCT_VERSION(sizeof(nvmlGpuFabricInfo_v2_t), 2)

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned int state;
    unsigned int healthMask;
    unsigned char healthSummary;
} nvmlGpuFabricInfo_v3_t;
#define nvmlGpuFabricInfo_v3 NVML_STRUCT_VERSION(sizeof(nvmlGpuFabricInfo_v3_t), 3)

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

/* The sizes that the versions above and pynvml's ctypes records depend on. */
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout");
_Static_assert(sizeof(nvmlMemory_v2_t) == 0x28, "nvmlMemory_v2_t layout");
_Static_assert(sizeof(nvmlDeviceAttributes_t) == 40, "nvmlDeviceAttributes_t layout");
_Static_assert(nvmlGpuInstanceProfileInfo_v2 == 0x02000098, "GPU instance profile info v2");
_Static_assert(nvmlComputeInstanceProfileInfo_v2 == 0x02000088, "compute instance profile info v2");
_Static_assert(nvmlGpuFabricInfo_v2 == 0x02000024, "fabric info v2");
_Static_assert(nvmlGpuFabricInfo_v3 == 0x03000028, "fabric info v3");
_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t layout");

/* ---- the node this library serves ------------------------------------------ */

#define FAKE_MAX_GPUS 32
#define FAKE_MAX_LINKS 36 /* NVML_NVLINK_MAX_LINKS of recent drivers */
#define FAKE_MAX_MIGS 16
#define FAKE_MAX_SETS 16
#define FAKE_MAX_QUEUE 256
#define FAKE_TEXT 128

enum fake_memory_errors { FAKE_MEMERR_NONE = 0, FAKE_MEMERR_RETIRE = 1, FAKE_MEMERR_REMAP = 2 };

struct fake_link {
    int present;
    int active;
    char remote_bus[FAKE_TEXT];
    unsigned int remote_type;
};

#define FAKE_MAX_PLACEMENTS 8

struct fake_gi_profile {
    int present;
    unsigned int id, slices, instances, multiprocessors, copy_engines, decoders, encoders, jpegs,
        ofas;
    unsigned long long memory_mib;
    /* possible placements (`giplacements`); none: the query answers NOT_SUPPORTED */
    unsigned int placement_size, placement_count;
    unsigned int placement_starts[FAKE_MAX_PLACEMENTS];
};

struct fake_ci_profile {
    int present;
    unsigned int id, slices;
};

struct fake_gpu;

struct fake_gi {
    struct fake_gpu *gpu;
    int present;
    unsigned int id;
    unsigned int profile; /* GPU-instance profile constant */
    unsigned int start;   /* first memory slice of its placement */
};

struct fake_mig;

struct fake_ci {
    struct fake_mig *mig;
};

struct fake_mig {
    struct fake_gpu *parent;
    int present;
    char uuid[FAKE_TEXT];
    unsigned int gi, ci;
    unsigned int gi_profile, ci_profile; /* profile constants */
    unsigned long long memory_mib;
    int has_attributes;
    unsigned int multiprocessors, copy_engines, decoders, encoders, jpegs, ofas;
    struct fake_ci ci_handle;
};

struct fake_gpu {
    unsigned int index;
    char uuid[FAKE_TEXT];
    char name[FAKE_TEXT];
    char bus_id[FAKE_TEXT]; /* NVML form: 00000000:07:00.0 */
    unsigned int pci_device_id, pci_subsystem_id;
    unsigned int minor;
    unsigned long long memory_bytes;
    int cc_major, cc_minor;
    int brand; /* nvmlBrandType_t; -1: NOT_SUPPORTED */
    int mig_supported;
    unsigned int mig_current, mig_pending, max_migs;
    unsigned long long event_types;
    int register_error; /* nvmlDeviceRegisterEvents fails with this code (0: it works) */
    int memory_errors; /* enum fake_memory_errors */
    int link_count;    /* 0: no NVLink (calls answer NOT_SUPPORTED) */
    struct fake_link links[FAKE_MAX_LINKS];
    int topology[FAKE_MAX_GPUS]; /* level to each peer index, -1 when unknown */
    int has_fabric;
    unsigned char cluster_uuid[NVML_GPU_FABRIC_UUID_LEN];
    unsigned int clique_id, fabric_state;
    int fabric_status;
    struct fake_gi_profile gi_profiles[NVML_GPU_INSTANCE_PROFILE_COUNT];
    struct fake_ci_profile ci_profiles[NVML_COMPUTE_INSTANCE_PROFILE_COUNT];
    struct fake_mig migs[FAKE_MAX_MIGS]; /* by MIG slot */
    struct fake_gi gis[FAKE_MAX_MIGS];
    /* what injected faults changed; cleared by a reset */
    int lost;
    int memory_pending;
};

struct fake_event {
    struct fake_gpu *gpu;
    unsigned long long type, data;
    unsigned int gi, ci;
};

struct fake_event_set {
    int in_use;
    unsigned long long masks[FAKE_MAX_GPUS]; /* registered event types per GPU index */
    struct fake_event queue[FAKE_MAX_QUEUE];
    int head, count;
};

struct fake_node {
    char driver_version[FAKE_TEXT];
    int cuda_version;
    nvmlReturn_t init_error;
    char control_path[1024];
    long control_offset;
    int gpu_count;
    struct fake_gpu gpus[FAKE_MAX_GPUS];
    struct fake_event_set sets[FAKE_MAX_SETS];
    nvmlReturn_t wait_error; /* the next `wait_error_count` waits fail with this */
    int wait_error_count;
};

extern pthread_mutex_t fake_lock;
extern struct fake_node fake;
extern int fake_refcount;

/* node.c */
nvmlReturn_t fake_load(const char *path);
void fake_poll_control(void);
struct fake_gpu *fake_gpu_of(nvmlDevice_t handle);
nvmlReturn_t fake_device(nvmlDevice_t handle, int live, struct fake_gpu **gpu,
                         struct fake_mig **mig);
struct fake_mig *fake_mig_of(nvmlDevice_t handle);
struct fake_gi *fake_gi_of(nvmlGpuInstance_t handle);
struct fake_mig *fake_ci_of(nvmlComputeInstance_t handle);
struct fake_event_set *fake_set_of(nvmlEventSet_t handle);
nvmlReturn_t fake_copy_text(char *out, unsigned int length, const char *text);
void fake_fill_pci(nvmlPciInfo_t *pci, const char *bus_id, unsigned int device_id,
                   unsigned int subsystem_id);

/* events.c */
void fake_post_event(struct fake_gpu *gpu, unsigned long long type, unsigned long long data,
                     unsigned int gi, unsigned int ci);

/*
 * Every entry point starts with ENTER: the lock, the initialised check and a
 * look at the control file (so an injected fault is seen by the very next
 * call), and leaves through LEAVE(code).
 */
#define ENTER()                                   \
    pthread_mutex_lock(&fake_lock);               \
    if (fake_refcount == 0) {                     \
        pthread_mutex_unlock(&fake_lock);         \
        return NVML_ERROR_UNINITIALIZED;          \
    }                                             \
    fake_poll_control()

#define LEAVE(code)                       \
    do {                                  \
        nvmlReturn_t leave_code = (code); \
        pthread_mutex_unlock(&fake_lock); \
        return leave_code;                \
    } while (0)

#endif
