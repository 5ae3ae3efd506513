"""DRA device-health API v1alpha1 (package `v1alpha1`, service `DRAResourceHealth`): stubs."""
