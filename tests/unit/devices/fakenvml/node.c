/*
 * The node the fake NVML serves, and the faults injected into it.
 *
 * nvmlInit reads the node from the file named by $FAKE_NVML_NODE, one fact a
 * line, a keyword first ('#' starts a comment). Keywords after `gpu` describe
 * that GPU until the next `gpu`; GPU indices are the order of the `gpu` lines.
 *
 *   driver 550.54.15                  nvmlSystemGetDriverVersion
 *   cuda 12040                        nvmlSystemGetCudaDriverVersion(_v2)
 *   initerror 18                      nvmlInit fails with this code
 *   control /path/to/control          the fault file (below)
 *   gpu GPU-...                       a new GPU and its UUID
 *   name NVIDIA A100-SXM4-40GB        (the rest of the line)
 *   bus 00000000:07:00.0              NVML's bus id
 *   pciid 0x20B010DE 0x134F10DE       PCI device and subsystem ids
 *   minor 0                           /dev/nvidia<minor>
 *   memory 42949672960                total bytes
 *   cc 8 0                            CUDA compute capability
 *   mig 1 1 7                         current and pending MIG mode, max MIG devices
 *                                     (no line: MIG is NOT_SUPPORTED)
 *   events 0x1f                       supported event types
 *   registererror 3                   nvmlDeviceRegisterEvents fails with this code
 *   memerrors remap|retire|none       which pending-repair check the GPU offers
 *   links 12                          NVLink count (no line: NVLink NOT_SUPPORTED)
 *   link 0 1 00000000:C4:00.0 2       link, active, remote bus id, remote device type
 *   topo 1 40                         topology level to the GPU of that index
 *   fabric <32 hex> <clique> <state> <status>
 *   giprofile <constant> <id> <slices> <instances> <MiB> <SMs> <CE> <dec> <enc> <jpeg> <ofa>
 *   giplacements <constant> <memory slices> <start>...   possible placements of that profile
 *                                     (no line: the placements query is NOT_SUPPORTED)
 *   ciprofile <constant> <id> <slices>
 *   brand 14                          nvmlBrandType_t (no line: NOT_SUPPORTED)
 *   migdev <slot> <MIG-uuid> <gi> <ci> <gi constant> <ci constant> <MiB>
 *   migattrs <SMs> <CE> <dec> <enc> <jpeg> <ofa>   attributes of the last migdev
 *                                     (no line: nvmlDeviceGetAttributes is NOT_SUPPORTED)
 *   migplacement <start>              first memory slice of the last migdev's instance
 *
 * Faults are lines appended to the control file, one command a line; a line
 * counts once its newline is written. The file is looked at on every call, so
 * an injected fault is seen by the next call from any thread. At nvmlInit the
 * whole file is replayed: lost GPUs stay lost across init/shutdown, as
 * hardware does, and events of the past reach no event set because none
 * exists yet.
 *
 *   xid <uuid> <xid> [<gi> <ci>]   an XID event (a MIG UUID: on its parent, with its GI/CI)
 *   ecc <uuid>                     a double-bit ECC event
 *   sbe <uuid>                     a single-bit ECC event
 *   lost <uuid>                    the GPU fell off the bus: GPU_IS_LOST (see device.c)
 *   pending <uuid>                 a memory repair (page retirement, row remap) is pending
 *   reset <uuid>                   the GPU was reset: it answers again, nothing pending
 *   waiterror <code> <count>       the next <count> nvmlEventSetWait calls fail with <code>
 */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fakenvml.h"

pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
struct fake_node fake;
int fake_refcount;

static void complain(const char *where, int line, const char *what, const char *text) {
    fprintf(stderr, "fakenvml: %s:%d: %s: %s\n", where, line, what, text);
}

static char *trimmed(char *text) {
    while (isspace((unsigned char)*text)) {
        text++;
    }
    size_t length = strlen(text);
    while (length > 0 && isspace((unsigned char)text[length - 1])) {
        text[--length] = '\0';
    }
    return text;
}

static int parse_hex_uuid(const char *hex, unsigned char out[NVML_GPU_FABRIC_UUID_LEN]) {
    if (strlen(hex) != 2 * NVML_GPU_FABRIC_UUID_LEN) {
        return -1;
    }
    for (int i = 0; i < NVML_GPU_FABRIC_UUID_LEN; i++) {
        unsigned int byte;
        if (sscanf(hex + 2 * i, "%2x", &byte) != 1) {
            return -1;
        }
        out[i] = (unsigned char)byte;
    }
    return 0;
}

