"""DRA device-health API v1beta1 (package `v1beta1`, service `DRAResourceHealth`): stubs."""
