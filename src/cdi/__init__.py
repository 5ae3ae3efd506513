"""What a CDI spec must carry for a container to reach the NVIDIA driver.

A CDI spec with device nodes only gives a workload `/dev/nvidia*` and no
driver: no `libcuda.so.1`, no `libnvidia-ml.so.1`, no `nvidia-smi`. This
package finds the driver's files in the driver root as this container sees it
(`--driver-root-ctr-path`) and states them as CDI container edits written for
the host (`--nvidia-driver-root`, `--dev-root`):

* `rootfs`: a host directory tree mounted somewhere in this container, with
  symlinks resolved inside that tree (a driver container's absolute links must
  not escape into the plugin container's own files);
* `ldcache`: the glibc `ld.so.cache` formats, parsed from bytes;
* `libraries`, `driverfiles`, `drm`: what exists on the node (driver
  libraries, binaries, firmware, IPC sockets, graphics files, DRM nodes);
* `hooks`, `edits`, `layout`: the CDI edits, the OCI hooks and the host paths;
* `driver`: the composition the spec builder in `resources.cdi_spec` calls.

Everything here is plain synchronous filesystem reading, run from plan
building in a worker thread. The expensive part (the ld cache and the
resolution of its entries) is memoised on the cache file's identity, so a
reconcile pays for a few dozen `stat` calls.
"""
