{{/*
Which component talks to the Kubernetes API, and with which rights. RBAC is
rendered only for what a component actually does with the values given:

- the device plugin watches its own node whenever it has an account (Events
  on, a ConfigMap, or DRA): the GPU cordon annotation, and its config label
  when a ConfigMap of named configs is in use; it posts Events about its node
  (devicePlugin.events); with DRA it publishes its node's ResourceSlices and
  reads the ResourceClaims it prepares;
- gpu-feature-discovery watches its node's config label (with a ConfigMap, so
  its labels describe the config the plugin serves), patches its own node's
  labels (gfd.writeNodeLabels) and publishes a NodeFeature object
  (gfd.useNodeFeatureAPI or the reference chart's nfd.enableNodeFeatureApi);
- the MPS control daemon watches its node's config label (with a ConfigMap,
  so it runs the daemons of the config the plugin serves), and nothing else.

A component with nothing to do there runs without an account token.
*/}}

{{/* "true" when the plugin posts Events about its node. */}}
{{- define "nvidia-device-plugin.eventsEnabled" -}}
{{- if and .Values.devicePlugin.enabled .Values.devicePlugin.events.enabled -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when the plugin watches its node's config label. */}}
{{- define "nvidia-device-plugin.watchesNodeLabel" -}}
{{- if and .Values.devicePlugin.enabled (include "nvidia-device-plugin.hasConfigMap" .) -}}
true
{{- end -}}
{{- end -}}

{{/*
"true" when the DRA parts are rendered (mounts, RBAC, admission policy,
DeviceClass): dra.enabled when set, else kubeletApi=dra. validation.yml
refuses dra.enabled=false with kubeletApi=dra.
*/}}
{{- define "nvidia-device-plugin.draEnabled" -}}
{{- $on := eq (toString .Values.kubeletApi) "dra" -}}
{{- if kindIs "bool" .Values.dra.enabled -}}
{{- $on = .Values.dra.enabled -}}
{{- end -}}
{{- if and .Values.devicePlugin.enabled $on -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when the plugin needs its service account. */}}
{{- define "nvidia-device-plugin.pluginUsesApi" -}}
{{- if or (include "nvidia-device-plugin.eventsEnabled" .) (include "nvidia-device-plugin.watchesNodeLabel" .) (include "nvidia-device-plugin.draEnabled" .) -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when gpu-feature-discovery writes its labels to its node itself. */}}
{{- define "gpu-feature-discovery.writeNodeLabels" -}}
{{- if and (include "nvidia-device-plugin.gfdEnabled" .) .Values.gfd.writeNodeLabels -}}
true
{{- end -}}
{{- end -}}

{{/*
"true" when gpu-feature-discovery publishes a NodeFeature object:
gfd.useNodeFeatureAPI when set, else the reference chart's
nfd.enableNodeFeatureApi.
*/}}
{{- define "gpu-feature-discovery.useNodeFeatureAPI" -}}
{{- $use := false -}}
{{- if kindIs "bool" .Values.gfd.useNodeFeatureAPI -}}
{{- $use = .Values.gfd.useNodeFeatureAPI -}}
{{- else if kindIs "bool" .Values.nfd.enableNodeFeatureApi -}}
{{- $use = .Values.nfd.enableNodeFeatureApi -}}
{{- end -}}
{{- if and (include "nvidia-device-plugin.gfdEnabled" .) $use -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when gpu-feature-discovery watches its node's config label. */}}
{{- define "gpu-feature-discovery.watchesNodeLabel" -}}
{{- if and (include "nvidia-device-plugin.gfdEnabled" .) (include "nvidia-device-plugin.hasConfigMap" .) -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when gpu-feature-discovery needs its service account. */}}
{{- define "gpu-feature-discovery.usesApi" -}}
{{- if or (include "gpu-feature-discovery.writeNodeLabels" .) (include "gpu-feature-discovery.useNodeFeatureAPI" .) (include "gpu-feature-discovery.watchesNodeLabel" .) -}}
true
{{- end -}}
{{- end -}}

{{/*
"true" when the MPS control daemon watches its node's config label, the only
thing it asks the API server; without a ConfigMap it runs without a token.
*/}}
{{- define "mps-control-daemon.watchesNodeLabel" -}}
{{- if and .Values.devicePlugin.enabled (include "nvidia-device-plugin.hasConfigMap" .) -}}
true
{{- end -}}
{{- end -}}

{{/*
"true" when gpu-feature-discovery runs on every node rather than only where
a label already says there is a GPU: it writes node labels itself and no
gfd.affinity is given, so it is what finds new GPU nodes.
*/}}
{{- define "gpu-feature-discovery.findsGpuNodes" -}}
{{- if and (include "gpu-feature-discovery.writeNodeLabels" .) (not (kindIs "map" .Values.gfd.affinity)) -}}
true
{{- end -}}
{{- end -}}

{{/* Node affinity of gpu-feature-discovery, as YAML (empty for none). */}}
{{- define "gpu-feature-discovery.affinity" -}}
{{- if kindIs "map" .Values.gfd.affinity -}}
{{- with .Values.gfd.affinity }}{{ toYaml . }}{{ end -}}
{{- else if include "gpu-feature-discovery.findsGpuNodes" . -}}
nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
      - matchExpressions:
          # Every node, unless it is marked as one without GPUs.
          - key: nvidia.com/gpu.present
            operator: NotIn
            values:
              - "false"
{{- else -}}
{{- with .Values.affinity }}{{ toYaml . }}{{ end -}}
{{- end -}}
{{- end -}}

{{/*
FAIL_ON_INIT_ERROR of gpu-feature-discovery, or empty to leave its default:
gfd.failOnInitError, else the top-level failOnInitError, else "false" when it
runs on every node (it then labels GPU-less nodes instead of crash-looping).
*/}}
{{- define "gpu-feature-discovery.failOnInitError" -}}
{{- if kindIs "bool" .Values.gfd.failOnInitError -}}
{{- .Values.gfd.failOnInitError -}}
{{- else if kindIs "bool" .Values.failOnInitError -}}
{{- .Values.failOnInitError -}}
{{- else if include "gpu-feature-discovery.findsGpuNodes" . -}}
false
{{- end -}}
{{- end -}}
