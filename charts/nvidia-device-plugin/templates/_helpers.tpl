{{/*
Naming, labels, component switches and the pod fields the DaemonSets share.
Every template goes through these helpers (and those of _config.tpl and
_security.tpl) so that the DaemonSets, RBAC, NOTES and validation agree.
*/}}

{{/* Chart name, or nameOverride; 63 characters at most. */}}
{{- define "nvidia-device-plugin.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Fully qualified app name: fullnameOverride, else the release name when it
already contains the chart name, else "<release>-<name>".
*/}}
{{- define "nvidia-device-plugin.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
"<fullname>-<suffix>" within 63 characters. The fullname is cut first so that
long release names still give distinct names per component.
*/}}
{{- define "nvidia-device-plugin.componentName" -}}
{{- $root := index . 0 -}}
{{- $suffix := index . 1 -}}
{{- $room := sub 62 (len $suffix) | int -}}
{{- printf "%s-%s" (include "nvidia-device-plugin.fullname" $root | trunc $room | trimSuffix "-") $suffix -}}
{{- end -}}

{{/* Namespace of every namespaced object. */}}
{{- define "nvidia-device-plugin.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* Chart name and version, for the helm.sh/chart label. */}}
{{- define "nvidia-device-plugin.chart" -}}
{{- printf "%s-%s" (include "nvidia-device-plugin.name" .) .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "nvidia-device-plugin.labels" -}}
helm.sh/chart: {{ include "nvidia-device-plugin.chart" . }}
{{ include "nvidia-device-plugin.templateLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Labels every pod carries; a superset of the selector labels. */}}
{{- define "nvidia-device-plugin.templateLabels" -}}
app.kubernetes.io/name: {{ include "nvidia-device-plugin.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- with .Values.selectorLabelsOverride }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Pod labels of one component: the template labels, the component and podLabels.
Called with (list $ "component").
*/}}
{{- define "nvidia-device-plugin.podLabels" -}}
{{- $root := index . 0 -}}
{{ include "nvidia-device-plugin.templateLabels" $root }}
app.kubernetes.io/component: {{ index . 1 }}
{{- with $root.Values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
DaemonSet selector. It stays name + instance (or the override) for every
component, as in earlier releases of this chart, because a selector cannot
change on upgrade.
*/}}
{{- define "nvidia-device-plugin.selectorLabels" -}}
{{- if .Values.selectorLabelsOverride -}}
{{ toYaml .Values.selectorLabelsOverride }}
{{- else -}}
app.kubernetes.io/name: {{ include "nvidia-device-plugin.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- end -}}

{{/* The one image every container runs. */}}
{{- define "nvidia-device-plugin.fullimage" -}}
{{- $tag := printf "v%s" .Chart.AppVersion -}}
{{- if .Values.image.tag -}}
{{- $tag = toString .Values.image.tag -}}
{{- end -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{/* ServiceAccount of the device plugin. */}}
{{- define "nvidia-device-plugin.serviceAccountName" -}}
{{- include "nvidia-device-plugin.componentName" (list . "service-account") -}}
{{- end -}}

{{/* ServiceAccount of gpu-feature-discovery (it may patch nodes; the plugin may not). */}}
{{- define "nvidia-device-plugin.gfdServiceAccountName" -}}
{{- include "nvidia-device-plugin.componentName" (list . "gfd-service-account") -}}
{{- end -}}

{{/* ServiceAccount of the MPS control daemon (only to read its node's config label). */}}
{{- define "nvidia-device-plugin.mpsServiceAccountName" -}}
{{- include "nvidia-device-plugin.componentName" (list . "mps-service-account") -}}
{{- end -}}

{{/*
"true" when gpu-feature-discovery is deployed: as set by gfd.enabled, else
when the device plugin is not (the chart then serves as the GFD chart).
*/}}
{{- define "nvidia-device-plugin.gfdEnabled" -}}
{{- if kindIs "bool" .Values.gfd.enabled -}}
{{- if .Values.gfd.enabled -}}
true
{{- end -}}
{{- else if not .Values.devicePlugin.enabled -}}
true
{{- end -}}
{{- end -}}

{{/*
Resources of one container: the top-level `resources` (the reference chart's
key, applied to every component) when set, else the component's default.
Called with (list $ "devicePlugin"|"gfd"|"mps").
*/}}
{{- define "nvidia-device-plugin.resources" -}}
{{- $root := index . 0 -}}
{{- $component := index $root.Values (index . 1) -}}
{{- if $root.Values.resources -}}
{{- toYaml $root.Values.resources -}}
{{- else if $component.resources -}}
{{- toYaml $component.resources -}}
{{- end -}}
{{- end -}}

{{/*
Pod-level service account fields: the component's account when it talks to
the API server, otherwise no account token at all.
Called with (list $ "<account name>" <"true" when the account is used>).
*/}}
{{- define "nvidia-device-plugin.podAccount" -}}
{{- if index . 2 -}}
serviceAccountName: {{ index . 1 }}
{{- else -}}
automountServiceAccountToken: false
{{- end -}}
{{- end -}}

{{/* NODE_NAME from the downward API. */}}
{{- define "nvidia-device-plugin.nodeNameEnv" -}}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      apiVersion: v1
      fieldPath: spec.nodeName
{{- end -}}

{{/*
Pod-level placement shared by every DaemonSet: nodeSelector, the given
affinity and tolerations. Called with (list $ <affinity>).
*/}}
{{- define "nvidia-device-plugin.podPlacement" -}}
{{- $root := index . 0 -}}
{{- with $root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with index . 1 }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Pod-level fields shared by every DaemonSet, before the containers. */}}
{{- define "nvidia-device-plugin.podCommon" -}}
{{- if .Values.priorityClassName }}
priorityClassName: {{ .Values.priorityClassName }}
{{- end }}
{{- if .Values.runtimeClassName }}
runtimeClassName: {{ .Values.runtimeClassName }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml (.Values.podSecurityContext | default dict) | nindent 2 }}
{{- end -}}

{{/* Labels that select the device plugin's pods only (not MPS or GFD pods). */}}
{{- define "nvidia-device-plugin.metricsSelector" -}}
{{ include "nvidia-device-plugin.selectorLabels" . }}
app.kubernetes.io/component: device-plugin
{{- end -}}