static struct fake_gi *gpu_instance(struct fake_gpu *gpu, unsigned int id, unsigned int profile) {
    for (int i = 0; i < FAKE_MAX_MIGS; i++) {
        if (gpu->gis[i].present && gpu->gis[i].id == id) {
            return &gpu->gis[i];
        }
    }
    for (int i = 0; i < FAKE_MAX_MIGS; i++) {
        if (!gpu->gis[i].present) {
            gpu->gis[i] = (struct fake_gi){.gpu = gpu, .present = 1, .id = id, .profile = profile};
            return &gpu->gis[i];
        }
    }
    return NULL;
}

/* One description line for GPU `gpu` (NULL before the first `gpu`); 0 when understood. */
static int gpu_fact(struct fake_gpu *gpu, struct fake_mig **last_mig, const char *key,
                    char *rest) {
    char text[FAKE_TEXT];
    unsigned int a, b, c, d, e, f, g, h, i, j, k;
    unsigned long long big;
    int index;
    if (gpu == NULL) {
        return -1;
    }
    if (strcmp(key, "name") == 0) {
        snprintf(gpu->name, sizeof gpu->name, "%s", rest);
    } else if (strcmp(key, "bus") == 0 && sscanf(rest, "%127s", text) == 1) {
        snprintf(gpu->bus_id, sizeof gpu->bus_id, "%s", text);
    } else if (strcmp(key, "pciid") == 0 && sscanf(rest, "%x %x", &a, &b) == 2) {
        gpu->pci_device_id = a;
        gpu->pci_subsystem_id = b;
    } else if (strcmp(key, "minor") == 0 && sscanf(rest, "%u", &a) == 1) {
        gpu->minor = a;
    } else if (strcmp(key, "memory") == 0 && sscanf(rest, "%llu", &big) == 1) {
        gpu->memory_bytes = big;
    } else if (strcmp(key, "brand") == 0 && sscanf(rest, "%u", &a) == 1) {
        gpu->brand = (int)a;
    } else if (strcmp(key, "cc") == 0 && sscanf(rest, "%u %u", &a, &b) == 2) {
        gpu->cc_major = (int)a;
        gpu->cc_minor = (int)b;
    } else if (strcmp(key, "mig") == 0 && sscanf(rest, "%u %u %u", &a, &b, &c) == 3) {
        gpu->mig_supported = 1;
        gpu->mig_current = a;
        gpu->mig_pending = b;
        gpu->max_migs = c;
    } else if (strcmp(key, "events") == 0 && sscanf(rest, "%llx", &big) == 1) {
        gpu->event_types = big;
    } else if (strcmp(key, "registererror") == 0 && sscanf(rest, "%u", &a) == 1) {
        gpu->register_error = (int)a;
    } else if (strcmp(key, "memerrors") == 0) {
        if (strcmp(rest, "remap") == 0) {
            gpu->memory_errors = FAKE_MEMERR_REMAP;
        } else if (strcmp(rest, "retire") == 0) {
            gpu->memory_errors = FAKE_MEMERR_RETIRE;
        } else if (strcmp(rest, "none") == 0) {
            gpu->memory_errors = FAKE_MEMERR_NONE;
        } else {
            return -1;
        }
    } else if (strcmp(key, "links") == 0 && sscanf(rest, "%u", &a) == 1 && a <= FAKE_MAX_LINKS) {
        gpu->link_count = (int)a;
    } else if (strcmp(key, "link") == 0 &&
               sscanf(rest, "%u %u %127s %u", &a, &b, text, &c) == 4 && a < FAKE_MAX_LINKS) {
        struct fake_link *link = &gpu->links[a];
        link->present = 1;
        link->active = (int)b;
        snprintf(link->remote_bus, sizeof link->remote_bus, "%s", text);
        link->remote_type = c;
    } else if (strcmp(key, "topo") == 0 && sscanf(rest, "%d %u", &index, &a) == 2 && index >= 0 &&
               index < FAKE_MAX_GPUS) {
        gpu->topology[index] = (int)a;
    } else if (strcmp(key, "fabric") == 0 &&
               sscanf(rest, "%127s %u %u %d", text, &a, &b, &gpu->fabric_status) == 4 &&
               parse_hex_uuid(text, gpu->cluster_uuid) == 0) {
        gpu->has_fabric = 1;
        gpu->clique_id = a;
        gpu->fabric_state = b;
    } else if (strcmp(key, "giprofile") == 0 &&
               sscanf(rest, "%u %u %u %u %llu %u %u %u %u %u %u", &a, &b, &c, &d, &big, &e, &f,
                      &g, &h, &i, &j) == 11 &&
               a < NVML_GPU_INSTANCE_PROFILE_COUNT) {
        gpu->gi_profiles[a] = (struct fake_gi_profile){
            .present = 1, .id = b, .slices = c, .instances = d, .memory_mib = big,
            .multiprocessors = e, .copy_engines = f, .decoders = g, .encoders = h, .jpegs = i,
            .ofas = j};
    } else if (strcmp(key, "giplacements") == 0 && sscanf(rest, "%u %u", &a, &b) == 2 &&
               a < NVML_GPU_INSTANCE_PROFILE_COUNT && gpu->gi_profiles[a].present) {
        struct fake_gi_profile *profile = &gpu->gi_profiles[a];
        char *cursor = rest;
        char *end = NULL;
        profile->placement_size = b;
        profile->placement_count = 0;
        strtoul(cursor, &end, 10); /* the constant */
        cursor = end;
        strtoul(cursor, &end, 10); /* the size */
        cursor = end;
        for (;;) {
            unsigned long start = strtoul(cursor, &end, 10);
            if (end == cursor) {
                break;
            }
            if (profile->placement_count >= FAKE_MAX_PLACEMENTS) {
                return -1;
            }
            profile->placement_starts[profile->placement_count++] = (unsigned int)start;
            cursor = end;
        }
        if (profile->placement_count == 0 || *trimmed(cursor) != '\0') {
            return -1;
        }
    } else if (strcmp(key, "ciprofile") == 0 && sscanf(rest, "%u %u %u", &a, &b, &c) == 3 &&
               a < NVML_COMPUTE_INSTANCE_PROFILE_COUNT) {
        gpu->ci_profiles[a] = (struct fake_ci_profile){.present = 1, .id = b, .slices = c};
    } else if (strcmp(key, "migdev") == 0 &&
               sscanf(rest, "%u %127s %u %u %u %u %llu", &a, text, &b, &c, &d, &e, &big) == 7 &&
               a < FAKE_MAX_MIGS) {
        struct fake_mig *mig = &gpu->migs[a];
        *mig = (struct fake_mig){.parent = gpu, .present = 1, .gi = b, .ci = c, .gi_profile = d,
                                 .ci_profile = e, .memory_mib = big};
        snprintf(mig->uuid, sizeof mig->uuid, "%s", text);
        mig->ci_handle.mig = mig;
        if (gpu_instance(gpu, b, d) == NULL) {
            return -1;
        }
        *last_mig = mig;
    } else if (strcmp(key, "migattrs") == 0 && *last_mig != NULL &&
               sscanf(rest, "%u %u %u %u %u %u", &f, &g, &h, &i, &j, &k) == 6) {
        struct fake_mig *mig = *last_mig;
        mig->has_attributes = 1;
        mig->multiprocessors = f;
        mig->copy_engines = g;
        mig->decoders = h;
        mig->encoders = i;
        mig->jpegs = j;
        mig->ofas = k;
    } else if (strcmp(key, "migplacement") == 0 && *last_mig != NULL &&
               sscanf(rest, "%u", &a) == 1) {
        struct fake_gi *instance = gpu_instance(gpu, (*last_mig)->gi, (*last_mig)->gi_profile);
        if (instance == NULL) {
            return -1;
        }
        instance->start = a;
    } else {
        return -1;
    }
    return 0;
}

