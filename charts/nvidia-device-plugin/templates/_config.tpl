{{/*
The per-node config: whether a ConfigMap of named configs is in use, which one,
and the environment, mount and volume through which every component reads it.
*/}}

{{/* "true" when any ConfigMap of named configs is in use, else empty. */}}
{{- define "nvidia-device-plugin.hasConfigMap" -}}
{{- if or .Values.config.name .Values.config.map -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when the chart creates the ConfigMap from config.map, else empty. */}}
{{- define "nvidia-device-plugin.hasEmbeddedConfigMap" -}}
{{- if .Values.config.map -}}
true
{{- end -}}
{{- end -}}

{{/* Name of the ConfigMap in use, or empty. */}}
{{- define "nvidia-device-plugin.configMapName" -}}
{{- if .Values.config.name -}}
{{- .Values.config.name -}}
{{- else if .Values.config.map -}}
{{- include "nvidia-device-plugin.componentName" (list . "configs") -}}
{{- end -}}
{{- end -}}

{{/*
"true" when a default config can be resolved from config.default or the
fallback strategies for the embedded map, else empty.
*/}}
{{- define "nvidia-device-plugin.hasDefaultConfig" -}}
{{- $result := false -}}
{{- if .Values.config.default -}}
{{- $result = true -}}
{{- else if .Values.config.map -}}
{{- $fallbacks := .Values.config.fallbackStrategies | default list -}}
{{- if and (has "named" $fallbacks) (hasKey .Values.config.map "default") -}}
{{- $result = true -}}
{{- else if and (has "single" $fallbacks) (eq (len .Values.config.map) 1) -}}
{{- $result = true -}}
{{- else if has "empty" $fallbacks -}}
{{- $result = true -}}
{{- end -}}
{{- end -}}
{{- if $result -}}
true
{{- end -}}
{{- end -}}

{{/*
Environment selecting the config of this node from the mounted ConfigMap
directory: the label names it, else the default, else the fallbacks.
*/}}
{{- define "nvidia-device-plugin.configEnv" -}}
{{- if include "nvidia-device-plugin.hasConfigMap" . -}}
- name: CONFIG_DIRECTORY
  value: /available-configs
{{- if .Values.config.default }}
- name: DEFAULT_CONFIG
  value: {{ .Values.config.default | quote }}
{{- end }}
- name: FALLBACK_STRATEGIES
  value: {{ join "," (.Values.config.fallbackStrategies | default list) | quote }}
- name: NODE_LABEL
  value: {{ .Values.config.nodeLabel | quote }}
{{- end -}}
{{- end -}}

{{/* The ConfigMap volume mount, when a ConfigMap is in use. */}}
{{- define "nvidia-device-plugin.configVolumeMount" -}}
{{- if include "nvidia-device-plugin.hasConfigMap" . -}}
- name: available-configs
  mountPath: /available-configs
  readOnly: true
{{- end -}}
{{- end -}}

{{/* The ConfigMap volume, when a ConfigMap is in use. */}}
{{- define "nvidia-device-plugin.configVolume" -}}
{{- if include "nvidia-device-plugin.hasConfigMap" . -}}
- name: available-configs
  configMap:
    name: {{ include "nvidia-device-plugin.configMapName" . }}
{{- end -}}
{{- end -}}