nvmlReturn_t fake_load(const char *path) {
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        fprintf(stderr, "fakenvml: cannot open node file %s: %s\n", path, strerror(errno));
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    memset(&fake, 0, sizeof fake);
    struct fake_gpu *gpu = NULL;
    struct fake_mig *last_mig = NULL;
    char buffer[2048];
    int line = 0;
    nvmlReturn_t result = NVML_SUCCESS;
    while (fgets(buffer, sizeof buffer, file) != NULL) {
        line++;
        char *text = trimmed(buffer);
        if (*text == '\0' || *text == '#') {
            continue;
        }
        char key[32];
        int used = 0;
        if (sscanf(text, "%31s%n", key, &used) != 1) {
            continue;
        }
        char *rest = trimmed(text + used);
        int bad = 0;
        if (strcmp(key, "driver") == 0) {
            snprintf(fake.driver_version, sizeof fake.driver_version, "%s", rest);
        } else if (strcmp(key, "cuda") == 0) {
            bad = sscanf(rest, "%d", &fake.cuda_version) != 1;
        } else if (strcmp(key, "initerror") == 0) {
            int code;
            bad = sscanf(rest, "%d", &code) != 1;
            fake.init_error = (nvmlReturn_t)code;
        } else if (strcmp(key, "control") == 0) {
            snprintf(fake.control_path, sizeof fake.control_path, "%s", rest);
        } else if (strcmp(key, "gpu") == 0) {
            if (fake.gpu_count == FAKE_MAX_GPUS) {
                bad = 1;
            } else {
                gpu = &fake.gpus[fake.gpu_count];
                gpu->index = (unsigned int)fake.gpu_count++;
                snprintf(gpu->uuid, sizeof gpu->uuid, "%s", rest);
                for (int peer = 0; peer < FAKE_MAX_GPUS; peer++) {
                    gpu->topology[peer] = -1;
                }
                gpu->brand = -1;
                last_mig = NULL;
            }
        } else {
            bad = gpu_fact(gpu, &last_mig, key, rest) != 0;
        }
        if (bad) {
            complain(path, line, "cannot use this line", text);
            result = NVML_ERROR_UNKNOWN;
        }
    }
    fclose(file);
    if (result == NVML_SUCCESS) {
        fake.control_offset = 0;
        fake_poll_control();
    }
    return result;
}

/* ---- faults ------------------------------------------------------------------ */

static struct fake_gpu *gpu_by_uuid(const char *uuid, struct fake_mig **mig) {
    *mig = NULL;
    for (int i = 0; i < fake.gpu_count; i++) {
        struct fake_gpu *gpu = &fake.gpus[i];
        if (strcmp(gpu->uuid, uuid) == 0) {
            return gpu;
        }
        for (int slot = 0; slot < FAKE_MAX_MIGS; slot++) {
            if (gpu->migs[slot].present && strcmp(gpu->migs[slot].uuid, uuid) == 0) {
                *mig = &gpu->migs[slot];
                return gpu;
            }
        }
    }
    return NULL;
}

static void command(const char *line) {
    char verb[32], uuid[FAKE_TEXT];
    unsigned long long xid;
    unsigned int gi, ci;
    int code, count;
    if (sscanf(line, "waiterror %d %d", &code, &count) == 2) {
        fake.wait_error = (nvmlReturn_t)code;
        fake.wait_error_count = count;
        return;
    }
    int fields = sscanf(line, "%31s %127s %llu %u %u", verb, uuid, &xid, &gi, &ci);
    struct fake_mig *mig;
    struct fake_gpu *gpu = fields >= 2 ? gpu_by_uuid(uuid, &mig) : NULL;
    if (gpu == NULL) {
        fprintf(stderr, "fakenvml: ignoring control line (no such device): %s\n", line);
        return;
    }
    if (strcmp(verb, "xid") == 0 && (fields == 3 || fields == 5)) {
        if (mig != NULL) {
            gi = mig->gi;
            ci = mig->ci;
        } else if (fields == 3) {
            gi = ci = NVML_INSTANCE_NONE;
        }
        fake_post_event(gpu, nvmlEventTypeXidCriticalError, xid, gi, ci);
    } else if (strcmp(verb, "ecc") == 0 && fields == 2) {
        fake_post_event(gpu, nvmlEventTypeDoubleBitEccError, 0, NVML_INSTANCE_NONE,
                        NVML_INSTANCE_NONE);
    } else if (strcmp(verb, "sbe") == 0 && fields == 2) {
        fake_post_event(gpu, nvmlEventTypeSingleBitEccError, 0, NVML_INSTANCE_NONE,
                        NVML_INSTANCE_NONE);
    } else if (strcmp(verb, "lost") == 0 && fields == 2) {
        gpu->lost = 1;
    } else if (strcmp(verb, "pending") == 0 && fields == 2) {
        gpu->memory_pending = 1;
    } else if (strcmp(verb, "reset") == 0 && fields == 2) {
        gpu->lost = 0;
        gpu->memory_pending = 0;
    } else {
        fprintf(stderr, "fakenvml: ignoring control line: %s\n", line);
    }
}

void fake_poll_control(void) {
    if (fake.control_path[0] == '\0') {
        return;
    }
    struct stat seen;
    if (stat(fake.control_path, &seen) != 0) {
        return;
    }
    if (seen.st_size < fake.control_offset) {
        fake.control_offset = 0; /* truncated: what it says now is the whole story */
    }
    if (seen.st_size == fake.control_offset) {
        return;
    }
    FILE *file = fopen(fake.control_path, "r");
    if (file == NULL) {
        return;
    }
    if (fseek(file, fake.control_offset, SEEK_SET) == 0) {
        char line[512];
        while (fgets(line, sizeof line, file) != NULL) {
            size_t length = strlen(line);
            if (length == 0 || line[length - 1] != '\n') {
                break; /* not complete yet: read it again next time */
            }
            fake.control_offset += (long)length;
            char *text = trimmed(line);
            if (*text != '\0' && *text != '#') {
                command(text);
            }
        }
    }
    fclose(file);
}

/* ---- handles ------------------------------------------------------------------- */

struct fake_gpu *fake_gpu_of(nvmlDevice_t handle) {
    uintptr_t at = (uintptr_t)handle, first = (uintptr_t)&fake.gpus[0];
    if (at < first || (at - first) % sizeof(struct fake_gpu) != 0) {
        return NULL;
    }
    size_t index = (at - first) / sizeof(struct fake_gpu);
    return index < (size_t)fake.gpu_count ? &fake.gpus[index] : NULL;
}

struct fake_mig *fake_mig_of(nvmlDevice_t handle) {
    uintptr_t at = (uintptr_t)handle;
    for (int i = 0; i < fake.gpu_count; i++) {
        uintptr_t first = (uintptr_t)&fake.gpus[i].migs[0];
        uintptr_t end = (uintptr_t)&fake.gpus[i].migs[FAKE_MAX_MIGS];
        if (at >= first && at < end && (at - first) % sizeof(struct fake_mig) == 0) {
            struct fake_mig *mig = (struct fake_mig *)handle;
            return mig->present ? mig : NULL;
        }
    }
    return NULL;
}

struct fake_gi *fake_gi_of(nvmlGpuInstance_t handle) {
    uintptr_t at = (uintptr_t)handle;
    for (int i = 0; i < fake.gpu_count; i++) {
        uintptr_t first = (uintptr_t)&fake.gpus[i].gis[0];
        uintptr_t end = (uintptr_t)&fake.gpus[i].gis[FAKE_MAX_MIGS];
        if (at >= first && at < end && (at - first) % sizeof(struct fake_gi) == 0) {
            return handle->present ? handle : NULL;
        }
    }
    return NULL;
}

struct fake_mig *fake_ci_of(nvmlComputeInstance_t handle) {
    for (int i = 0; i < fake.gpu_count; i++) {
        for (int slot = 0; slot < FAKE_MAX_MIGS; slot++) {
            struct fake_mig *mig = &fake.gpus[i].migs[slot];
            if (mig->present && &mig->ci_handle == handle) {
                return mig;
            }
        }
    }
    return NULL;
}

struct fake_event_set *fake_set_of(nvmlEventSet_t handle) {
    for (int i = 0; i < FAKE_MAX_SETS; i++) {
        if (&fake.sets[i] == handle && fake.sets[i].in_use) {
            return handle;
        }
    }
    return NULL;
}

/* ---- small helpers ---------------------------------------------------------------- */

nvmlReturn_t fake_copy_text(char *out, unsigned int length, const char *text) {
    if (out == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (strlen(text) + 1 > length) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(out, text, strlen(text) + 1);
    return NVML_SUCCESS;
}

void fake_fill_pci(nvmlPciInfo_t *pci, const char *bus_id, unsigned int device_id,
                   unsigned int subsystem_id) {
    unsigned int domain = 0, bus = 0, device = 0, function = 0;
    memset(pci, 0, sizeof *pci);
    sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &device, &function);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = device;
    pci->pciDeviceId = device_id;
    pci->pciSubSystemId = subsystem_id;
    snprintf(pci->busId, sizeof pci->busId, "%s", bus_id);
    /* the legacy field is too short for an 8-digit domain: the driver writes 4 */
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", domain & 0xFFFFU,
             bus, device, function);
}

/*
 * The GPU behind a device handle (a MIG device's parent) and the MIG device,
 * if it is one. With `live`, a lost GPU answers GPU_IS_LOST: only the facts
 * the library holds from init (UUID, name, PCI info, minor number) are read
 * without `live`.
 */
nvmlReturn_t fake_device(nvmlDevice_t handle, int live, struct fake_gpu **gpu,
                         struct fake_mig **mig) {
    *mig = NULL;
    *gpu = fake_gpu_of(handle);
    if (*gpu == NULL) {
        *mig = fake_mig_of(handle);
        if (*mig == NULL) {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        *gpu = (*mig)->parent;
    }
    return live && (*gpu)->lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}
